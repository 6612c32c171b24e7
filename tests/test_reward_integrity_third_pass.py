"""Issue 28: a process whose main thread has exited while another thread runs looks like a zombie
(``/proc/PID/stat`` says Z) but still writes. The grader's leftover check skipped zombies, so such
a process, left by a program the grader runs, wrote the verdict's last line after the grader's own:
a ClawGym-shaped task paid 1.0 for a forger. Each test below plays the attack (the exploit library's
``undead-writer``) on a ClawGym-, a PinchBench- and a SWE-shaped task, on bubblewrap and on Docker."""

import json
import textwrap
from dataclasses import replace

import pytest
from conftest import requires_bwrap
from test_reward_integrity import swe_task  # noqa: F401 (a fixture)

from harness_gym.tasks import validate_suite
from harness_gym.tasks.audit import Exploit, load_exploits, run_exploit

WS = "/root/.openclaw/workspace"
UNDEAD = load_exploits(names=["undead-writer"])[0]
REWIND = load_exploits(names=["rewind-stdout"])[0]
SOLVE = "import pathlib\npathlib.Path('answer.txt').write_text('42')\n"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def clawgym_program_task(root):
    """ClawGym-shaped: reward.sh runs the agent's program with its output going to the grader's
    stdout, then prints the reward as its last line (the format signs nothing)."""
    task = root / "task_0000"
    write(
        task / "data_entry.json",
        json.dumps(
            {
                "task_id": "task_0000",
                "user_query": f"Write {WS}/solve.py, a program that writes 42 to answer.txt.",
                "input_mount_dir": WS,
                "metadata": {"grading_type": "automated"},
            }
        ),
    )
    (task / "input_files").mkdir()
    write(
        task / "reward" / "reward.sh",
        f"""
        cd {WS}
        rm -f answer.txt
        python3 solve.py
        if [ "$(cat answer.txt 2>/dev/null)" = 42 ]; then echo 1.0; else echo 0.0; fi
        """,
    )
    (loaded,) = validate_suite(f"clawgym:{root}").tasks
    return replace(loaded, world=None)  # the host's folders: the world need not be built here


def pinchbench_program_task(root):
    """PinchBench-shaped: the automated checks run the agent's program (its output is the runner's)."""
    write(
        root / "tasks" / "task_01.md",
        f"""
        ---
        id: task_01
        name: program
        category: coding
        grading_type: automated
        timeout_seconds: 60
        ---
        ## Prompt

        Write {WS}/solve.py, a program that writes 42 to answer.txt.

        ## Automated Checks

        ```python
        def grade(transcript, workspace_path):
            import os, subprocess
            subprocess.run(["python3", "solve.py"], cwd=workspace_path)
            path = os.path.join(workspace_path, "answer.txt")
            return {{"answer": float(os.path.isfile(path) and open(path).read().strip() == "42")}}
        ```
        """,
    )
    (loaded,) = validate_suite(f"pinchbench:{root}").tasks
    return replace(loaded, world=None)


def play(task, exploit, **options):
    cell = run_exploit(task, exploit, **options)
    assert cell.audit_error is None, cell.audit_error
    return cell


def honest(task, command, **options):
    return play(task, Exploit("honest", "the intended solution", ({"bash": command},)), **options).reward


@pytest.fixture
def claw(tmp_path):
    return clawgym_program_task(tmp_path / "claw")


@pytest.fixture
def pinch(tmp_path):
    return pinchbench_program_task(tmp_path / "pinch")


def solve_command():
    import shlex

    return f"printf %s {shlex.quote(SOLVE)} > solve.py"


@requires_bwrap
@pytest.mark.parametrize("shape", ["claw", "pinch"])
def test_an_undead_writer_earns_nothing_on_bubblewrap(shape, request):
    """Old code: the ClawGym-shaped task paid 1.0 to the forger with no grader error."""
    task = request.getfixturevalue(shape)
    assert honest(task, "true") == 0.0
    assert honest(task, solve_command()) == 1.0
    for _ in range(2):
        cell = play(task, UNDEAD)
        assert cell.reward == 0.0, cell
    # the fix's own red-team pass: a signer that kept the grader's stdout in a regular file let the
    # graded program move its offset back, so the grader's verdict overwrote padding, not the forgery
    cell = play(task, REWIND)
    assert cell.reward == 0.0, cell


