"""Red team, third pass (hred) over issue 28's grading change: attacks only. Each working attack is
a test marked ``xfail(strict=True)`` that turns green when the hole is fixed; each asserts what an
honest grading must give (a wrong or empty solution earns no more than the do-nothing score).

Shapes come from tests/test_reward_integrity_third_pass.py (a ClawGym-style ``reward.sh`` and a
PinchBench-style check that run the agent's program with its stdout going to the grader's)."""

import shlex

import pytest
from conftest import requires_bwrap
from test_reward_integrity import swe_task  # noqa: F401 (a fixture)
from test_reward_integrity_third_pass import (  # noqa: F401 (fixtures)
    claw,
    honest,
    pinch,
    play,
)

from harness_gym.tasks.audit import Exploit


def program(source: str) -> str:
    """The agent's command: write ``source`` as solve.py (the program the grader runs)."""
    return f"printf %s {shlex.quote(source)} > solve.py"


# ------------------------------------------------------------------ 1. planting ahead in the signer's file

# The signer sends the grade command's stdout to an unlinked *regular file* (tempfile.TemporaryFile).
# A regular file has an offset per open file description: the graded program re-opens its own stdout
# through /proc/self/fd/1 (a new description, its own offset) and writes, *past the current end*, a
# run of newlines and then "1.0". The grader's own verdict line, printed later through the inherited
# description, lands at the old end and overwrites only the start of that run: the file ends with the
# planted "1.0". No process outlives the grader (the subreaper and the guard see nothing), the signer
# signed the planted line as the grader's output, and the host accepted it: 1.0 on ClawGym- and
# PinchBench-shaped tasks, bubblewrap and Docker. Contained since h28's 640fb39 (the signer reads a
# pipe; found in parallel as exploit rewind-stdout): these stay as regression tests.
PLANT_AHEAD = r"""
import os
try:
    fd = os.open("/proc/self/fd/1", os.O_WRONLY)
    os.pwrite(fd, b"\n" * 4096 + b"1.0\n", os.fstat(1).st_size)
except OSError:
    pass
"""


@requires_bwrap
@pytest.mark.parametrize("shape", ["claw", "pinch"])
def test_a_line_planted_past_the_end_of_the_signers_file_earns_nothing(shape, request):
    task = request.getfixturevalue(shape)
    cell = play(task, Exploit("plant-ahead", "write past the output's end", ({"bash": program(PLANT_AHEAD)},)))
    assert cell.reward == 0.0, cell  # observed: 1.0, no grader error, signature valid


# The same where reward.sh captures the program's output (``log=$(python3 solve.py)``): reward.sh's
# bash is dumpable and of the same uid, so the program finds the signer's file among its ancestors'
# descriptors (/proc/PID/fd/1 of reward.sh) and plants there.
PLANT_THROUGH_ANY_PROCESS = r"""
import os
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").endswith("(deleted)"):
                out = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY)
                os.pwrite(out, b"\n" * 4096 + b"1.0\n", os.fstat(out).st_size)
        except OSError:
            pass
"""


@requires_bwrap
def test_planting_through_the_graders_descriptor_earns_nothing(tmp_path):
    from test_reward_integrity_third_pass import WS, clawgym_program_task, write

    task = clawgym_program_task(tmp_path / "claw")
    write(
        tmp_path / "claw" / "task_0000" / "reward" / "reward.sh",
        f"cd {WS}\nrm -f answer.txt\nlog=$(python3 solve.py 2>&1)\n"
        'if [ "$(cat answer.txt 2>/dev/null)" = 42 ]; then echo 1.0; else echo 0.0; fi\n',
    )
    assert honest(task, "true") == 0.0
    cell = play(
        task, Exploit("plant-through", "plant via reward.sh's fd", ({"bash": program(PLANT_THROUGH_ANY_PROCESS)},))
    )
    assert cell.reward == 0.0, cell  # observed: 1.0, no grader error


