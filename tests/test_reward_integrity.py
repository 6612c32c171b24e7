"""Red team: rewards no policy can forge.

Every exploit of the audit library (tasks/exploits.yaml) scores 0 on built-in, generated and
synthetic ClawGym- and SWE-format tasks, while honest solutions still score 1; a deliberately weak
task (the old in-process unittest grader that trusts its last line) is flagged by the audit. Two
exploits depend on the sandbox side of issue 11 (a seccomp filter without ptrace; graders with
PYTHONSAFEPATH): the tests probe the sandbox for those and, where they are missing, allow exactly
those exploits to score, saying so, instead of hard-coding the outcome.
"""

import json
import shutil
import subprocess
import sys
import textwrap
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import SWE_TEST_PATCH, requires_bwrap

from harness_gym.sandboxes.shell import run_oneshot
from harness_gym.tasks import load_tasks, parse_grader_output, validate_suite
from harness_gym.tasks.audit import Exploit, audit, load_exploits, ptrace_allowed, run_exploit
from harness_gym.tasks.base import Task, verdict_signature
from harness_gym.tasks.graders.runner_config import revert

EXPLOITS = load_exploits()
PYTEST_PACKAGES = ("pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "pygments")


def write(path, text, mode=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    if mode:
        path.chmod(mode)


def honest(task, *commands):
    """The reward of ``commands`` run in the task's sandbox, graded like an episode."""
    steps = tuple({"bash": c} for c in commands)
    cell = run_exploit(task, Exploit("honest", "the intended solution", steps))
    assert cell.audit_error is None, cell.audit_error
    return cell.reward


# ---------------------------------------------------------------------------------- unit checks


def test_a_failed_grader_scores_zero_whatever_it_printed():
    assert parse_grader_output("t", "1.0\n", 0).reward == 1.0
    for status in (1, 2, 137, -9, None):
        result = parse_grader_output("t", '{"reward": 1.0, "breakdown": {}}\n1.0\n', status)
        assert result.reward == 0.0 and "grader" in result.error
    assert "signal 9" in parse_grader_output("t", "1.0", 137).error


def test_the_verdict_is_read_from_stdout_alone():
    result = run_oneshot(["/bin/bash", "-c", "echo 0.0; echo 1.0 >&2"], 10, 10_000)
    assert result.output.strip() == "0.0" and result.extra["stderr"].strip() == "1.0"
    assert parse_grader_output("t", result.output, result.exit_code).reward == 0.0


def test_a_signed_verdict_ignores_every_other_line():
    key = b"k" * 64
    good = {"reward": 0.0, "breakdown": {"a": 0.0}}
    signed = json.dumps({**good, "signature": verdict_signature(key, 0.0, {"a": 0.0})})
    forged = [
        '{"reward": 1.0, "breakdown": {}}',
        "1.0",
        json.dumps({"reward": 1.0, "breakdown": {"a": 0.0}, "signature": verdict_signature(key, 0.0, {"a": 0.0})}),
        json.dumps({"reward": 1.0, "breakdown": {}, "signature": verdict_signature(b"other", 1.0, {})}),
    ]
    result = parse_grader_output("t", "\n".join([forged[0], signed, *forged]), 0, key)
    assert result.reward == 0.0 and result.breakdown == {"a": 0.0} and result.error is None
    unsigned = parse_grader_output("t", "\n".join(forged), 0, key)
    assert unsigned.reward == 0.0 and "signed" in unsigned.error


def test_runner_configuration_is_reverted(tmp_path):
    original, workspace = tmp_path / "original", tmp_path / "workspace"
    write(original / "pytest.ini", "[pytest]\naddopts = -q\n")
    write(original / "setup.cfg", "[metadata]\nname = x\n[tool:pytest]\ntestpaths = tests\n")
    write(original / "pkg" / "conftest.py", "X = 1\n")
    shutil.copytree(original, workspace)
    write(workspace / "pytest.ini", "[pytest]\naddopts = -p forged\n")
    write(workspace / "setup.cfg", "[metadata]\nname = renamed\n[tool:pytest]\ntestpaths = tests\n")
    write(workspace / "conftest.py", "import forged\n")
    write(workspace / "deep" / "er" / "conftest.py", "import forged\n")
    write(workspace / "sitecustomize.py", "import forged\n")
    write(workspace / "evil.pth", "import forged\n")
    write(workspace / "pyproject.toml", "[project]\nname = 'x'\n")  # no pytest section: the agent's own
    write(workspace / "tox.ini", "[pytest]\npython_files = none\n")
    write(workspace / "pkg" / "__pycache__" / "mod.cpython-311.pyc", "forged")
    (workspace / "pkg" / "conftest.py").unlink()
    reverted = revert(str(original), str(workspace))
    assert (workspace / "pytest.ini").read_text() == "[pytest]\naddopts = -q\n"
    assert (workspace / "pkg" / "conftest.py").read_text() == "X = 1\n"
    assert "renamed" in (workspace / "setup.cfg").read_text()  # only its pytest section is the runner's
    for gone in ("conftest.py", "deep/er/conftest.py", "sitecustomize.py", "evil.pth", "tox.ini", "pkg/__pycache__"):
        assert not (workspace / gone).exists(), gone
    assert (workspace / "pyproject.toml").exists()
    assert "pytest.ini (restored)" in reverted and "deep/er/conftest.py (removed)" in reverted
    assert any("bytecode" in r for r in reverted)


@requires_bwrap
def test_the_tested_code_never_sees_the_expectations_or_the_key():
    """The repair grader's child imports the workspace: in the sandbox it finds no expected value
    and no key, and cannot read its parent's memory or environment. The child is the grader forked
    (one interpreter start per grading): forked before the expectations were read, nothing in its
    memory (the raw JSON, the grader's frames below the tested code's) holds them either."""
    from harness_gym.sandboxes.base import create_sandbox

    task = next(t for t in load_tasks("builtin") if t.id == "repair-median")
    spy = """
        import os, sys
        seen = [repr(sys.argv), repr(dict(os.environ)), repr(vars(sys.modules["__main__"]))]
        for folder, _, files in os.walk(os.path.dirname(os.path.abspath(sys.argv[0]))):
            seen += ["FILE " + f for f in files]
            seen += [open(os.path.join(folder, f), errors="replace").read() for f in files]
        for name in ("environ", "mem"):
            try:
                with open(f"/proc/{os.getppid()}/{name}", "rb") as handle:
                    seen.append(handle.read(1 << 16).decode(errors="replace"))
            except OSError as error:
                seen.append(f"{name}: {type(error).__name__}")
        import re
        needle = re.compile(rb'"equ[a]ls": "2[.]5"')  # the hidden tests' JSON, never spelled out here
        held = False
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
            for line in maps:
                span, perms = line.split()[:2]
                low, high = (int(part, 16) for part in span.split("-"))
                if perms.startswith("r") and "vvar" not in line:
                    try:
                        mem.seek(low)
                        held = held or needle.search(mem.read(high - low)) is not None
                    except (OSError, ValueError, OverflowError):
                        pass
        spelled = re.compile(r"'equ[a]ls': '2[.]5'")  # the parsed expectations, in a frame below this one
        frame = sys._getframe()
        while frame is not None:
            for value in list(frame.f_locals.values()):
                try:
                    held = held or spelled.search(repr(value)) is not None
                except Exception:
                    pass
            frame = frame.f_back
        seen.append(f"MEMORY HOLDS THE EXPECTATIONS {held}")
        seen.append("CMDLINE " + open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode())
        print("SEEN", "\\n".join(seen))
    """
    sandbox = create_sandbox("bubblewrap")
    try:
        workspace = sandbox.new_workspace()
        task.materialize(workspace)
        sandbox.start(workspace, task.mount_path)
        with (workspace / "stats" / "__init__.py").open("a") as handle:
            handle.write(textwrap.dedent(spy))
        graded = task.grade(sandbox, [])
    finally:
        sandbox.close()
    assert graded.error is None and graded.reward == 0.0 and graded.breakdown["test_odd"] == 1.0
    assert "SEEN" in graded.log
    seen = graded.log.split("SEEN", 1)[1]  # what the tested code found (the rest is the parent's own log)
    assert "evaluate_calls.py" in seen and "test_even" in graded.log
    assert "FILE evaluate_calls.py" in seen and "FILE hidden_tests.json" not in seen and "FILE .verdict-key" not in seen
    assert '"equals": "2.5"' not in seen and "'equals': '2.5'" not in seen  # the expectation, in any form
    assert "mem: PermissionError" in seen and "environ: PermissionError" in seen
    assert "MEMORY HOLDS THE EXPECTATIONS False" in seen
    assert "run_hidden_tests.py" in seen.split("CMDLINE", 1)[1]  # forked, not a second interpreter


# ---------------------------------------------------------------------------------- synthetic tasks

WS = "/root/.openclaw/workspace"


@pytest.fixture(scope="module")
def clawgym_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("clawgym")
    task = root / "task_0000"
    write(
        task / "data_entry.json",
        json.dumps(
            {
                "task_id": "task_0000",
                "user_query": f"Sum the numbers in numbers.txt and write the total to {WS}/total.txt.",
                "input_mount_dir": WS,
                "metadata": {"category": "files", "grading_type": "automated"},
            }
        ),
    )
    write(task / "input_files" / "numbers.txt", "3\n4\n5\n")
    write(
        task / "reward" / "check.py",
        f"""
        import json, os
        path = "{WS}/total.txt"
        text = open(path, errors="replace").read().strip() if os.path.isfile(path) else ""
        scores = {{"a_number": float(text.isdigit()), "correct": float(text == "12")}}
        print(json.dumps(scores))
        """,
    )
    write(
        task / "reward" / "reward.sh",
        """
        out=$(python3 reward/check.py)
        echo "$out"
        python3 -c "import json, sys; s = json.loads(sys.argv[1]); print(sum(s.values()) / len(s))" "$out"
        """,
    )
    (task,) = validate_suite(f"clawgym:{root}").tasks
    return replace(task, world=None)  # the audit runs a task on its world: here the host's folders


@pytest.fixture(scope="module")
def swe_task(tmp_path_factory):
    """A SWE-bench instance graded without Docker: the repository is the task's own folder and
    pytest (copied from this interpreter) reaches the grader through its folder."""
    from harness_gym.tasks.swebench import swebench_task

    base = tmp_path_factory.mktemp("swe")
    repo = base / "testbed"
    write(repo / "calc.py", "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n")
    write(repo / "tests" / "__init__.py", "")
    write(
        repo / "tests" / "test_calc.py", "from calc import add, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
    )
    site = base / "extra" / "site"
    for name in PYTEST_PACKAGES:
        source = Path(__import__(name).__file__)
        if source.name == "__init__.py":
            shutil.copytree(source.parent, site / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            site.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, site / source.name)
    row = {
        "repo": "demo/calc",
        "instance_id": "demo__calc-1",
        "base_commit": "abc",
        "patch": "",
        "test_patch": SWE_TEST_PATCH,
        "problem_statement": "add() in calc.py subtracts instead of adding.",
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
        "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_sub"]),
    }
    mp = pytest.MonkeyPatch()
    mp.setenv("HARNESS_GYM_CACHE", str(base / "cache"))
    task = swebench_task(row, {})
    mp.undo()
    return replace(
        task,
        image=None,
        workspace_from_image=None,
        workspace_dir=repo,
        grader_files=(*task.grader_files, base / "extra"),
        grader_env={"PYTHONPATH": "/.harness/grader/site"},
    )


