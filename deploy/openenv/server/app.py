"""The ASGI app OpenEnv's tooling serves (``openenv.yaml``: ``app: server.app:app``): one
harness-gym environment, chosen by ``HARNESS_GYM_ENV``, behind the token in ``HARNESS_GYM_ENV_TOKEN``
(if set). The same server as ``harness-gym serve-env``."""

import os

from harness_gym.env_server import create_env_app

app, registry = create_env_app(
    os.environ.get("HARNESS_GYM_ENV", "Harness-S1T2O0C1W2"),
    max_sessions=int(os.environ.get("HARNESS_GYM_MAX_SESSIONS", "32")),
    token=os.environ.get("HARNESS_GYM_ENV_TOKEN") or None,
)
