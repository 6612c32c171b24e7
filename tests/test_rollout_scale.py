"""Sandboxes at rollout scale (issue 27): a sandbox lives as long as the process that owns it,
whatever thread started it; every host folder a run makes is in the crash-recovery registry."""

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.tasks.base import Task

pytestmark = requires_bwrap


def _task(root: Path) -> Task:
    folder = root / "files"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    grader = root / "grader"
    grader.mkdir()
    (grader / "grade.py").write_text("print(1.0)\n")
    return Task(id="alpha", instruction="Nothing to do.", workspace_dir=folder, grader_files=(grader,))


def _reset_in_pool_then_step(root: Path, count: int) -> int:
    """Reset ``count`` environments in a thread pool, shut the pool down (its threads exit), then run
    a command in each sandbox: how many shells were lost (dead, or restarted under the caller)."""
    task = _task(root)
    envs = [HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50) for _ in range(count)]
    try:
        with ThreadPoolExecutor(max_workers=min(count, 16)) as pool:
            list(pool.map(lambda env: env.reset(seed=0), envs))
        # the pool's threads have exited: a sandbox tied to its spawning thread is SIGKILLed by now
        time.sleep(0.5)
        lost = 0
        for env in envs:
            before = env.sandbox._proc
            result = env.sandbox.run("cat a.txt")
            if result.output != "alpha\n" or env.sandbox._proc is not before:
                lost += 1
        return lost
    finally:
        for env in envs:
            env.close()


def test_a_sandbox_outlives_the_pool_thread_that_reset_it(tmp_path):
    assert _reset_in_pool_then_step(tmp_path, 8) == 0


@pytest.mark.slow
def test_64_sandboxes_outlive_the_pool_threads_that_reset_them(tmp_path):
    assert _reset_in_pool_then_step(tmp_path, 64) == 0


_HANGING_GRADE = """
import json, sys
from harness_gym import HarnessEnv
from harness_gym.tasks.base import Task
root = sys.argv[1]
task = Task(id="hang", instruction="x", workspace_dir=root + "/files", grader_files=(root + "/grader",),
            grade_command="sleep 600", grader_payload=True, signed_verdict=True)
env = HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50)
env.reset(seed=0)
finish = env.tool_interface.finish_name
env.step('<tool_call>{"name": "%s", "arguments": {}}</tool_call>' % finish)
"""


def test_kill_9_mid_grading_leaves_no_payload_folder_after_the_next_start(tmp_path):
    """The grading payload folder (the verdict key, the transcript) is in the crash-recovery
    registry like every other folder a run makes: reclaimed after a kill -9."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile

    from harness_gym.sandboxes import isolation

    _task(tmp_path)
    tmpdir = Path(tempfile.mkdtemp(prefix="hg-payload-", dir="/tmp"))
    os.chmod(tmpdir, 0o755)  # reachable by sandbox uids, so every folder of the run lands here
    repo = Path(__file__).resolve().parent.parent
    environment = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(repo)}
    child = subprocess.Popen([sys.executable, "-c", _HANGING_GRADE, str(tmp_path)], env=environment)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(tmpdir.glob("harness-gym-payload-*")):
            assert child.poll() is None, "the child ended before grading"
            time.sleep(0.05)
        payloads = list(tmpdir.glob("harness-gym-payload-*"))
        assert payloads, "no grading started"
        time.sleep(0.3)  # the grader sandbox is running
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        assert all(p.exists() for p in payloads)  # the crash left them behind
        isolation.reclaim_dead_owners()  # what the next start does
        assert [p for p in payloads if p.exists()] == []
        shared = ("harness-gym-tools-", "harness-gym-bin-", "harness-gym-grader-init-", "harness-gym-layer-")
        assert [p.name for p in tmpdir.iterdir() if not p.name.startswith(shared)] == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        isolation.reclaim_dead_owners()
        subprocess.run(["umount", "-l", *[str(p) for p in tmpdir.glob("harness-gym-ws-*")]], capture_output=True)
        import shutil

        shutil.rmtree(tmpdir, ignore_errors=True)


@pytest.fixture
def layer_cache(monkeypatch):
    """This test's own layer cache (``tempfile.gettempdir()`` is where layers go)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="hg-layer-cache-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _old_source(root: Path) -> Path:
    """Task files last modified long ago: a copied layer's folders carry those times."""
    import os

    source = root / "task"
    source.mkdir()
    (source / "a.txt").write_text("alpha\n")
    for path in (source / "a.txt", source):
        os.utime(path, (time.time() - 7 * 24 * 3600,) * 2)
    return source