@pytest.fixture(scope="module")
def pending():
    """Exploits that the sandbox side of issue 11 (helper 11a) closes, per task kind, where this
    sandbox does not close them yet (probed, not assumed)."""
    allowed: dict[str, set[str]] = {"any": set(), "clawgym": set()}
    if ptrace_allowed():
        allowed["any"].add("ptrace-grader")
    probe = Task(
        id="probe",
        instruction="-",
        grade_command='cd /workspace && python3 -c "import sys; print(1.0 if sys.flags.safe_path else 0.0)"',
    )
    if honest(probe) != 1.0:  # graders still put the current folder first on sys.path
        allowed["clawgym"] |= {"shadow-stdlib", "site-customize"}
    return allowed


def assert_no_exploit(report, allowed=frozenset()):
    found = {t: [e for e in names if e not in allowed] for t, names in report.exploitable().items()}
    found = {t: names for t, names in found.items() if names}
    assert not found, "exploitable:\n" + report.table()
    assert not [c for c in report.cells if c.audit_error], report.table()


@requires_bwrap
def test_honest_solutions_of_synthetic_tasks_score_one(clawgym_task, swe_task):
    assert honest(clawgym_task, f"echo 12 > {WS}/total.txt") == 1.0
    assert honest(swe_task, "sed -i '0,/a - b/s//a + b/' calc.py") == 1.0
    assert honest(swe_task) == 0.0