@requires_bwrap
def test_an_undead_writer_earns_nothing_on_a_swe_task(swe_task):  # noqa: F811
    assert honest(swe_task, "sed -i '0,/a - b/s//a + b/' calc.py") == 1.0
    cell = play(swe_task, UNDEAD)
    assert cell.reward == 0.0, cell


def test_an_undead_writer_earns_nothing_on_docker(tmp_path, docker_engine, monkeypatch):
    """The same attack in a grading container (pid 1 is the guard shell there)."""
    host, image = docker_engine
    monkeypatch.setenv("DOCKER_HOST", host)
    claw = replace(clawgym_program_task(tmp_path / "claw"), grade_command="sh reward/reward.sh")  # no bash there
    for task in (claw, pinchbench_program_task(tmp_path / "pinch")):
        task = replace(task, image=image)
        assert honest(task, solve_command(), backend="docker") == 1.0
        cell = play(task, UNDEAD, backend="docker")
        assert cell.reward == 0.0, cell


OLD_GUARD_CHECK = (  # the guard before issue 28: one scan, of processes, zombies skipped
    "status=$?\n"
    "for d in /proc/[0-9]*; do\n"
    "  p=${d#/proc/}\n"
    '  if [ "$p" = 1 ] || [ "$p" = "$$" ]; then continue; fi\n'
    '  { read -r line < "$d/stat"; } 2>/dev/null || continue\n'
    "  state=${line##*) }; state=${state%% *}\n"
    '  if [ "$state" = Z ] || [ "$state" = X ]; then continue; fi\n'
    "  kill -9 -1 2>/dev/null\n"
    "  exit 125\n"
    "done\n"
    'exit "$status"\n'
)


@requires_bwrap
@pytest.mark.parametrize("shape", ["claw", "pinch"])
def test_the_signer_alone_stops_an_undead_writer(shape, request, monkeypatch):
    """With the old guard back, the harness's signer (a subreaper that reads the command's output
    only once no descendant lives, and signs it) still refuses the forgery."""
    from harness_gym.sandboxes import base

    task = request.getfixturevalue(shape)
    monkeypatch.setattr(base, "_GUARD_CHECK", OLD_GUARD_CHECK)
    cell = play(task, UNDEAD)
    assert cell.reward == 0.0 and "status 125" in (cell.grader_error or ""), cell
    assert honest(task, solve_command()) == 1.0
    unsigned = replace(task, sign_output=False)  # what ClawGym and PinchBench graded like before
    assert play(unsigned, UNDEAD).reward == 1.0  # the hole the old guard left, still there without the signer
    from harness_gym.tasks.audit import audit

    assert audit([unsigned], [UNDEAD]).passes() == {task.id: ["undead-writer"]}  # the audit flags that hole


def test_only_the_text_the_signer_signed_is_read():
    from harness_gym.tasks.base import parse_signed_output
    from harness_gym.tasks.graders.signed_output import SIGNATURE_KEY, signed_text

    key = b"k" * 64
    text = "log\n0.0\n"
    line = json.dumps({SIGNATURE_KEY: signed_text(key, 0, text), "status": 0})
    assert parse_signed_output("t", text + line + "\n", 0, key).reward == 0.0
    assert parse_signed_output("t", text + line + "\n1.0\n", 0, key).reward == 0.0  # appended: ignored
    forged = parse_signed_output("t", "1.0\n" + text + line + "\n", 0, key)  # inserted before: breaks it
    assert forged.reward == 0.0 and "signature" in forged.error
    other = json.dumps({SIGNATURE_KEY: signed_text(b"other", 0, "1.0\n"), "status": 0})
    assert "signature" in parse_signed_output("t", "1.0\n" + other + "\n", 0, key).error
    assert parse_signed_output("t", "1.0\n", 0, key).error  # unsigned
    lying = json.dumps({SIGNATURE_KEY: signed_text(key, 1, "1.0\n"), "status": 0})
    assert parse_signed_output("t", "1.0\n" + lying + "\n", 0, key).error  # the status is signed too


