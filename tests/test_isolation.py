"""Cluster-proof isolation: cgroup v2 (a real cgroup2 hierarchy where this host has one, and a fake
cgroupfs folder for the limit files), host-wide leases across TMPDIRs, crash recovery and fork safety."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import requires_bwrap

from harness_gym.sandboxes import BubblewrapSandbox, SandboxError, isolation
from harness_gym.sandboxes.bubblewrap import SandboxLimitWarning

pytestmark = requires_bwrap
REPO = Path(__file__).resolve().parent.parent
UNIFIED = Path("/sys/fs/cgroup/unified")  # the cgroup2 hierarchy of a hybrid (v1 + v2) host


def _cgroup_of(pid: int) -> str:
    return next(line for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if line.startswith("0::"))


@pytest.mark.skipif(not (UNIFIED / "cgroup.controllers").exists(), reason="no cgroup2 hierarchy mounted")
def test_real_cgroup2_hierarchy_without_controllers_says_so(monkeypatch):
    """On this hybrid host the v2 hierarchy is real but memory and pids are bound to v1: the sandbox
    joins its v2 group, and reports (and warns) that the memory limit does not hold there."""
    if not isolation._probe(UNIFIED):
        pytest.skip("the cgroup2 hierarchy is not writable here")
    monkeypatch.setattr(isolation, "CGROUP_ROOT", UNIFIED)
    monkeypatch.setattr(isolation, "_v2_base_cache", {})
    available = set((UNIFIED / "cgroup.controllers").read_text().split())
    with BubblewrapSandbox(memory_mb=512, max_processes=64) as box:
        with pytest.warns(SandboxLimitWarning, match="memory"):
            box.start(box.new_workspace(), "/workspace")
        assert box.run("echo ok").output == "ok\n"
        group = box._cgroups[0]
        assert _cgroup_of(box._proc.pid) == f"0::/{group.name}"  # the real kernel put the sandbox there
        if "memory" not in available:
            assert "memory" in box.limits.not_enforced and "cgroup v2" in box.limits.not_enforced["memory"]
        if isolation.is_root():  # RLIMIT_NPROC on the dedicated uid still holds
            assert "RLIMIT_NPROC" in box.limits.enforced["processes"]
    assert not group.exists()
    with BubblewrapSandbox(memory_mb=512, strict_limits=True) as box:
        with pytest.raises(SandboxError, match=r"strict_limits.*memory"):
            box.start(box.new_workspace(), "/workspace")
        assert box._proc is None and not box._cgroups


def test_a_reset_kill_freezes_the_sandbox_and_leaves_bwrap_to_reap_it():
    """``stop_agent`` through the v2 freezer: every process of the sandbox but the host-side bwrap
    gets SIGKILL while frozen, the group is thawed, and bwrap reaps its init and exits by itself
    (killed too, it would leave the init a zombie to a host init that may never reap it)."""
    with BubblewrapSandbox() as box:
        box.start(box.new_workspace(), "/workspace")
        freezers = [group for group in box._cgroups if isolation.freezable(group)]
        if not freezers:
            pytest.skip("no cgroup v2 freezer for sandboxes on this host (the reset kills and waits)")
        init = box.network_pid()
        assert init is not None and box.run("(sleep 1000 &); echo started").output == "started\n"
        box.stop_agent()
        assert "frozen 0" in (freezers[0] / "cgroup.events").read_text()  # thawed
        assert box._proc.wait(timeout=10) is not None  # bwrap ended by itself once its init was gone
        assert not Path(f"/proc/{init}").exists()  # reaped by bwrap: no zombie left to the host's init


def _fake_cgroup2(root: Path, controllers: str, enabled: str) -> Path:
    """A cgroup2 mount as files: what the kernel shows at the root of a delegated subtree."""
    root.mkdir()
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text(enabled + "\n")
    (root / "cgroup.procs").write_text(f"{os.getpid()}\n")
    return root


def test_fake_cgroup2_gets_memory_pids_and_cpu_limits(tmp_path, monkeypatch):
    """A FAKE cgroupfs (plain files): checks which files the code writes for v2 and that the launcher
    joins the group; the real kernel's enforcement of memory.max is not exercised on this v1 host."""
    root = _fake_cgroup2(tmp_path / "cg", "cpu memory pids", "cpu memory pids")
    monkeypatch.setattr(isolation, "CGROUP_ROOT", root)
    monkeypatch.setattr(isolation, "_v2_base_cache", {})
    with BubblewrapSandbox(memory_mb=256, max_processes=64, cpus=0.5) as box:
        box.start(box.new_workspace(), "/workspace")
        (group,) = box._cgroups
        assert group.parent == root
        assert (group / "memory.max").read_text() == str(256 << 20)
        assert (group / "memory.swap.max").read_text() == "0"
        assert (group / "pids.max").read_text() == "64"
        assert (group / "cpu.max").read_text() == "50000 100000"
        assert (group / "cgroup.procs").read_text().strip() == str(box._proc.pid)
        assert box.limits.enforced["memory"].startswith("cgroup v2 memory.max=")
        assert box.limits.enforced["cpu"] == "cgroup v2 cpu.max=50000 100000"
        assert "processes" in box.limits.enforced and "memory" not in box.limits.not_enforced