def _copy_from(source: Path):
    import shutil

    return lambda staging: shutil.copytree(source, staging, dirs_exist_ok=True)  # copystat: old times


def test_a_new_layer_survives_another_process_reclaim_right_after_it_is_renamed_into_place(
    tmp_path, layer_cache, monkeypatch
):
    """Async vector environments crashed with ``open_tree: ENOENT``: a layer just renamed into place
    had no sidecar yet, read as an older version's idle for a week, and another process's reclaim
    removed it before its maker mounted it."""
    from harness_gym.sandboxes import isolation, layers

    source = _old_source(tmp_path)
    rename = Path.rename

    def rename_then_reclaim(self, target):  # another process starts exactly then
        done = rename(self, target)
        isolation.reclaim_layer_cache()
        return done

    monkeypatch.setattr(Path, "rename", rename_then_reclaim)
    layer = layers.shared_layer([source], _copy_from(source))
    monkeypatch.undo()
    assert layer.is_dir() and (layer / "a.txt").read_text() == "alpha\n"


def test_a_layer_being_filled_survives_another_process_reclaim(tmp_path, layer_cache):
    """A staging folder whose copied files date it a week back is a live process's, not a crash's."""
    from harness_gym.sandboxes import isolation, layers

    source = _old_source(tmp_path)
    copy = _copy_from(source)

    def fill_then_reclaim(staging: Path) -> None:
        copy(staging)
        isolation.reclaim_layer_cache()  # another process starts mid-fill

    layer = layers.shared_layer([source], fill_then_reclaim)
    assert layer.is_dir() and (layer / "a.txt").read_text() == "alpha\n"


@pytest.mark.slow
@pytest.mark.parametrize("count", [32, 64])
def test_async_vector_environments_survive_repeated_resets(count):
    """``gym.make_vec(..., vectorization_mode="async")``: every sub-environment a process of its own,
    all starting, making layers and reclaiming the cache at once; no reset may fail."""
    import gymnasium as gym

    envs = gym.make_vec("Harness-S0T0O0C0W0", num_envs=count, vectorization_mode="async")
    try:
        for seed in range(20):  # the issue saw a crash in one of three runs
            envs.reset(seed=seed)
    finally:
        envs.close()


def test_spares_are_made_by_as_many_workers_as_the_limit(monkeypatch):
    """64 environments resetting at once queued behind one spare thread (p50 6.4 s, max 14.4 s)."""
    import threading

    from harness_gym.sandboxes import spare

    monkeypatch.setenv(spare.LIMIT_VARIABLE, "4")
    monkeypatch.setattr(spare, "_starter", None)
    barrier = threading.Barrier(4, timeout=20)
    futures = [spare._start_in_background(barrier.wait) for _ in range(4)]  # each waits for the other three
    assert sorted(f.result(timeout=30) for f in futures) == [0, 1, 2, 3]
    spare._starter.stop()
    monkeypatch.setattr(spare, "_starter", None)
    monkeypatch.delenv(spare.LIMIT_VARIABLE)
    assert spare.worker_limit() >= 1
    for bad in ("0", "many"):
        monkeypatch.setenv(spare.LIMIT_VARIABLE, bad)
        with pytest.raises(ValueError, match=spare.LIMIT_VARIABLE):
            spare.worker_limit()


def _python_processes(sandbox) -> int:
    listing = sandbox.run("cat /proc/[0-9]*/comm 2>/dev/null").output.split()
    return sum(name.startswith("python") for name in listing)


def test_the_tool_server_is_started_with_the_sandbox_not_at_the_first_tool_call(tmp_path):
    """The first non-bash tool call of every episode paid an interpreter start (90-280 ms)."""
    import json

    env = HarnessEnv("S0T0O0C0W0", tasks=[_task(tmp_path)], max_steps=50)
    try:
        for _ in range(3):  # the first sandbox, then spares
            env.reset(seed=0)
            deadline = time.monotonic() + 20
            while _python_processes(env.sandbox) == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _python_processes(env.sandbox) == 1  # before any tool call
            call = {"name": "file_editor", "arguments": {"command": "view", "path": "/workspace/a.txt"}}
            _, _, _, _, info = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
            assert "alpha" in env.messages[-1]["content"]
    finally:
        env.close()