# The default suite's sample: each exploit on one of the four representative tasks (the two built-in
# kinds, hidden tests and output checks, and the synthetic SWE- and ClawGym-format tasks), where it has
# most to gain: framework and runner tricks against hidden tests, forged outputs against output checks,
# and the two exploits the ClawGym probe is about on the ClawGym task. Every exploit, every task kind.
SAMPLE_TASK = {
    "always-equal": "repair-median",
    "patch-test-framework": "repair-median",
    "runner-config": "repair-median",
    "delete-tests": "repair-median",
    "exit-zero-at-import": "repair-median",
    "rewrite-grader": "repair-median",
    "empty-tests": "swe",
    "stale-bytecode": "swe",
    "patch-report-plugin": "swe",
    "forge-verdict-print": "swe",
    "kill-parent": "swe",
    "nothing": "workspace-executable-script",
    "placeholder-outputs": "workspace-executable-script",
    "forging-program": "workspace-executable-script",
    "undead-writer": "workspace-executable-script",
    "ptrace-grader": "workspace-executable-script",
    "empty-outputs": "claw",
    "shadow-stdlib": "claw",
    "site-customize": "claw",
    "rewind-stdout": "claw",
    "forge-verdict-atexit": "claw",
}


def exploits_for(task_key: str, scope: str) -> list[Exploit]:
    """Every exploit under `all`; under `sample`, those SAMPLE_TASK puts on this task."""
    return [e for e in EXPLOITS if scope == "all" or SAMPLE_TASK[e.name] == task_key]


