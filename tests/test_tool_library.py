"""Every built-in library tool, run in the real sandbox through an environment."""

import json

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv, Task
from harness_gym.presets import load_preset

pytestmark = requires_bwrap


@pytest.fixture(scope="module")
def repo_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    (root / "pkg").mkdir()
    (root / "tests").mkdir()
    (root / "pkg" / "alpha.py").write_text("def alpha_value():\n    return 1\n")
    (root / "pkg" / "beta.py").write_text("def beta_value():\n    return 2\n")
    (root / "pkg" / "test_inner.py").write_text(
        "import unittest\n\n\nclass T(unittest.TestCase):\n    def test(self):\n        pass\n"
    )
    (root / "tests" / "test_alpha.py").write_text(
        "import unittest\nfrom pkg.alpha import alpha_value\n\n\nclass T(unittest.TestCase):\n"
        "    def test(self):\n        self.assertEqual(alpha_value(), 10)\n"
    )
    (root / "tests" / "test_beta.py").write_text(
        "import unittest\nfrom pkg.beta import beta_value\n\n\nclass T(unittest.TestCase):\n"
        "    def test(self):\n        self.assertEqual(beta_value(), 2)\n"
    )
    grader = tmp_path_factory.mktemp("grader")
    (grader / "grade.py").write_text("print(0.0)\n")
    return Task(
        id="repo",
        instruction="Make alpha_value return 10.",
        mount_path="/testbed",
        workspace_dir=root,
        grader_files=(grader,),
    )


def make_env(task, preset="HarnessAdapt-H2", **kwargs):
    env = HarnessEnv(spec=load_preset(preset), tasks=[task], **kwargs)
    env.reset(seed=0)
    return env