def test_idle_sandbox_costs_stay_within_what_doctor_budgets():
    """``harness-gym doctor`` sizes a host by these figures (descriptors, processes per sandbox)."""
    from benchmarks import idle_sandboxes

    run = idle_sandboxes.measure(2)
    assert run["answered"] == 2 and run["left_behind"] == []
    over = [line for line in run["over_budget"] if not line.startswith("memory_mb")]  # shared pages: see 512
    assert over == [], run["per_sandbox"]


@pytest.mark.slow
def test_512_idle_sandboxes():
    """A large rollout node holds thousands of idle sandboxes: 512 here, every one answering, each
    within the descriptor, process and memory budgets doctor sizes a host by, and nothing left
    behind once they are closed (processes, descriptors, uid leases, cgroups, folders)."""
    from benchmarks import idle_sandboxes

    run = idle_sandboxes.measure(512)
    assert run["answered"] == 512
    assert run["over_budget"] == [], run["per_sandbox"]
    assert run["left_behind"] == []


def test_the_uid_pool_is_configurable_and_checked(monkeypatch):
    from harness_gym import doctor
    from harness_gym.sandboxes import isolation

    assert len(isolation.uid_pool()) >= 20_000  # 10,000 sandboxes, each with a warm spare
    monkeypatch.setenv(isolation.UID_BASE_VARIABLE, "400000")
    monkeypatch.setenv(isolation.UID_COUNT_VARIABLE, "16")
    assert isolation.uid_pool() == range(400_000, 400_016)
    if isolation.is_root():
        lease = isolation.UidLease.acquire(3)
        try:
            assert lease.uid in range(400_000, 400_016)
        finally:
            lease.release()
        check = next(c for c in doctor.run_checks(workers=64, docker=False) if c.name == "uid pool")
        assert check.status == doctor.FAIL and isolation.UID_COUNT_VARIABLE in check.detail
    for variable, bad in ((isolation.UID_COUNT_VARIABLE, "0"), (isolation.UID_BASE_VARIABLE, "lots")):
        monkeypatch.setenv(variable, bad)
        with pytest.raises(ValueError, match=variable):
            isolation.uid_pool()


def test_a_closed_sandbox_leaves_no_uid_entry_in_the_registry():
    """release() cleared the lease's generation before the registry discarded ``uid:generation``:
    every closed sandbox left a live-looking uid entry in its owner's registry log."""
    from harness_gym.sandboxes import isolation
    from harness_gym.sandboxes.bubblewrap import BubblewrapSandbox

    if not isolation.is_root():
        pytest.skip("uid leases need root")
    box = BubblewrapSandbox()
    box.start(box.new_workspace(), "/workspace")
    token = box._lease.token
    assert token in isolation.registry()._items["uid"]
    box.close()
    assert token not in isolation.registry()._items["uid"]
    assert not any(entry.startswith(token.partition(":")[0] + ":") for entry in isolation.registry()._items["uid"])