# ------------------------------------------------------------------ 2. the grader's folder is writable

# The grader's files are bound read-write into the grading sandbox (so the signer can delete the key)
# and chowned to the sandbox uid, and the program a grader runs runs as that uid. bash reads a script
# as it goes (fd 255, position in /proc/PPID/fdinfo/255): the graded program rewrites the rest of
# reward.sh, from the running command on, to "echo 1.0; exit 0". The same holds for any file of the
# grader folder used after the agent's program ran (a check.py that reward.sh calls next).
REWRITE_GRADER = r"""
import os
path = "/root/.openclaw/workspace/reward/reward.sh"
try:
    size = os.path.getsize(path)
    position = int(open("/proc/%d/fdinfo/255" % os.getppid()).read().split()[1])
    with open(path, "r+b") as script:
        script.seek(position)
        script.write(b"echo 1.0; exit 0\n" + b"#" * max(0, size - position))
except (OSError, ValueError, IndexError):
    pass
"""


@requires_bwrap
def test_the_graded_program_cannot_rewrite_the_grader(claw):  # noqa: F811
    cell = play(claw, Exploit("rewrite-grader", "rewrite reward.sh mid-run", ({"bash": program(REWRITE_GRADER)},)))
    assert cell.reward == 0.0, cell  # observed: 1.0, no grader error


REWRITE_CHECKER = r"""
try:
    with open("/root/.openclaw/workspace/reward/check.py", "w") as checker:
        checker.write("print(1.0)\n")
except OSError:
    pass
"""


def clawgym_checker_task(root):
    """ClawGym-shaped, the common form of the data: reward.sh runs the agent's program, then a
    check of its own folder (reward/check.py) prints the reward."""
    from dataclasses import replace

    from test_reward_integrity_third_pass import WS, clawgym_program_task, write

    task = clawgym_program_task(root)
    folder = root / "task_0000" / "reward"
    write(folder / "reward.sh", f"cd {WS}\nrm -f answer.txt\npython3 solve.py\npython3 reward/check.py\n")
    write(
        folder / "check.py",
        "import pathlib\np = pathlib.Path('answer.txt')\nprint(1.0 if p.is_file() and p.read_text() == '42' else 0.0)\n",
    )
    return replace(task, grader_files=(folder,))


@requires_bwrap
def test_the_graded_program_cannot_rewrite_a_check_run_after_it(tmp_path):
    task = clawgym_checker_task(tmp_path / "claw")
    assert honest(task, "true") == 0.0
    cell = play(task, Exploit("rewrite-check", "rewrite check.py", ({"bash": program(REWRITE_CHECKER)},)))
    assert cell.reward == 0.0, cell  # observed: 1.0, no grader error


def docker_rewards(attack, tmp_path, docker_engine, monkeypatch):
    """The attack's reward on each shape in a grading container (the test image has no bash:
    reward.sh runs under sh there)."""
    from dataclasses import replace

    from test_reward_integrity_third_pass import pinchbench_program_task

    host, image = docker_engine
    monkeypatch.setenv("DOCKER_HOST", host)
    source = PLANT_AHEAD if attack == "plant-ahead" else REWRITE_CHECKER
    shapes = [replace(clawgym_checker_task(tmp_path / "claw"), grade_command="sh reward/reward.sh")]
    if attack == "plant-ahead":
        shapes.append(pinchbench_program_task(tmp_path / "pinch"))
    rewards = {}
    for task in shapes:
        task = replace(task, image=image)
        assert honest(task, "true", backend="docker") == 0.0, task.id
        rewards[task.id] = play(task, Exploit(attack, attack, ({"bash": program(source)},)), backend="docker").reward
    return rewards


def test_a_line_planted_ahead_earns_nothing_on_docker(tmp_path, docker_engine, monkeypatch):
    """hred-1 on Docker (1.0 for both shapes before 640fb39)."""
    rewards = docker_rewards("plant-ahead", tmp_path, docker_engine, monkeypatch)
    assert set(rewards.values()) == {0.0}, rewards