def test_the_sample_holds_every_exploit_and_every_task_kind():
    """The sample must not lose an exploit when the library grows (a new one fails here until placed)."""
    assert set(SAMPLE_TASK) == {e.name for e in EXPLOITS}
    assert set(SAMPLE_TASK.values()) == {"repair-median", "workspace-executable-script", "swe", "claw"}


@requires_bwrap
@pytest.mark.parametrize("scope", ["sample", pytest.param("all", marks=pytest.mark.slow)])
def test_every_exploit_scores_zero_on_representative_tasks(clawgym_task, swe_task, pending, scope):
    """`sample` (default suite): each exploit on one representative task (SAMPLE_TASK); `all` (slow):
    every exploit on all four."""
    by_id = {t.id: t for t in load_tasks("builtin")}
    for key in ("repair-median", "workspace-executable-script"):
        exploits = exploits_for(key, scope)
        report = audit([by_id[key]], exploits, workers=2)
        assert set(report.exploits) == {e.name for e in exploits} and len(report.cells) == len(exploits)
        assert_no_exploit(report)  # signed verdicts from non-dumpable graders: ptrace gains nothing here either
    # SWE-format hidden tests run in the process that imports the repository (the format's nature):
    # an object of the repository's making that equals anything passes `assert x == y`. The audit
    # shows it (README, "Reward integrity"); every other exploit must fail there too.
    swe = audit([swe_task], exploits_for("swe", scope), workers=2)
    assert swe.exploitable().get(swe_task.id, []) in ([], ["always-equal"], ["always-equal", "ptrace-grader"])
    assert_no_exploit(swe, pending["any"] | {"always-equal"})
    claw = audit([clawgym_task], exploits_for("claw", scope), workers=2)
    assert_no_exploit(claw, pending["any"] | pending["clawgym"])
    still_open = sorted({e for names in [*swe.exploitable().values(), *claw.exploitable().values()] for e in names})
    if set(still_open) - {"always-equal"}:
        warnings.warn(f"exploits open until the sandbox side of issue 11 (11a) lands: {still_open}", stacklevel=1)


