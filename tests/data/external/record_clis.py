"""Record real CLIs' requests through the model proxy, trimmed, into ``recordings/<cli>.json``.

Not a test: run by hand after installing the CLIs (``npm i`` into ``--prefix``, mini-swe-agent in a
venv there) to refresh the request shapes ``tests/test_external_proxy.py`` replays::

    python tests/data/external/record_clis.py --prefix /tmp/h26p-cli claude-code codex gemini-cli qwen-code

Each CLI runs on the host against a loopback proxy with a scripted policy (one shell call, then a
final answer) and the switches of ``shared/EXTERNAL_HARNESSES.md``; long strings (system prompts, tool
descriptions) are cut to keep the files small, every key and list is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness_gym.external.policies import ScriptedPolicy
from harness_gym.external.proxy import ModelProxy

HERE = Path(__file__).parent / "recordings"
TASK = "Create a file named hello.txt containing hi, using the shell."
MODEL = "hg-model"
PACKAGES = {
    "claude-code": "@anthropic-ai/claude-code",
    "claude-code-bare": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "gemini-cli": "@google/gemini-cli",
    "qwen-code": "@qwen-code/qwen-code",
}


def trim(value: Any, limit: int = 240) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"…[{len(value) - limit} more]"
    if isinstance(value, list):
        return [trim(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: trim(v, limit) for k, v in value.items()}
    return value


def setup(cli: str, prefix: Path, url: str, secret: str, home: Path) -> tuple[list[str], dict[str, str], str, str]:
    """(argv, env, shell tool, its argument) for one CLI."""
    bin_dir = prefix / "node_modules" / ".bin"
    bare = cli == "claude-code-bare"
    cli = "claude-code" if bare else cli
    env = {"HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(home)}
    if cli == "claude-code":
        env.update(
            ANTHROPIC_BASE_URL=url,
            ANTHROPIC_AUTH_TOKEN=secret,
            CLAUDE_CONFIG_DIR=str(home / ".claude"),
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_TELEMETRY="1",
            DISABLE_ERROR_REPORTING="1",
            DISABLE_AUTOUPDATER="1",
            IS_SANDBOX="1",
            ANTHROPIC_SMALL_FAST_MODEL=MODEL,
            CLAUDE_CODE_SUBAGENT_MODEL=MODEL,
            ANTHROPIC_DEFAULT_HAIKU_MODEL=MODEL,
            ANTHROPIC_DEFAULT_SONNET_MODEL=MODEL,
            ANTHROPIC_DEFAULT_OPUS_MODEL=MODEL,
        )
        argv = [
            "claude",
            "-p",
            TASK,
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            MODEL,
            "--permission-mode",
            "bypassPermissions",
            "--max-turns",
            "4",
        ]
        return argv, env, "Bash", "command"
    if cli == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir()
        (codex_home / "config.toml").write_text(
            'model_provider = "hg"\ncheck_for_update_on_startup = false\n'
            f'[model_providers.hg]\nname = "hg"\nbase_url = "{url}/v1"\nenv_key = "HG_KEY"\n'
            'wire_api = "responses"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
            "[features]\nplugins = false\nremote_plugin = false\napps = false\nin_app_updates = false\n"
            '[analytics]\nenabled = false\n[otel]\nexporter = "none"\n'
        )
        env.update(CODEX_HOME=str(codex_home), HG_KEY=secret)
        argv = [
            "codex",
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "-m",
            MODEL,
            TASK,
        ]
        return argv, env, "exec_command", "cmd"
    if cli in ("gemini-cli", "qwen-code"):
        gemini = cli == "gemini-cli"
        folder = home / (".gemini" if gemini else ".qwen")
        folder.mkdir()
        settings = {
            "security": {
                "auth": {"selectedType": "gemini-api-key" if gemini else "openai"},
                "folderTrust": {"enabled": False},
            },
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        }
        (folder / "settings.json").write_text(json.dumps(settings))
        if gemini:
            env.update(
                GOOGLE_GEMINI_BASE_URL=url,
                GEMINI_API_KEY=secret,
                GEMINI_CLI_TRUST_WORKSPACE="true",
                GEMINI_CLI_NO_RELAUNCH="true",
            )
            argv = ["gemini", "-p", TASK, "--output-format", "stream-json", "--yolo", "-m", MODEL]
        else:
            env.update(OPENAI_BASE_URL=f"{url}/v1", OPENAI_API_KEY=secret, OPENAI_MODEL=MODEL)
            argv = [
                "qwen",
                "-p",
                TASK,
                "--output-format",
                "stream-json",
                "--yolo",
                "--auth-type",
                "openai",
                "-m",
                MODEL,
            ]
        return argv, env, "run_shell_command", "command"
    if cli == "mini-swe-agent":
        env.update(
            OPENAI_API_BASE=f"{url}/v1",
            OPENAI_API_KEY=secret,
            MSWEA_CONFIGURED="true",
            MSWEA_COST_TRACKING="ignore_errors",
            LITELLM_LOCAL_MODEL_COST_MAP="True",
        )
        argv = [
            str(prefix / "venv" / "bin" / "mini"),
            "-t",
            TASK,
            "-m",
            f"openai/{MODEL}",
            "-y",
            "--exit-immediately",
            "-l",
            "0",
            "-o",
            str(home / "traj.json"),
        ]
        return argv, env, "bash", "command"
    raise SystemExit(f"unknown CLI {cli}")


def record(cli: str, prefix: Path, timeout: float) -> dict[str, Any]:
    with ModelProxy(port=0) as proxy, tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        work = Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        channel = proxy.open_rollout(ScriptedPolicy([]), models=[MODEL])
        argv, env, tool, argument = setup(cli, prefix, proxy.url, channel.secret, home)
        final = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" if cli == "mini-swe-agent" else None
        commands = ["echo hi > hello.txt"] + ([final] if final else [])
        channel.policy = ScriptedPolicy.shell(commands, tool=tool, argument=argument)
        started = time.time()
        try:
            done = subprocess.run(
                argv, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, text=True
            )
            exit_code: int | None = done.returncode
            tail = (done.stdout + done.stderr)[-1500:]
        except subprocess.TimeoutExpired as exc:
            exit_code, tail = None, str(exc.stdout or "")[-1500:]
        created = (work / "hello.txt").exists()
        package = prefix / "node_modules" / PACKAGES.get(cli, "-") / "package.json"
        return {
            "cli": cli,
            "version": json.loads(package.read_text())["version"] if package.exists() else None,
            "exit_code": exit_code,
            "seconds": round(time.time() - started, 1),
            "hello_created": created,
            "output_tail": tail if exit_code != 0 or not created else "",
            "records": [
                trim(
                    {
                        "dialect": r.dialect,
                        "path": r.path,
                        "status": r.status,
                        "side": r.side,
                        "headers": {
                            k: v
                            for k, v in r.headers.items()
                            if k
                            in (
                                "content-type",
                                "content-encoding",
                                "anthropic-version",
                                "anthropic-beta",
                                "user-agent",
                                "accept",
                            )
                        },
                        "request": r.request,
                        "response": r.response,
                        "error": r.error,
                    }
                )
                for r in channel.records
            ],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("clis", nargs="+")
    parser.add_argument("--prefix", type=Path, default=Path("/tmp/h26p-cli"), help="holds node_modules/ and venv/")
    parser.add_argument(
        "--install",
        action="append",
        default=[],
        metavar="CLI=DIR",
        help="another prefix for one CLI (e.g. harness-gym external path's tree)",
    )
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    HERE.mkdir(parents=True, exist_ok=True)
    prefixes = dict(item.split("=", 1) for item in args.install)
    for cli in args.clis:
        result = record(cli, Path(prefixes.get(cli, args.prefix)), args.timeout)
        (HERE / f"{cli}.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
        statuses = [(r["path"], r["status"], r["side"]) for r in result["records"]]
        print(cli, "exit", result["exit_code"], "created", result["hello_created"], f"{result['seconds']}s", statuses)
        if result["output_tail"]:
            print(result["output_tail"])


if __name__ == "__main__":
    main()