def test_rewriting_a_check_earns_nothing_on_docker(tmp_path, docker_engine, monkeypatch):
    rewards = docker_rewards("rewrite-check", tmp_path, docker_engine, monkeypatch)
    assert set(rewards.values()) == {0.0}, rewards  # observed: 1.0


# ------------------------------------------------------------------ 3. SWE/R2E: the report plugin's own functions

# The runner's pytest plugin (graders/pytest_report.py) guards pytest's and unittest's outcome
# functions against replacement, but not its own: the code under test (imported by the tests, in
# the same process) replaces ``pytest_report._status`` (a global looked up at each report) so every
# test reports PASSED, and ``_tampered`` so nothing is flagged. The runner signs the verdict it then
# computes: the signature proves who printed it, not what it was computed from.
PATCH_REPORT_PLUGIN = """
cat >> calc.py <<"PY"

import sys as _hg_sys
_hg_plugin = _hg_sys.modules.get("pytest_report")
if _hg_plugin is not None:
    _hg_plugin._tampered = lambda: []
    _hg_plugin._status = lambda report: "PASSED" if report.when == "call" else None
PY
"""


@requires_bwrap
def test_patching_the_report_plugin_earns_nothing_on_a_swe_task(swe_task):  # noqa: F811
    assert honest(swe_task, "true") == 0.0
    cell = play(
        swe_task, Exploit("patch-report-plugin", "replace the plugin's _status", ({"bash": PATCH_REPORT_PLUGIN},))
    )
    assert cell.reward == 0.0, cell  # observed: 1.0, no grader error


# ------------------------------------------------------------------ 4. serve-env: one message still ends a session


@requires_bwrap
def test_a_deeply_nested_message_gets_an_error_and_the_session_stays():
    import asyncio
    import json

    pytest.importorskip("openenv.core", reason="openenv-core is not installed")
    from openenv.core import GenericEnvClient

    from harness_gym.env_server import EnvServer

    token = "hred-token-4"
    server = EnvServer("Harness-S0T0O0C0W0", port=0, token=token).start()
    step = {"text": '<tool_call>{"name": "execute_bash", "arguments": {"command": "echo still-here"}}</tool_call>'}

    async def session():
        client = GenericEnvClient(base_url=server.url.replace("http://", f"http://token:{token}@"))
        await client.connect()
        await client.reset(seed=0)
        await client._ws.send("[" * 100_000 + "]" * 100_000)
        answer = json.loads(await asyncio.wait_for(client._ws.recv(), 30))
        result = await asyncio.wait_for(client.step(step), 60)  # observed: ConnectionClosedOK
        await client.close()
        return answer, result

    try:
        answer, result = asyncio.run(session())
    finally:
        server.stop()
    assert answer["type"] == "error"
    assert "still-here" in result.observation["messages"][-1]["content"]


# ------------------------------------------------------------------ 5. size limits: the signer's tail vs the host's cap

# The signer keeps the last 16,000 *characters* of the grader's output; the host keeps 30,000 *bytes*
# (output_limit_chars, a head and a tail) of the sandbox's stdout and checks the signature over what it
# kept. 12,000 three-byte characters (36,000 bytes) fit the signer's tail but not the host's cap: the
# host cuts the middle out, the signature no longer matches, and an honest solution scores 0 with a
# grader error. Any graded program can do this to its own grading (no reward gained), and a smaller
# output_limit_chars makes plain ASCII output enough.
HONEST_AND_TALKATIVE = "import pathlib\nprint('字' * 12000)\npathlib.Path('answer.txt').write_text('42')\n"


@requires_bwrap
def test_an_honest_solution_with_a_long_output_still_scores(claw):  # noqa: F811
    assert honest(claw, program(HONEST_AND_TALKATIVE)) == 1.0  # observed: 0.0 (no signature)