def test_fake_cgroup2_without_delegated_controllers(tmp_path, monkeypatch):
    root = _fake_cgroup2(tmp_path / "cg", "cpu", "")
    monkeypatch.setattr(isolation, "CGROUP_ROOT", root)
    monkeypatch.setattr(isolation, "_v2_base_cache", {})
    report = isolation.make_sandbox_cgroups("t1", isolation.CgroupRequest(memory_mb=64, max_processes=8, cpus=1.0))
    assert (root / "cgroup.subtree_control").read_text() == "+cpu"  # it enabled what was delegated
    assert set(report.report.enforced) == {"cpu"}
    assert "memory controller is not available" in report.report.not_enforced["memory"]
    assert set(report.report.not_enforced) == {"memory", "processes"}


def test_not_delegated_v2_cgroup_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(isolation, "CGROUP_ROOT", _fake_cgroup2(tmp_path / "cg", "memory pids", ""))
    monkeypatch.setattr(isolation, "_v2_base_cache", {})
    monkeypatch.setenv(isolation.CGROUP_VARIABLE, "does/not/exist")
    report = isolation.make_sandbox_cgroups("t2", isolation.CgroupRequest(memory_mb=64)).report
    assert "not delegated" in report.not_enforced["memory"] and "Delegate=yes" in report.not_enforced["memory"]


def _run(script: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **(env or {})},
    )


HOLD_A_SANDBOX = """
    import sys
    from harness_gym.sandboxes import BubblewrapSandbox
    box = BubblewrapSandbox()
    box.start(box.new_workspace(), "/workspace")
    print(box.uid, flush=True)
    sys.stdin.readline()
    print(box.run("echo still-here").output.strip(), flush=True)
    box.close()
"""


@pytest.mark.skipif(not isolation.is_root(), reason="dedicated uids are leased only as root")
def test_uid_leases_are_host_wide_whatever_the_tmpdir(tmp_path):
    first = _run(HOLD_A_SANDBOX, {"TMPDIR": str(tmp_path / "a")})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    uid_a = first.stdout.readline().strip()
    second = _run(HOLD_A_SANDBOX, {"TMPDIR": str(tmp_path / "b")})
    uid_b = second.stdout.readline().strip()
    assert uid_a and uid_b and uid_a != uid_b
    out_a, _ = first.communicate("\n", timeout=60)  # the second start did not kill the first sandbox
    out_b, _ = second.communicate("\n", timeout=60)
    assert out_a.strip() == "still-here" and out_b.strip() == "still-here"


CRASH_WITH_A_SANDBOX = """
    import json, os
    from harness_gym.sandboxes import BubblewrapSandbox, isolation
    box = BubblewrapSandbox(workspace_size_mb=16)
    box.start(box.new_workspace(), "/workspace")
    box.run("(exec -a hgcrash-sleeper sleep 1000 &) ; sleep 0.2")
    with isolation.grader_folder() as grader:
        print(json.dumps({"workspace": str(box.workspace), "control": str(box._control), "grader": grader,
                          "cgroups": [str(g) for g in box._cgroups], "uid": box.uid}), flush=True)
        os.kill(os.getpid(), 9)
"""