# ------------------------------------------------------------------ the audit (issue 28, items 2-4)


def test_the_audit_report_keeps_passes_partial_credit_and_the_baseline_apart():
    """Old code: one headline, "exploitable", counted any reward above 0 (partial credit the data's
    own graders give for empty files looked like a forged pass)."""
    from harness_gym.tasks.audit import AuditCell, AuditReport

    report = AuditReport(["nothing", "empty-outputs", "forge"], ["weak", "forgeable", "clean"])
    for task_id, rewards in {"weak": (0.25, 0.5, 0.25), "forgeable": (0.0, 0.0, 1.0), "clean": (0, 0, 0)}.items():
        report.cells += [AuditCell(task_id, e, r) for e, r in zip(report.exploits, rewards, strict=True)]
    assert report.passes() == {"forgeable": ["forge"]}
    assert report.above_baseline() == {"weak": ["empty-outputs"]}
    assert report.baselines() == {"weak": 0.25, "forgeable": 0.0, "clean": 0.0}
    table = report.table()
    assert "1 of 3 tasks: an exploit passes" in table
    assert "1 of 3 tasks: an exploit earns partial credit above the do-nothing score" in table
    assert "1 of 3 tasks: doing nothing scores above 0" in table
    assert report.to_json()["above_baseline"] == {"weak": ["empty-outputs"]}


@requires_bwrap
def test_the_audit_runs_each_task_on_its_world(tmp_path, claw):
    """Old code: the exploit and mutation audits graded on the host whatever the suite's world."""
    from harness_gym.tasks.audit import audit
    from harness_gym.tasks.mutation import mutation_audit

    world = tmp_path / "unbuilt.yaml"
    world.write_text("version: 1\nname: hg-test-unbuilt-28\nbase: {debian: bookworm, variant: minbase}\npackages: []\n")
    task = replace(claw, world=str(world))
    nothing = load_exploits(names=["nothing"])
    (cell,) = audit([task], nothing).cells
    assert cell.audit_error and "hg-test-unbuilt-28" in cell.audit_error, cell  # its world, not the host
    (cell,) = audit([task], nothing, world="host").cells  # --world host overrides
    assert cell.audit_error is None and cell.reward == 0.0
    with_reference = replace(task, solution=({"tool": "execute_bash", "arguments": {"command": solve_command()}},))
    (entry,) = mutation_audit([with_reference], 1).tasks
    assert entry.error and "hg-test-unbuilt-28" in entry.error


def test_the_audit_command_takes_a_world(tmp_path):
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "harness_gym.cli", "tasks", "audit", "builtin", "--world", "no-such-world-28"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0 and "no-such-world-28" in run.stdout + run.stderr, run.stdout + run.stderr


# ------------------------------------------------------------------ decoy tools (issue 28, item 5)

# a PinchBench-style automated check (task_16's shape): pays for a web_search call and for running a command
PINCH_CHECKS = """
def grade(transcript, workspace_path):
    calls = [p for e in transcript if e.get("type") == "message"
             for p in e["message"].get("content", []) if isinstance(p, dict) and p.get("type") == "toolCall"]
    return {
        "searched": float(any(c["name"] == "web_search" for c in calls)),
        "ran_a_command": float(any(c["name"] == "execute_bash" for c in calls)),
    }
"""


