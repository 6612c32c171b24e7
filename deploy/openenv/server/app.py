"""The ASGI app OpenEnv's tooling serves (``openenv.yaml``: ``app: server.app:app``): one
harness-gym environment, chosen by ``HARNESS_GYM_ENV``, behind the token in ``HARNESS_GYM_ENV_TOKEN``.
The same server as ``harness-gym serve-env``, and the same rule: a container serves beyond
loopback, so without a token it refuses to start unless ``HARNESS_GYM_ALLOW_NO_TOKEN=1`` says so."""

import os

from harness_gym.env_server import create_env_app

token = os.environ.get("HARNESS_GYM_ENV_TOKEN") or None
if token is None and os.environ.get("HARNESS_GYM_ALLOW_NO_TOKEN") != "1":
    raise SystemExit(
        "refusing to serve without a token: anyone who reaches the port could run code in its sandboxes; "
        "set HARNESS_GYM_ENV_TOKEN (or HARNESS_GYM_ALLOW_NO_TOKEN=1 to serve openly on purpose)"
    )
app, registry = create_env_app(
    os.environ.get("HARNESS_GYM_ENV", "Harness-S1T2O0C1W2"),
    max_sessions=int(os.environ.get("HARNESS_GYM_MAX_SESSIONS", "32")),
    token=token,
)