def call(env, name, **arguments):
    obs, _, _, _, info = env.step(f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")
    tool_messages = [m for m in obs["messages"] if m["role"] == "tool"]
    return tool_messages[-1]["content"], info


def test_read_edit_diff_restore(repo_task):
    env = make_env(repo_task)
    out, _ = call(env, "read_file", path="pkg/alpha.py", start_line=2, end_line=2)
    assert "     2\t    return 1" in out and "[lines 2-2 of 3]" in out
    out, info = call(env, "edit_file", path="pkg/alpha.py", old_text="return", new_text="return 10 or")
    assert info["exit_codes"] == [0]
    out, info = call(env, "edit_file", path="pkg/alpha.py", old_text="nothing like this", new_text="x")
    assert info["exit_codes"] == [1] and "was not found" in out
    (env.workspace / "pkg" / "dup.py").write_text("x = 1\nx = 1\n")
    out, _ = call(env, "edit_file", path="pkg/dup.py", old_text="x = 1", new_text="y")
    assert "occurs 2 times" in out and "lines [1, 2]" in out
    out, _ = call(env, "view_diff")
    assert "--- a/pkg/alpha.py" in out and "+    return 10 or 1" in out
    assert "--- /dev/null\n+++ b/pkg/dup.py" in out  # a file created in the episode
    out, _ = call(env, "restore_file", path="pkg/alpha.py")
    assert "Restored" in out and (env.workspace / "pkg/alpha.py").read_text() == "def alpha_value():\n    return 1\n"
    out, _ = call(env, "restore_file", path="pkg/dup.py")
    assert "did not exist" in out and not (env.workspace / "pkg/dup.py").exists()
    out, _ = call(env, "view_diff")
    assert out.strip() == "No changes since the start of the episode."
    env.close()


def test_run_check_ranks_tests_and_delivery_evidence(repo_task):
    env = make_env(repo_task)
    out, _ = call(env, "delivery_evidence")
    assert "Changed files: none" in out and "none run" in out
    call(env, "edit_file", path="pkg/alpha.py", old_text="return 1", new_text="return 10")
    out, _ = call(env, "run_check")
    # test_alpha: filename +3, symbol reference +2; pkg/test_inner: same directory +1; test_beta: 0
    assert "tests/test_alpha.py (score 5)" in out and "pkg/test_inner.py (score 1)" in out
    assert "test_beta" not in out.split("Command:")[0]
    assert "Result: PASSED" in out
    out, _ = call(env, "delivery_evidence")
    assert "Changed files: pkg/alpha.py" in out and "passed" in out and "after the last edit" in out
    call(env, "edit_file", path="pkg/alpha.py", old_text="return 10", new_text="return 11")
    out, _ = call(env, "delivery_evidence")
    assert "BEFORE the last edit" in out
    out, _ = call(env, "run_check", paths=["tests/test_alpha.py"])
    assert "Result: FAILED" in out
    env.close()


def test_search(repo_task):
    env = make_env(repo_task)
    out, _ = call(env, "search", pattern=r"def \w+_value", glob="*.py")
    assert "pkg/alpha.py:1: def alpha_value():" in out and "pkg/beta.py:1:" in out
    out, info = call(env, "search", pattern="(unclosed")
    assert info["exit_codes"] == [1] and "invalid regular expression" in out
    env.close()


def test_claude_code_style_tools(repo_task):
    env = make_env(repo_task, "Harness-ClaudeCodeStyle")
    out, _ = call(env, "Read", file_path="/testbed/pkg/alpha.py")
    assert out.splitlines()[0] == "     1\u2192def alpha_value():"
    out, _ = call(env, "Edit", file_path="/testbed/pkg/alpha.py", old_string="return 1", new_string="return 10")
    assert out.strip() == "The file /testbed/pkg/alpha.py has been updated."
    out, _ = call(env, "Write", file_path="/testbed/notes.md", content="hello")
    assert out.strip() == "File created successfully at: /testbed/notes.md"
    out, _ = call(env, "Glob", pattern="*.py", path="/testbed/pkg")
    assert "/testbed/pkg/alpha.py" in out
    out, _ = call(env, "Grep", pattern="value", output_mode="count", path="/testbed/pkg")
    assert "/testbed/pkg/alpha.py:1" in out
    out, _ = call(
        env, "Grep", pattern="VALUE", **{"-i": True, "-n": True}, output_mode="content", path="/testbed/pkg/beta.py"
    )
    assert out.strip() == "/testbed/pkg/beta.py:1:def beta_value():"
    out, _ = call(env, "TodoWrite", todos=[{"content": "Fix", "activeForm": "Fixing", "status": "in_progress"}])
    assert "Todos have been modified successfully" in out
    out, _ = call(env, "Bash", command="sleep 5", timeout=1000)
    assert "timed out after 1 s" in out
    out, _ = call(env, "Bash", command="echo started-bg; sleep 1", run_in_background=True)
    assert "Started in the background" in out
    env.close()


def test_openclaw_style_tools(repo_task):
    env = make_env(repo_task, "Harness-OpenClawStyle")
    (env.workspace / "long.txt").write_text("\n".join(f"line {i}" for i in range(1, 501)))
    out, _ = call(env, "read", path="long.txt", offset=1, limit=100)
    assert out.rstrip().endswith("[Showing lines 1-100 of 500. Use offset=101 to continue.]")
    out, _ = call(env, "edit", path="pkg/alpha.py", oldText="return 1", newText="return 10")
    assert out.strip() == "Successfully replaced text in /testbed/pkg/alpha.py."
    out, _ = call(env, "write", path="new.txt", content="abc")
    assert out.strip() == "Successfully wrote 3 bytes to /testbed/new.txt"
    patch = "--- a/new.txt\n+++ b/new.txt\n@@ -1 +1 @@\n-abc\n\\ No newline at end of file\n+xyz\n"
    out, info = call(env, "apply_patch", patch=patch)
    assert info["exit_codes"] == [0], out
    assert (env.workspace / "new.txt").read_text() == "xyz\n"
    out, _ = call(env, "exec", command="sleep 30", background=True)
    out, _ = call(env, "process", action="list")
    assert "sleep 30" in out
    env.close()


def test_command_template_and_inline_python_tools(repo_task):
    spec = load_preset("HarnessAdapt-H0")
    spec["tools"].insert(
        0,
        {
            "name": "count_lines",
            "implementation": {"command": "wc -l < {path}"},
            "description": "Count the lines of a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    )
    spec["tools"].insert(
        0,
        {
            "name": "shout",
            "implementation": {
                "python": "import json, sys\nprint(json.load(open(sys.argv[1]))['args']['text'].upper())"
            },
            "description": "Upper-case a text.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        },
    )
    env = HarnessEnv(spec=spec, tasks=[repo_task])
    env.reset(seed=0)
    out, _ = call(env, "count_lines", path="pkg/alpha.py; touch /testbed/pwned")
    assert not (env.workspace / "pwned").exists()  # arguments are shell-quoted
    out, _ = call(env, "count_lines", path="pkg/alpha.py")
    assert out.strip() == "2"
    out, _ = call(env, "shout", text="quiet $(reboot)")
    assert out.strip() == "QUIET $(REBOOT)"
    env.close()
