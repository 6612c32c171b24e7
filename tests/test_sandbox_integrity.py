"""Reward integrity, sandbox side: no process inspects another, graders run apart from the
workspace, and harness-gym's own files never show inside a sandbox (real bubblewrap and Docker)."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from harness_gym import Task
from harness_gym.sandboxes import BubblewrapSandbox, SandboxError
from harness_gym.sandboxes.base import check_mount_path, project_paths
from harness_gym.sandboxes.seccomp import bpf_program
from harness_gym.tasks.base import TaskError, validate_suite

ATTACKS = Path(__file__).parent / "attacks"
DENIED = ("process_vm_readv", "process_vm_writev", "ptrace_attach", "ptrace_seize", "pidfd_getfd", "perf_event_open")


def inspect(run, target: str) -> dict:
    """What tests/attacks/inspect_process.py reports from inside a sandbox against ``target``."""
    result = run(f"python3 inspect_process.py {target}")
    return json.loads(result.output.strip().splitlines()[-1])


def secret_task(tmp_path: Path, task_id: str = "secret-grader") -> Task:
    """A task whose grader keeps its answer in memory and runs the workspace's answer.py."""
    workspace, grader = tmp_path / "ws", tmp_path / "grader"
    workspace.mkdir()
    grader.mkdir()
    for name in ("answer.py", "inspect_process.py"):
        shutil.copy(ATTACKS / name, workspace)
    shutil.copy(ATTACKS / "secret_grader.py", grader / "grade.py")
    return Task(id=task_id, instruction="-", mount_path="/workspace", workspace_dir=workspace, grader_files=(grader,))


def grade(task: Task, box) -> tuple[float, str, dict]:
    """Grade ``task`` in ``box``; the reward, the log, and the attack's report."""
    workspace = box.new_workspace()
    task.materialize(workspace)
    box.start(workspace, task.mount_path)
    graded = task.grade(box)
    report = json.loads((workspace / "attack.json").read_text() or "{}")
    return graded.reward, graded.log, report


# ---------------------------------------------------------------------------- no process inspects another