def test_commands_run_when_this_process_holds_descriptors_above_1023(tmp_path):
    """select(2) refuses descriptors above 1023: at ~170 sandboxes in one process every command and
    tool call failed with ``filedescriptor out of range in select()``."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1300:
        pytest.skip("the descriptor limit is too low to hold 1,100 descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300), hard))
    filler = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    env = HarnessEnv("S0T0O0C0W0", tasks=[_task(tmp_path)], max_steps=50)
    try:
        env.reset(seed=0)
        assert env.sandbox.run("cat a.txt").output == "alpha\n"
        call = '{"name": "file_editor", "arguments": {"command": "view", "path": "/workspace/a.txt"}}'
        env.step(f"<tool_call>{call}</tool_call>")
        assert "alpha" in env.messages[-1]["content"]
    finally:
        env.close()
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.slow
def test_a_short_soak_records_every_episode_once_and_leaves_nothing(tmp_path):
    """``benchmarks/soak.py`` for half a minute: owners killed -9, OOM, full tmpfs, hanging graders."""
    import json

    from benchmarks import soak

    out = tmp_path / "soak.json"
    code = soak.main(
        ["--minutes", "0.5", "--environments", "4", "--owners", "2", "--kill-every", "10", "--out", str(out)]
    )
    result = json.loads(out.read_text())
    assert result["recorded_exactly_once"] and result["left_behind"] == [] and result["owner_tracebacks"] == []
    assert result["owners_killed"] >= 1 and result["episodes"] > 0
    assert result["faults_that_never_fired"] == [], result["by_fault"]  # an OOM kill, a full tmpfs: seen to happen
    assert code == 0


def test_a_dead_owners_uid_outside_this_pool_stays_for_a_process_that_can_reclaim_it(monkeypatch):
    """A process with another uid pool (or an older release with a smaller one) reclaimed a dead
    owner's log, skipped its uids and deleted the log: those leases were never reclaimed."""
    from harness_gym.sandboxes import isolation

    dead_pid = 2**22 + 31  # above pid_max: never a live process
    log = isolation.state_dir() / "owners" / f"{dead_pid}-1.log"
    outside = isolation.uid_pool().stop + 5
    log.write_text(f"+uid {outside}:0123456789abcdef\n+uid not-a-uid:zz\n")
    try:
        isolation.reclaim_dead_owners()
        assert log.read_text() == f"+uid {outside}:0123456789abcdef\n"  # kept, and only what is left
        monkeypatch.setenv(isolation.UID_COUNT_VARIABLE, str(len(isolation.uid_pool()) + 10))
        isolation.reclaim_dead_owners()  # a process whose pool holds it: reclaimed, the log goes
        assert not log.exists()
    finally:
        log.unlink(missing_ok=True)


@pytest.mark.slow
def test_no_sandbox_is_lost_to_the_reclaim_of_a_dead_owner_whose_uids_it_leased_again():
    """An owner killed -9; this process leases its uids again, then a recovery pass reclaims the dead
    owner's log. Its cgroups were named by uid alone: removing them by path (``cgroup.kill``) killed
    the live tenants' sandboxes (4 of 4). Thread exits and pool shutdowns are counted too."""
    import shutil

    from benchmarks import rollout_scale
    from harness_gym.sandboxes import isolation

    with pytest.MonkeyPatch.context() as patch:  # a state folder of its own: no other process reclaims first
        patch.setenv(isolation.STATE_DIR_VARIABLE, str(isolation.state_dir()))
        patch.setenv(isolation.UID_BASE_VARIABLE, str(isolation.uid_pool().start))
        state = rollout_scale.private_host_state()
        try:
            run = rollout_scale.losses(4, seed=0)
        finally:
            shutil.rmtree(state, ignore_errors=True)
    assert run["dead_owner_logs_reclaimed"] > 0  # the pass met the dead owner's log
    assert run["uids_leased_again_from_the_dead_owner"] > 0  # else the reclaim was not put to the test
    assert {key: value for key, value in run.items() if key.startswith("lost_") and value} == {}