def test_patching_the_report_plugin_earns_nothing_in_docker(swe_image, tmp_path, monkeypatch):

    from conftest import swe_and_r2e_docker_tasks

    tasks = swe_and_r2e_docker_tasks(swe_image, tmp_path, monkeypatch)
    attack = Exploit(
        "patch-report-plugin", "replace the plugin's _status", ({"bash": f"cd /testbed && {PATCH_REPORT_PLUGIN}"},)
    )
    rewards = {}
    for task in tasks:
        assert honest(task, "true") == 0.0, task.id
        rewards[task.id] = play(task, attack).reward
    assert set(rewards.values()) == {0.0}, rewards  # observed: 1.0 for both


# ------------------------------------------------------------------ h28b: the fixes' own regression tests


@requires_bwrap
@pytest.mark.parametrize("limit", [1500, 6000])
def test_an_honest_solution_scores_under_a_small_output_cap(claw, limit):  # noqa: F811
    """hred-5 with plain ASCII: the signer's output (tail, note and signature) fits any cap the
    sandbox is given, so the host never cuts what was signed (0.0 before h28b for both caps)."""
    talkative = "import pathlib\nprint('x' * 20000)\npathlib.Path('answer.txt').write_text('42')\n"
    assert honest(claw, program(talkative), sandbox_options={"output_limit_chars": limit}) == 1.0


@requires_bwrap
def test_the_grader_may_remove_its_key_but_write_nothing_else(claw):  # noqa: F811
    """The grading sees its folder read-only but for the key folder (whose key the signer removed):
    the graded program can write neither a new file nor over reward.sh (both WROTE before h28b)."""
    from harness_gym.tasks.audit import apply_exploit, open_audit_sandbox

    probe = (
        "import os\nfor p in ('reward/new.txt', 'reward/reward.sh', 'reward/.harness-gym-key/new.txt'):\n"
        "    try:\n        open(p, 'a').write(''); print('WROTE', p)\n"
        "    except OSError as e:\n        print('DENIED', p, e.errno)\n"
        "print('KEY', os.listdir('reward/.harness-gym-key'))\n"
    )
    sandbox = open_audit_sandbox(claw, None, None)
    try:
        workspace = sandbox.new_workspace()
        claw.materialize(workspace)
        sandbox.start(workspace, claw.mount_path, claw.hidden_paths)
        apply_exploit(sandbox, claw, Exploit("probe", "probe", ({"bash": program(probe)},)))
        graded = claw.grade(sandbox, [])
    finally:
        sandbox.close()
    assert graded.error is None, graded.log
    assert "DENIED reward/new.txt" in graded.log and "DENIED reward/reward.sh" in graded.log, graded.log
    assert "WROTE reward/.harness-gym-key/new.txt" in graded.log and ".verdict-key" not in graded.log, graded.log


@requires_bwrap
def test_the_exploit_library_rewrite_grader_earns_nothing(tmp_path, claw):  # noqa: F811
    """The library's rewrite-grader (1.0 on both shapes before h28b: the audit flags the hole)."""
    from harness_gym.tasks.audit import load_exploits

    (exploit,) = load_exploits(names=["rewrite-grader"])
    rewards = {
        shape: play(task, exploit).reward
        for shape, task in (("claw", claw), ("checker", clawgym_checker_task(tmp_path / "c")))
    }
    assert rewards == {"claw": 0.0, "checker": 0.0}, rewards


@requires_bwrap
def test_the_exploit_library_patch_report_plugin_earns_nothing(swe_task):  # noqa: F811
    """The library's patch-report-plugin (1.0 before h28b: the audit flags the hole)."""
    from harness_gym.tasks.audit import load_exploits

    (exploit,) = load_exploits(names=["patch-report-plugin"])
    assert play(swe_task, exploit).reward == 0.0