def test_kill_9_leaves_nothing_after_the_next_start():
    crashed = _run(CRASH_WITH_A_SANDBOX)
    left = json.loads(crashed.stdout.readline())
    crashed.wait(timeout=30)
    assert crashed.returncode == -9
    assert Path(left["workspace"]).exists() and Path(left["grader"]).exists()  # what a crash leaves
    reclaimed = isolation.reclaim_dead_owners()
    assert any(left["workspace"] in line for line in reclaimed)
    for key in ("workspace", "control", "grader"):
        assert not Path(left[key]).exists(), key
    assert left["workspace"] not in Path("/proc/self/mounts").read_text()
    assert not any(Path(g).exists() for g in left["cgroups"])
    deadline = time.monotonic() + 5
    while (
        subprocess.run(["pgrep", "-f", "hgcrash-sleeper"], capture_output=True).stdout and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert subprocess.run(["pgrep", "-f", "hgcrash-sleeper"], capture_output=True).stdout == b""


FORK_THEN_EXIT_IN_THE_CHILD = """
    import os, sys
    from harness_gym.sandboxes import BubblewrapSandbox
    box = BubblewrapSandbox()
    box.start(box.new_workspace(), "/workspace")
    (box.workspace / "keep.txt").write_text("parent's")
    child = os.fork()
    if child == 0:
        del box
        sys.exit(0)  # runs atexit handlers and finalizers in the child
    os.waitpid(child, 0)
    print(box.run("cat keep.txt").output, flush=True)
    box.close()
"""


def test_a_forked_child_never_runs_the_parents_cleanup():
    process = _run(FORK_THEN_EXIT_IN_THE_CHILD)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0 and out.strip() == "parent's"


def test_state_folder_is_private_and_fixed(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    folder = isolation.state_dir()
    assert not str(folder).startswith(str(tmp_path))
    assert os.stat(folder).st_mode & 0o077 == 0
    hostile = tmp_path / "planted"
    hostile.mkdir(mode=0o777)
    os.chmod(hostile, 0o777)
    with pytest.raises(PermissionError):
        isolation._private_dir(hostile)


@pytest.mark.skipif(not isolation.is_root(), reason="dedicated uids are leased only as root")
@pytest.mark.parametrize("entry_format", ["{uid}", "{uid}:0123456789abcdef"])
def test_reclaiming_a_dead_owner_never_kills_a_live_tenant_of_its_uid(entry_format):
    """A dead owner's registry names a uid that a live process has leased since: the crash-recovery
    pass must leave that tenant alone (it killed it with ``pkill -U uid`` before lease generations)."""
    tenant = _run(HOLD_A_SANDBOX)
    uid = tenant.stdout.readline().strip()
    assert uid.isdigit()
    dead_pid = 2**22 + 29  # above pid_max: never a live process
    log = isolation.state_dir() / "owners" / f"{dead_pid}-1.log"
    log.write_text(f"+uid {entry_format.format(uid=uid)}\n+uid not-a-uid:zz\n+uid 12\n")
    try:
        reclaimed = isolation.reclaim_dead_owners()
    finally:
        log.unlink(missing_ok=True)
    ours = [line for line in reclaimed if line.endswith(f"(owner pid {dead_pid})")]  # other logs may lie there too
    assert sum("cannot read" in line for line in ours) == 2, reclaimed  # reported, not a crash
    out, _ = tenant.communicate("\n", timeout=60)
    assert out.strip() == "still-here"


@pytest.mark.skipif(not isolation.is_root(), reason="dedicated uids are leased only as root")
def test_registry_records_the_lease_generation():
    box = BubblewrapSandbox()
    box.start(box.new_workspace(), "/workspace")
    try:
        entries = isolation.read_registry(isolation.registry().path.read_text())["uid"]
        lease = box._lease
        assert lease is not None and lease.generation
        assert f"{box.uid}:{lease.generation}" in entries
        assert lease.recorded()["generation"] == lease.generation
    finally:
        box.close()


def test_registry_is_a_multiset_that_replays_to_the_live_entries(tmp_path, monkeypatch):
    """A shared layer is held once per episode using it: one discard leaves the other holder's entry,
    a discard of something never added writes nothing, and the log replays to exactly what is held."""
    monkeypatch.setenv("HARNESS_GYM_STATE_DIR", str(tmp_path))
    log = isolation.Registry()
    log.add("layer", "L1")
    log.add("layer", "L1")
    log.add("dir", "/tmp/w1")
    log.discard("layer", "L1")
    log.discard("dir", "/tmp/never-added")
    assert isolation.read_registry(log.path.read_text()) == {
        "dir": ["/tmp/w1"],
        "cgroup": [],
        "uid": [],
        "layer": ["L1"],
    }
    log.discard("layer", "L1")
    log.discard("layer", "L1")  # one more than was added: ignored, not a negative count
    log.add("layer", "L1")
    assert isolation.read_registry(log.path.read_text())["layer"] == ["L1"]
    assert "-dir /tmp/never-added" not in log.path.read_text()


def test_a_lease_record_written_over_a_longer_one_reads_back_whole(tmp_path):
    """The record is written over the old one, then cut to its length (no truncation to 0 first):
    a shorter record must leave nothing of the longer one behind."""
    handle = os.open(tmp_path / "1.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        lease = isolation.UidLease(1, handle, "a" * 16)
        lease.record(workspace="/tmp/" + "w" * 300, cgroups=["/sys/fs/cgroup/pids/x"] * 4)
        lease.generation = ""
        lease.record()
        assert lease.recorded() == {"generation": ""}
        assert os.fstat(handle).st_size == len(json.dumps({"generation": ""}))
    finally:
        os.close(handle)
