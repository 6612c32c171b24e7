"""kill -9 of a bench run mid-episode: the pool workers die with it, and the next run reclaims
everything the dead processes left (tmpfs workspaces, control and grader folders, cgroups,
registry logs) and leaves nothing behind itself."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conftest import requires_bwrap

from harness_gym.sandboxes import isolation

REPO = Path(__file__).resolve().parent.parent
pytestmark = requires_bwrap


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(p) for p in (task / "children").read_text().split()}
        except OSError:
            continue
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _live_entries(pid: int) -> dict[str, list[str]]:
    items: dict[str, list[str]] = {}
    for log in (isolation.state_dir() / "owners").glob(f"{pid}-*.log"):
        for kind, values in isolation.read_registry(log.read_text()).items():
            items.setdefault(kind, []).extend(values)
    return items


def _bench(out: Path, tmpdir: Path, *extra: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "harness_gym.cli", "bench", "--agent", "reference", "--configs", "S0T0O0C0W0"]
    command += ["--tasks", "builtin", "--task-count", "6", "--runs", "2", "--workers", "2", "--executor", "process"]
    command += ["--out", str(out), "--no-trajectories", *extra]
    environment = {
        **os.environ,
        "TMPDIR": str(tmpdir),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_kill_9_of_a_bench_run_then_the_next_run_leaves_nothing(tmp_path):
    tmpdir = Path(tempfile.mkdtemp(prefix="hg-crash-", dir="/tmp"))
    os.chmod(tmpdir, 0o755)  # reachable by sandbox uids, so every folder of the run lands here
    try:
        bench = _bench(tmp_path / "out", tmpdir)
        deadline = time.monotonic() + 240
        left: dict[str, list[str]] = {}
        # an episode's workspace (short-lived folders, a layer's staging say, are registered too)
        while time.monotonic() < deadline and not any("harness-gym-ws-" in d for d in left.get("dir", [])):
            workers = _children(bench.pid)
            left = {}
            for worker in workers:
                for kind, values in _live_entries(worker).items():
                    left.setdefault(kind, []).extend(values)
            time.sleep(0.05)
        assert left.get("dir"), (
            f"no episode started: {bench.stderr.read1().decode() if bench.poll() is not None else ''}"
        )
        workers = _children(bench.pid)
        for worker in workers:  # what is registered right now: an episode seen earlier may have ended since
            for kind, values in _live_entries(worker).items():
                left.setdefault(kind, []).extend(values)
        os.kill(bench.pid, signal.SIGKILL)
        bench.wait(timeout=30)
        deadline = time.monotonic() + 20
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers), "pool workers outlived their parent"
        assert any(Path(d).exists() for d in left["dir"])  # the crash left folders behind

        again = _bench(tmp_path / "out", tmpdir, "--resume")
        _, err = again.communicate(timeout=600)
        assert again.returncode == 0, err.decode()[-2000:]

        for folder in left["dir"]:
            assert not Path(folder).exists() and not os.path.ismount(folder), folder
        for group in left.get("cgroup", []):
            assert not Path(group).exists(), group
        # shared, content-keyed caches (tool scripts, sealed binaries, grader init, copy-on-write
        # layers) stay for every later process; nothing per episode or per process may
        shared = ("harness-gym-tools-", "harness-gym-bin-", "harness-gym-grader-init-", "harness-gym-layer-")
        leftovers = [p.name for p in tmpdir.iterdir() if not p.name.startswith(shared)]
        assert leftovers == []
        assert str(tmpdir) not in Path("/proc/self/mounts").read_text()
        stray = subprocess.run(["pgrep", "-f", f"bwrap.*{tmpdir}"], capture_output=True).stdout
        assert stray == b""
        assert not any(isolation.read_registry(log.read_text()).get("dir") for log in isolation.dead_owner_logs())
    finally:
        subprocess.run(["umount", "-l", *[str(p) for p in tmpdir.glob("harness-gym-ws-*")]], capture_output=True)
        isolation.reclaim_dead_owners()
        import shutil

        shutil.rmtree(tmpdir, ignore_errors=True)