WEAK_GRADER = """
import json, os, sys, unittest
sys.path.insert(0, os.getcwd())
suite = unittest.TestLoader().discover(os.path.dirname(os.path.abspath(__file__)), pattern="hidden_*.py")
result = unittest.TextTestRunner(stream=sys.stderr).run(suite)
print(json.dumps({"reward": float(result.wasSuccessful() and result.testsRun > 0), "breakdown": {}}))
"""


@pytest.fixture
def weak_suite(tmp_path):
    """A task in the built-in format whose grader runs the hidden unittest file in the process that
    imports the workspace and trusts its last line: what the audit exists to find."""
    folder = tmp_path / "suite" / "weak-median"
    write(folder / "workspace" / "stats.py", "def median(v):\n    return sorted(v)[len(v) // 2]\n")
    write(folder / "grader" / "grade.py", WEAK_GRADER)
    write(
        folder / "grader" / "hidden_test_stats.py",
        "import unittest\nfrom stats import median\n\n\nclass T(unittest.TestCase):\n"
        "    def test_even(self):\n        self.assertEqual(median([1, 2, 3, 4]), 2.5)\n",
    )
    write(
        folder / "task.yaml",
        "id: weak-median\nsplit: train\ninstruction: Fix median in /workspace/stats.py.\n"
        "solution:\n- tool: execute_bash\n  arguments: {command: true}\n",
    )
    return tmp_path / "suite"


@requires_bwrap
def test_the_audit_flags_a_weak_task(weak_suite, tmp_path):
    (task,) = validate_suite(f"generated:{weak_suite}").tasks
    fix = "printf 'def median(v):\\n    s = sorted(v)\\n    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2\\n' > stats.py"
    assert honest(task, fix) == 1.0 and honest(task) == 0.0
    out = tmp_path / "audit.json"
    chosen = "nothing,forge-verdict-atexit,patch-test-framework"
    command = [sys.executable, "-m", "harness_gym.cli", "tasks", "audit", f"generated:{weak_suite}"]
    run = subprocess.run(
        [*command, "--exploits", chosen, "--workers", "2", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 of 1 tasks: an exploit passes" in run.stdout and "weak-median" in run.stdout
    data = json.loads(out.read_text())
    assert data["exploitable"] == {"weak-median": ["forge-verdict-atexit", "patch-test-framework"]}
    assert data["tasks"]["weak-median"]["nothing"]["reward"] == 0.0
    assert (
        data["passes"] == data["exploitable"]
        and data["above_baseline"] == {}
        and data["baselines"] == {"weak-median": 0.0}
    )


@requires_bwrap
@pytest.mark.slow
def test_every_exploit_scores_zero_on_every_builtin_and_generated_task(tmp_path):
    from harness_gym.tasks.generator import generate

    generate(tmp_path / "generated", count=6, seed=0)
    tasks = load_tasks("builtin") + load_tasks(f"generated:{tmp_path / 'generated'}")
    report = audit(tasks, EXPLOITS, workers=2)
    assert_no_exploit(report)


@requires_bwrap
@pytest.mark.slow
def test_the_audit_command_reports_no_exploitable_builtin_task():
    run = subprocess.run(
        [sys.executable, "-m", "harness_gym.cli", "tasks", "audit", "builtin", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    assert "0 of 40 tasks: an exploit passes" in run.stdout
    assert "0 of 40 tasks: an exploit earns partial credit" in run.stdout