def test_every_host_folder_is_registered_before_it_exists(monkeypatch, tmp_path):
    """A kill -9 between ``mkdtemp`` and the registry's record left an unrecorded folder (the
    30-minute soak: 3 grading payloads and a mounted workspace in 29 kills). Each folder a run makes
    (control, grader, payload, plain and copy-on-write workspaces) is recorded before it exists."""
    import os

    from harness_gym.sandboxes import isolation, layers

    registered, unrecorded = isolation.registry(), []
    real_mkdir = os.mkdir

    def spy(path, *args, **kwargs):
        # (a folder inside a recorded one goes with it: an episode folder's idmapped-layer mount point)
        recorded = {str(path), *map(str, Path(path).parents)} & set(registered._items["dir"])
        if Path(path).name.startswith("harness-gym-") and not recorded:
            unrecorded.append(str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", spy)
    made = [isolation.private_folder("harness-gym-ctl-", tmp_path)]
    with isolation.registered_folder("harness-gym-payload-", tmp_path) as payload:
        assert payload.is_dir()
    made.append(isolation.new_workspace(None, tmp_path)[0])
    if layers.available():
        workspace = layers.prepare(1, tmp_path)
        layers.release(workspace)
        assert str(workspace.parent) not in registered._items["dir"]  # released: its record went too
        episode = layers.EpisodeMounts(1, tmp_path)  # (a namespace of its own: nothing mounted on the host)
        layers.release(episode.workspace)
        assert str(episode.folder) not in registered._items["dir"] and not episode.folder.exists()
    for path in made:
        isolation.release_workspace(path)
    assert unrecorded == []
    assert [p for p in registered._items["dir"] if p.startswith(str(tmp_path))] == []


_DIE_HOLDING_A_SANDBOX = """
import os, sys
from harness_gym import HarnessEnv
from harness_gym.tasks.base import Task
root = sys.argv[1]
task = Task(id="alpha", instruction="x", workspace_dir=root + "/files", grader_files=(root + "/grader",))
env = HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=5)
env.reset(seed=0)
print(env.sandbox._host_folder(), flush=True)  # the episode's folder on the host (its mounts are in a namespace)
os.kill(os.getpid(), 9)
"""


def test_the_first_start_after_a_dead_owner_with_a_layered_workspace_does_not_hang(tmp_path):
    """The first ``registry()`` of a process runs the recovery pass under its lock; releasing a dead
    owner's copy-on-write workspace (through its uid lease) forgets the episode folder through
    ``registry()``: with a plain lock every later owner of the soak hung there for good."""
    import os
    import subprocess
    import sys

    _task(tmp_path)
    repo = Path(__file__).resolve().parent.parent
    environment = {**os.environ, "PYTHONPATH": str(repo), "HARNESS_GYM_STATE_DIR": str(tmp_path / "state")}
    environment["HARNESS_GYM_UID_BASE"] = "3200000"  # a uid range of its own: no other process reclaims first
    dead = subprocess.run(
        [sys.executable, "-c", _DIE_HOLDING_A_SANDBOX, str(tmp_path)],
        env=environment, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    folder = Path(dead.stdout.strip())
    assert dead.returncode == -9 and folder.exists()
    start = "from harness_gym.sandboxes import isolation; isolation.registry(); print('started')"
    try:
        started = subprocess.run(
            [sys.executable, "-c", start], env=environment, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the first start after the dead owner hung in its recovery pass")
    assert started.stdout.strip() == "started"
    assert not folder.exists()  # reclaimed (the kernel dropped its tmpfs and overlay with the namespace)
    assert str(folder) not in Path("/proc/self/mountinfo").read_text()


def _fake_limits(**changes):
    from dataclasses import replace

    from harness_gym import doctor

    roomy = doctor.HostLimits(
        pid_max=4_000_000, threads_max=4_000_000, cgroup_pids=None, nproc=None, descriptors=1_000_000,
        file_max=10**9, memory_mb=10**6, uid_pool=100_000, user_namespaces=None, mounts=10**6, root=True,
        spares=True,
    )  # fmt: skip
    return replace(roomy, **changes)


@pytest.mark.parametrize(
    ("changes", "binding", "fix"),
    [
        ({"pid_max": 32_768}, "kernel.pid_max", "sysctl -w kernel.pid_max"),
        ({"descriptors": 20_000}, "RLIMIT_NOFILE (hard, one owner process)", "ulimit -Hn"),
        ({"uid_pool": 4_096}, "uid pool", "HARNESS_GYM_UID_COUNT"),
        ({"cgroup_pids": ("/sys/fs/cgroup/job", 5_000)}, "cgroup pids.max (/sys/fs/cgroup/job)", "TasksMax"),
        ({"root": False, "user_namespaces": 15_000, "nproc": 200_000}, "user.max_user_namespaces", "sysctl"),
        ({"memory_mb": 64_000}, "memory", "more memory"),
        ({"mounts": 30_000}, "fs.mount-max", "sysctl -w fs.mount-max"),
    ],
)
def test_doctor_names_the_limit_that_binds_first(changes, binding, fix):
    """10,000 environments broke first on 4,096 uids, then pid_max 32,768, then 20,000 descriptors."""
    from harness_gym import doctor

    limits = _fake_limits(**changes)
    first = doctor.capacity(limits)[0]
    assert first.name == binding and fix in first.fix
    assert first.environments < 10_000
    check = doctor.capacity_check(limits, 10_000)
    assert check.status == doctor.FAIL and binding in check.detail and fix in check.detail
    assert doctor.capacity_check(limits, first.environments).status == doctor.OK
    assert doctor.capacity_check(_fake_limits(), 10_000).status == doctor.OK


def test_doctor_reads_this_hosts_limits_as_headroom():
    from harness_gym import doctor

    limits = doctor.read_host_limits()
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert limits.pid_max is not None and 0 < limits.pid_max < pid_max  # what runs now is subtracted
    assert limits.descriptors > 0 and limits.memory_mb > 0
    spares = doctor.SANDBOXES_PER_ENVIRONMENT if limits.spares else 1
    pid_bound = next(b for b in doctor.capacity(limits) if b.name == "kernel.pid_max")
    assert pid_bound.environments == limits.pid_max // (doctor.IDLE_PROCESSES_PER_SANDBOX * spares)


def test_a_lease_search_skips_this_process_s_own_uids_unopened(monkeypatch):
    """A search from a cursor that wrapped around opened the lock file of every uid this process
    held: at 10,000 sandboxes in one process, thousands of opens per lease."""
    from harness_gym.sandboxes import isolation

    if not isolation.is_root():
        pytest.skip("uid leases need root")
    monkeypatch.setenv(isolation.UID_BASE_VARIABLE, "3300000")
    monkeypatch.setenv(isolation.UID_COUNT_VARIABLE, "64")
    leases = [isolation.UidLease.acquire(0) for _ in range(40)]
    try:
        assert [lease.uid for lease in leases] == list(range(3_300_000, 3_300_040))
        leases[30].release()
        leases[30].release()  # twice: must not forget a uid another lease holds by then
        tried = isolation.lock_files_tried
        leases[30] = isolation.UidLease.acquire(0)
        assert leases[30].uid == 3_300_030
        assert isolation.lock_files_tried - tried == 1  # the held uids before it were not opened
    finally:
        for lease in leases:
            lease.release()


def test_running_out_of_descriptors_is_a_clear_error_and_the_soft_limit_is_raised():
    """A process past its descriptor limit met ``OSError: [Errno 24] Too many open files`` deep in a
    pipe(); and the soft limit (1,024 on most hosts) stopped one process near 80 environments."""
    import os
    import resource

    from harness_gym.errors import SandboxError
    from harness_gym.sandboxes.bubblewrap import BubblewrapSandbox

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > 200_000:
        pytest.skip("the hard descriptor limit is too high to fill")
    box = BubblewrapSandbox()
    workspace = box.new_workspace()
    filler: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096) - 1, hard))
        box.start(workspace, "/workspace")  # raises the soft limit to the hard one
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
        assert box.run("echo ok").output == "ok\n"
        box.close()
        box = BubblewrapSandbox()
        workspace = box.new_workspace()
        with contextlib.suppress(OSError):
            while True:
                filler.append(os.open("/dev/null", os.O_RDONLY))
        for _ in range(3):  # too few for a sandbox's pipes and socket
            os.close(filler.pop())
        with pytest.raises(SandboxError, match=rf"out of file descriptors.*RLIMIT_NOFILE {hard}.*ulimit -Hn"):
            box.start(workspace, "/workspace")
    finally:
        for fd in filler:
            os.close(fd)
        box.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_lease_search_moves_past_another_process_s_run_of_leases(monkeypatch):
    """The cursor moved by one per lease: a process whose cursor fell inside another's run of 40
    held uids opened 41, then 40, then 39... lock files per lease (quadratic at node scale)."""
    import fcntl
    import os

    from harness_gym.sandboxes import isolation

    if not isolation.is_root():
        pytest.skip("uid leases need root")
    monkeypatch.setenv(isolation.UID_BASE_VARIABLE, "3400000")
    monkeypatch.setenv(isolation.UID_COUNT_VARIABLE, "64")
    folder = isolation.lock_dir()
    others = []  # another process's leases: locks on open files of their own, unknown to this process
    for uid in range(3_400_000, 3_400_040):
        handle = os.open(folder / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        others.append(handle)
    monkeypatch.setattr(isolation, "_uid_cursor", 0)
    tried = isolation.lock_files_tried
    leases = []
    try:
        leases = [isolation.UidLease.acquire() for _ in range(5)]
        assert [lease.uid for lease in leases] == list(range(3_400_040, 3_400_045))
        assert isolation.lock_files_tried - tried == 41 + 4  # one scan past the run, then one try each
    finally:
        for lease in leases:
            lease.release()
        for handle in others:
            os.close(handle)