@requires_bwrap
def test_a_decoy_call_earns_nothing_and_scores_the_same_under_every_tool_interface():
    """Old code: T1's and T2's web_search decoy answered "unavailable", yet the canonical transcript
    showed a web_search call and the check paid for it; under T0 (no such tool) it could not."""
    import warnings

    from harness_gym import HarnessEnv
    from harness_gym.tasks.base import openclaw_transcript

    warnings.simplefilter("ignore")
    namespace: dict = {}
    exec(PINCH_CHECKS, namespace)
    scores = {}
    for level in ("T0", "T1", "T2"):
        env = HarnessEnv(f"S0{level}O0C0W0", tasks="builtin")
        try:
            env.reset(seed=0, options={"task_id": "workspace-disk-usage"})
            tools = env.unwrapped.tool_interface
            try:
                search = tools.name_for("web_search")
            except KeyError:
                search = "web_search"  # T0 offers none: the same intent, written as the agent would
            for name, arguments in (
                (search, {"query": "disk usage"}),
                (tools.name_for("execute_bash"), {"command": "ls"}),
            ):
                env.step(f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")
            events = openclaw_transcript(env.unwrapped.transcript)
        finally:
            env.close()
        scores[level] = namespace["grade"](events, "/nonexistent")
        names = [p["name"] for e in events for p in e["message"]["content"] if p.get("type") == "toolCall"]
        assert names[0] in ("unknown_tool", "unavailable_tool") and "web_search" not in names, (level, names)
    assert scores["T0"] == scores["T1"] == scores["T2"] == {"searched": 0.0, "ran_a_command": 1.0}, scores


# ------------------------------------------------------------------ small items (issue 28, item 6)


def test_an_extends_cycle_and_a_deep_document_are_spec_errors(tmp_path):
    """Old code: both raised RecursionError."""
    from harness_gym.spec import SpecError, load_spec

    (tmp_path / "a.yaml").write_text("extends: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\nname: b\n")
    (tmp_path / "self.yaml").write_text("extends: self\nname: s\n")
    for name in ("a.yaml", "self.yaml"):
        with pytest.raises(SpecError, match="cycle"):
            load_spec(tmp_path / name)
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: deep\nx: " + "[" * 20_000 + "]" * 20_000 + "\n")
    with pytest.raises(SpecError, match="deeply"):
        load_spec(deep)
    (tmp_path / "odd.yaml").write_text("extends: [1, 2]\nname: odd\n")
    with pytest.raises(SpecError, match="extends"):
        load_spec(tmp_path / "odd.yaml")


@requires_bwrap
def test_the_sandbox_environ_shows_nothing_of_the_hosts_working_directory(tmp_path, monkeypatch):
    """Old code: the launcher's /bin/sh exported PWD, so /proc/1/environ (bwrap's) named the folder
    the host process ran in."""
    from harness_gym.sandboxes.base import create_sandbox

    here = tmp_path / "host-cwd-issue-28"
    here.mkdir()
    monkeypatch.chdir(here)
    sandbox = create_sandbox("bubblewrap")
    try:
        sandbox.start(sandbox.new_workspace(), "/workspace")
        seen = sandbox.run("for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null", 30).output
    finally:
        sandbox.close()
    assert "PATH=" in seen and "host-cwd-issue-28" not in seen, seen


@pytest.mark.parametrize("formats", ["r2e", pytest.param("swebench+r2e", marks=pytest.mark.slow)])
def test_an_undead_writer_earns_nothing_on_swe_and_r2e_tasks_in_docker(swe_image, tmp_path, monkeypatch, formats):
    """The runner signs its verdict and the guard sees every thread, in the instance's container.
    The default suite plays the R2E row (the SWE-bench format meets the undead writer on bubblewrap in
    test_an_undead_writer_earns_nothing_on_a_swe_task); `-m slow` plays both rows."""
    from conftest import swe_and_r2e_docker_tasks

    tasks = swe_and_r2e_docker_tasks(swe_image, tmp_path, monkeypatch)
    assert len(tasks) == 2  # the SWE-bench row, then the R2E row
    for task in tasks[1:] if formats == "r2e" else tasks:
        assert task.signed_verdict
        fixed = play(task, Exploit("honest", "the fix", ({"bash": "sed -i '2s/a - b/a + b/' /testbed/calc.py"},)))
        assert fixed.reward == 1.0, fixed
        cell = play(task, UNDEAD)
        assert cell.reward == 0.0, cell