def test_the_filter_is_valid_bpf_for_every_architecture():
    program = bpf_program()
    assert len(program) % 8 == 0 and 0 < len(program) // 8 < 4096
    # loaded by the kernel itself: a child process installs it and then cannot ptrace
    code = textwrap.dedent(
        """
        import ctypes, os, sys
        program = sys.stdin.buffer.read()
        libc = ctypes.CDLL(None, use_errno=True)
        buffer = ctypes.create_string_buffer(program)
        class Prog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
        prog = Prog(len(program) // 8, ctypes.addressof(buffer))
        assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
        assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0, ctypes.get_errno()  # SECCOMP_MODE_FILTER
        print(libc.ptrace(0, 0, 0, 0), ctypes.get_errno(), os.getpid() > 0, libc.syscall(0x40000000 | 39))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], input=program, capture_output=True, check=True).stdout.split()
    assert out[:3] == [b"-1", b"1", b"True"]  # PTRACE_TRACEME refused with EPERM; other calls work
    assert out[3] == b"-1"  # an x32 call number is refused


@pytest.fixture
def attack_box():
    with BubblewrapSandbox(command_timeout_s=30) as box:
        workspace = box.new_workspace()
        shutil.copy(ATTACKS / "inspect_process.py", workspace)
        box.start(workspace, "/workspace")
        yield box


def test_sandboxed_processes_cannot_inspect_each_other(attack_box):
    sibling = inspect(attack_box.run, "$(sleep 60 >/dev/null & echo $!)")
    assert {sibling[k] for k in DENIED} == {"EPERM"}, sibling
    assert sibling["proc_mem_write"] != "ok" and sibling["userfaultfd"] == "EPERM"
    # the persistent shell is non-dumpable: not even its memory can be read
    shell = inspect(attack_box.run, str(attack_box.shell_pid))
    assert {shell[k] for k in DENIED} == {"EPERM"}, shell
    assert "ok" not in (shell["proc_mem_read"], shell["proc_mem_write"], shell["proc_fd_open"]), shell


def test_normal_tools_still_work(attack_box):
    result = attack_box.run(
        "echo hi | tr a-z A-Z; python3 -c 'import subprocess, multiprocessing; "
        'print(subprocess.run(["true"]).returncode, multiprocessing.cpu_count() > 0)\'; '
        "ps -o pid= | wc -l; ls /proc/self/fd >/dev/null && echo fds"
    )
    assert result.exit_code == 0 and result.output.split() == ["HI", "0", "True", result.output.split()[3], "fds"]


def test_a_workspace_program_cannot_steal_its_graders_answer(tmp_path):
    task = secret_task(tmp_path)
    with BubblewrapSandbox(command_timeout_s=30) as box:
        reward, log, report = grade(task, box)
    assert reward == 0.0, log
    assert "found" not in report and {report[k] for k in DENIED} == {"EPERM"}, report
    assert "ok" not in (report["proc_mem_read"], report["proc_mem_write"], report["proc_fd_open"]), report


def test_the_grader_attack_works_without_the_sandbox(tmp_path):
    """The control: the same grader and workspace program on the host, where the attack succeeds."""
    task = secret_task(tmp_path)
    grader = tmp_path / "grader" / "grade.py"
    out = subprocess.run(
        [sys.executable, str(grader)], cwd=tmp_path / "ws", capture_output=True, text=True, timeout=60
    ).stdout
    assert out.strip().splitlines()[-1] == "1.0", (out, (tmp_path / "ws" / "attack.json").read_text())
    del task


def test_docker_sandbox_refuses_the_ptrace_family(docker_engine, tmp_path):
    from harness_gym.sandboxes import DockerSandbox

    host, image = docker_engine
    with DockerSandbox(image, docker_host=host, command_timeout_s=30) as box:
        workspace = box.new_workspace()
        shutil.copy(ATTACKS / "inspect_process.py", workspace)
        box.start(workspace, "/workspace")
        sibling = inspect(box.run, "$(sleep 60 >/dev/null & echo $!)")
        assert {sibling[k] for k in DENIED} == {"EPERM"}, sibling
        status = box.run("grep CapEff /proc/self/status").output.split()[-1]
        assert not int(status, 16) & (1 << 19)  # no CAP_SYS_PTRACE
        reward, log, report = grade(secret_task(tmp_path), box)
    assert reward == 0.0, log
    assert "found" not in report and {report[k] for k in DENIED} == {"EPERM"}, report
    assert "ok" not in (report["proc_mem_read"], report["proc_fd_open"]), report


# ---------------------------------------------------------------------------- graders apart from the workspace

SHADOWING_FILES = {
    "json.py": "print('FORGED-json')\nraise SystemExit(0)\n",
    "random.py": "print('FORGED-random')\nraise SystemExit(0)\n",
    "sitecustomize.py": "print('FORGED-sitecustomize')\n",
    "usercustomize.py": "print('FORGED-usercustomize')\n",
    "evil.pth": "import sys; print('FORGED-pth')\n",
}
PYTHON_GRADER = (
    "python3 -c 'import json, random; print(json.dumps(1.0))'; "
    "printf 'import json\\nprint(json.dumps(1.0))\\n' | python3 -; "
    "python3 {grader}/grade.py"
)


def shadowing_task(tmp_path: Path, env: dict | None = None) -> Task:
    workspace, grader = tmp_path / "ws", tmp_path / "grader"
    workspace.mkdir()
    grader.mkdir()
    for name, text in SHADOWING_FILES.items():
        (workspace / name).write_text(text)
    (grader / "grade.py").write_text(
        "import ctypes, json, os\n"
        "assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0, 'dumpable'\n"  # PR_GET_DUMPABLE
        "print(json.dumps({'home': os.environ['HOME'], 'files': sorted(os.listdir(os.environ['HOME']))}))\n"
        "print(json.dumps(1.0))\n"
    )
    return Task(
        id="shadowing",
        instruction="-",
        workspace_dir=workspace,
        grader_files=(grader,),
        grade_command=PYTHON_GRADER,
        grader_env=env or {},
    )


def test_workspace_modules_and_customisation_never_run_in_a_grader(tmp_path):
    task = shadowing_task(tmp_path)
    with BubblewrapSandbox() as box:
        workspace = box.new_workspace()
        task.materialize(workspace)
        box.start(workspace, task.mount_path)
        # the agent also plants user-site customisation in its HOME
        box.run(
            'site=$(python3 -m site --user-site) && mkdir -p "$site" && '
            'echo "print(\'FORGED-home\')" > "$site/usercustomize.py" && cp evil.pth "$site/"'
        )
        graded = task.grade(box)
    assert "FORGED" not in graded.log, graded.log
    assert graded.log.split().count("1.0") == 3 and graded.reward == 1.0
    assert '"home": "/root", "files": []' in graded.log  # a fresh, empty HOME


def test_the_shadowing_exploit_is_real_without_safe_path(tmp_path):
    """The control: with the workspace on sys.path again, the planted module runs."""
    task = shadowing_task(tmp_path, env={"PYTHONSAFEPATH": ""})
    with BubblewrapSandbox() as box:
        workspace = box.new_workspace()
        task.materialize(workspace)
        box.start(workspace, task.mount_path)
        assert "FORGED-json" in task.grade(box).log


def test_docker_graders_run_apart_from_the_workspace(docker_engine, tmp_path):
    from harness_gym.sandboxes import DockerSandbox

    host, image = docker_engine
    task = shadowing_task(tmp_path)
    with DockerSandbox(image, docker_host=host) as box:
        workspace = box.new_workspace()
        task.materialize(workspace)
        box.start(workspace, task.mount_path)
        graded = task.grade(box)
    assert "FORGED" not in graded.log and graded.reward == 1.0, graded.log


@pytest.mark.parametrize(
    "path", ["/", "/root", "/home", "/home/agent", "/tmp", "/var/tmp", "/opt", "/usr/local/src", "/etc/x", "/proc"]
)
def test_home_and_system_mount_paths_are_refused(path):
    with pytest.raises(SandboxError, match="mount path"):
        check_mount_path(path)
    with pytest.raises(TaskError, match="task t1"):
        Task(id="t1", instruction="-", mount_path=path)


@pytest.mark.parametrize(
    "path", ["/workspace", "/testbed", "/root/.openclaw/workspace", "/home/agent/project", "/opt/app"]
)
def test_ordinary_mount_paths_are_accepted(path):
    assert check_mount_path(path) == path
    assert Task(id="t1", instruction="-", mount_path=path).mount_path == path


def test_a_suite_reports_a_task_whose_workspace_would_be_home(tmp_path):
    for task_id, mount in (("good", "/root/.openclaw/workspace"), ("home-task", "/root")):
        folder = tmp_path / task_id
        (folder / "reward").mkdir(parents=True)
        (folder / "reward" / "reward.sh").write_text("echo 1\n")
        (folder / "data_entry.json").write_text(
            json.dumps({"task_id": task_id, "user_query": "q", "input_mount_dir": mount})
        )
    suite = validate_suite(f"clawgym:{tmp_path}")
    assert [t.id for t in suite.tasks] == ["good"]
    assert len(suite.errors) == 1 and "home-task" in suite.errors[0] and "/root" in suite.errors[0]


# ---------------------------------------------------------------------------- harness-gym's files stay outside

HIDDEN_TEST_STRING = "hidden_test_"


def _search_inside(box: BubblewrapSandbox, grep_roots: str) -> str:
    """Files named like hidden tests or the package anywhere, and files mentioning its grader."""
    result = box.run(
        f"find / -path /proc -prune -o \\( -name '{HIDDEN_TEST_STRING}*' -o -name 'run_hidden_test[s]*' "
        f"-o -name 'harness_gym' -o -name 'swebench_runner*' \\) -print 2>/dev/null; "
        f"grep -rIl 'run_hidden''_tests' {grep_roots} 2>/dev/null | head",
        timeout_s=300,
    )
    assert not result.timed_out, result.note
    return result.output


def test_the_checkout_and_install_are_absent_even_when_bound(tmp_path):
    """A sandbox that shows the checkout (and the install's site folder) shows none of its files."""
    checkout = next(p for p in project_paths() if (p / "pyproject.toml").is_file())
    with BubblewrapSandbox(extra_ro_binds={str(checkout): "/src"}) as box:
        box.start(box.new_workspace(), "/workspace")
        assert box.run("ls -A /src | wc -l").output.strip() == "0"
        assert _search_inside(box, "/src /root /home /tmp /.harness /etc").strip() == ""
        grader = box.grade([], "ls -A {grader}; ls /.harness", 30)
    assert grader.output.split() == [
        ".harness-gym-key",  # the empty mount point of its one writable folder
        "bin",
        "grader",
        "grader-init",
        "tools",
    ]  # commands travel over pipes: no control folder


def test_a_system_wide_install_is_invisible_in_the_sandbox():
    """harness-gym installed under a /usr/local-style prefix and shown where the sandbox shows system
    folders: its hidden tests, graders and metadata are absent, the prefix's other files present
    (~20 s: a real ``pip install --prefix``, the proof CI runs)."""
    root = Path(tempfile.mkdtemp(prefix="harness-gym-install-"))  # readable by a sandbox's own uid
    os.chmod(root, 0o755)
    try:
        _check_install_is_invisible(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _check_install_is_invisible(tmp_path: Path) -> None:
    prefix = tmp_path / "usr" / "local"
    source = tmp_path / "source"  # a copy: building writes egg-info next to the sources
    shutil.copytree(
        Path(__file__).resolve().parent.parent,
        source,
        ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "build", "benchmarks"),
    )
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    subprocess.run(
        # --ignore-installed: without it pip uninstalls the harness-gym this test runs from
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--ignore-installed",
            *isolation,
            "--prefix",
            str(prefix),
            str(source),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    site = next(prefix.glob("lib/python3*/site-packages"))
    (site / "other_package").mkdir()
    (site / "other_package" / "__init__.py").write_text("VISIBLE = True\n")
    script = textwrap.dedent(
        f"""
        import json, harness_gym
        from harness_gym.sandboxes import BubblewrapSandbox
        assert harness_gym.__file__.startswith({str(prefix)!r}), harness_gym.__file__
        with BubblewrapSandbox(extra_ro_binds={{{str(prefix)!r}: {str(prefix)!r}}}) as box:
            box.start(box.new_workspace(), "/workspace")
            found = box.run("find {prefix} -name '{HIDDEN_TEST_STRING}*' -o -name 'run_hidden_tests*' -o -name '*.yaml'; "
                            "cat {prefix}/bin/harness-gym 2>/dev/null | wc -c; ls -A {site}/harness_gym | wc -l; "
                            "grep -rIls 'harness_gym' {prefix}; ls {site}/other_package").output
        print(json.dumps(found))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]).split() == ["0", "0", "__init__.py"], out.stdout
