"""Copy-on-write workspaces: a shared read-only layer, per-episode changes only, graders see the
agent's final view, the size limit applies to what the agent writes, nothing left after close."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import requires_bwrap

from harness_gym.sandboxes import BubblewrapSandbox, isolation, layers

pytestmark = [
    requires_bwrap,
    pytest.mark.skipif(not layers.available(), reason="needs root, overlayfs and idmapped mounts"),
]


@pytest.fixture
def source(tmp_path):
    folder = tmp_path / "task"
    (folder / "pkg").mkdir(parents=True)
    (folder / "a.txt").write_text("alpha\n")
    (folder / "pkg" / "run.sh").write_text("echo run\n")
    (folder / "big.bin").write_bytes(os.urandom(3 << 20))
    yield folder
    layer = Path(tempfile.gettempdir()) / f"{layers.LAYER_PREFIX}{layers.signature([folder])}"
    shutil.rmtree(layer, ignore_errors=True)


def _fill(source):
    return lambda destination: shutil.copytree(source, destination, dirs_exist_ok=True, symlinks=True)


def _mounted(path: Path) -> bool:
    return str(path) in Path("/proc/self/mounts").read_text()


def test_agent_changes_stay_in_its_episode_and_graders_see_them(source):
    with BubblewrapSandbox(workspace_size_mb=2) as box, BubblewrapSandbox() as other:
        workspace = box.new_layered_workspace([source], _fill(source))
        box.start(workspace, "/testbed")
        layer = box._layer
        # the agent owns the task's files: it may edit, chmod and delete them
        script = "echo more >> a.txt && chmod +x pkg/run.sh && rm big.bin && echo new > new.txt && stat -c %u a.txt"
        result = box.run(script)
        assert result.exit_code == 0 and result.output == "0\n"
        assert (workspace / "a.txt").read_text() == "alpha\nmore\n" and not (workspace / "big.bin").exists()
        # the shared layer and the task's own files are untouched
        assert (layer / "a.txt").read_text() == "alpha\n" and (layer / "big.bin").exists()
        assert (source / "a.txt").read_text() == "alpha\n"
        # a second environment on the same task shares the layer and sees the original
        second = other.new_layered_workspace([source], _fill(source))
        other.start(second, "/testbed")
        assert other._layer == layer and other.run("cat a.txt; ls").output == "alpha\na.txt\nbig.bin\npkg\n"
        # the grader sees exactly the agent's final view
        graded = box.grade([], "cat a.txt; ls; test -x pkg/run.sh && echo executable", 30)
        assert graded.output == "alpha\nmore\na.txt\nnew.txt\npkg\nexecutable\n"


def test_size_limit_is_on_what_the_agent_writes(source):
    with BubblewrapSandbox(workspace_size_mb=2) as box:
        workspace = box.new_layered_workspace([source], _fill(source))
        box.start(workspace, "/testbed")
        # the 3 MB file in the layer costs nothing; writing 3 MB more does not fit in 2 MB
        assert box.run("head -c 1000000 /dev/zero > one.bin").exit_code == 0
        assert box.run("head -c 3000000 /dev/zero > three.bin").exit_code != 0
        used = os.statvfs(workspace)  # an overlay reports its upper layer's file system: the tmpfs
        assert used.f_blocks * used.f_frsize <= 2 << 20
        assert (used.f_blocks - used.f_bfree) * used.f_frsize < 2_200_000


def test_library_diff_and_restore_use_the_layer(source):
    with BubblewrapSandbox() as box:
        workspace = box.new_layered_workspace([source], _fill(source))
        box.start(workspace, "/testbed")
        payload = {"op": "snapshot", "args": {}, "root": "/testbed"}
        assert "read-only" in box.run_tool("library.py", payload).output
        box.run("echo changed > a.txt")
        diff = box.run_tool("library.py", {"op": "view_diff", "args": {"path": "a.txt"}, "root": "/testbed"})
        assert "-alpha" in diff.output and "+changed" in diff.output
        restore = {"op": "restore_file", "args": {"path": "a.txt"}, "root": "/testbed"}
        assert box.run_tool("library.py", restore).exit_code == 0
        assert (workspace / "a.txt").read_text() == "alpha\n"


def _host_mounts(folder: Path) -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(folder) in line]


def _folder(workspace: Path) -> Path:
    """The episode's folder on the host's tree (the workspace is this process's /proc view of it)."""
    episode = layers.episode_for(workspace)
    assert episode is not None, workspace
    return episode.folder


def test_live_episodes_mount_nothing_on_the_host_so_a_start_copies_none_of_them(source):
    """Every sandbox start copies and detaches its namespace's whole mount table (CPU per mount, and
    more per overlay): each episode mounts in a namespace of its own, so a start's table holds the
    host's mounts and its own episode's two, never another live episode's (the host held one mount
    per live episode before, three before that)."""
    boxes: list[BubblewrapSandbox] = []
    try:
        for _ in range(3):
            box = BubblewrapSandbox(workspace_size_mb=8)
            boxes.append(box)
            workspace = box.new_layered_workspace([source], _fill(source))
            box.start(workspace, "/testbed")
            assert box.run("echo y > y.txt && cat a.txt").output == "alpha\n"
        folders = [_folder(box.workspace) for box in boxes]
        for folder in folders:
            assert _host_mounts(folder) == []
        for box, folder in zip(boxes, folders, strict=True):
            assert box._proc is not None
            table = Path(f"/proc/{box._proc.pid}/mountinfo").read_text()  # the launcher's: bwrap copies it
            assert [folder for folder in folders if str(folder) in table] == [folder]
            own = [line for line in table.splitlines() if str(folder) in line]
            assert len(own) == 2 and " overlay " in own[1], own  # the tmpfs and the overlay on it
            assert box._layer is not None and box._layer.name in own[1]  # mountinfo names the layer in use
        box = boxes[0]
        assert box._layer is not None
        assert box._layer.name in layers.layers_in_use(isolation.live_registry_values("layer"))  # the cache keeps it
        assert box.run("stat -c %u a.txt y.txt").output == "0\n0\n"  # owned by the sandbox's root
        assert (box.workspace / "y.txt").read_text() == "y\n"  # the host reads it through its view
        assert list(folders[0].rglob("*")) == [folders[0] / "scratch"]  # the host's own tree shows nothing
        episode = layers.episode_for(box.workspace)
        assert episode is not None
        with pytest.raises(OSError, match="mounted already"):  # a second mount would hide the agent's files
            episode.mount(box._layer, box.uid)
    finally:
        for box in boxes:
            box.close()
    assert not any(folder.exists() for folder in folders)


def test_close_and_reset_leave_no_mounts(source):
    box = BubblewrapSandbox()
    first = box.new_layered_workspace([source], _fill(source))
    first_folder = _folder(first)
    box.start(first, "/testbed")
    box.run("echo x > x.txt")
    second = box.new_layered_workspace([source], _fill(source))  # the next episode
    assert not first_folder.exists() and not _mounted(first_folder)
    second_folder = _folder(second)
    box.start(second, "/testbed")
    assert box.run("ls").output == "a.txt\nbig.bin\npkg\n"
    box.close()
    assert not second_folder.exists() and not _mounted(second_folder)
    assert layers.episode_for(second) is None
    third = box.new_layered_workspace([source], _fill(source))  # may reuse the descriptor's number
    assert third != second and not second.exists()  # a released view never names a later episode
    box.close()


# ----------------------------------------------------------------------------- the bounded cache


def _cached(root: Path, name: str, sources, size: int, last_used: float) -> Path:
    """A layer as the cache records it (``sources`` None: made by an older version, no sidecar)."""
    layer = root / f"{layers.LAYER_PREFIX}{name}"
    layer.mkdir()
    (layer / "data.bin").write_bytes(b"x" * size)
    if sources is not None:
        meta = root / f"{layer.name}{layers.META_SUFFIX}"
        meta.write_text(json.dumps({"sources": [str(s) for s in sources], "bytes": size}))
        os.utime(meta, (last_used, last_used))
    else:
        os.utime(layer, (last_used, last_used))
    return layer


def test_cache_drops_gone_sources_stale_and_unknown_layers_and_keeps_the_rest(tmp_path):
    now = time.time()
    alive = tmp_path / "task"
    alive.mkdir()
    root = tmp_path / "cache"
    root.mkdir()
    gone = _cached(root, "gone", [tmp_path / "deleted-task"], 10, now - 600)
    stale = _cached(root, "stale", [alive], 10, now - 30 * 3600)
    legacy = _cached(root, "legacy", None, 10, now - 600)
    fresh = _cached(root, "fresh", [alive], 10, now - 600)
    just_used = _cached(root, "just-used", [tmp_path / "deleted-task"], 10, now - 5)  # within the grace
    registered = _cached(root, "registered", None, 10, now - 600)
    half_made = root / f"{layers.LAYER_PREFIX}staging-x"
    half_made.mkdir()
    os.utime(half_made, (now - 7200, now - 7200))
    with isolation.owned("layer", str(registered)):  # a live episode of this process uses it
        done = isolation.reclaim_layer_cache(cache_mb=100, max_age_h=24, root=root, now=now)
    assert {p.name for p in root.iterdir() if not p.name.endswith(layers.META_SUFFIX)} == {
        fresh.name,
        just_used.name,
        registered.name,
    }
    text = "\n".join(done)
    for layer, why in ((gone, "its sources are gone"), (stale, "unused for"), (legacy, "made by an older")):
        assert f"{layer} ({why}" in text
    assert "unfinished layer" in text and not (root / f"{gone.name}{layers.META_SUFFIX}").exists()


def test_cache_above_its_cap_drops_the_least_recently_used(tmp_path, monkeypatch):
    now = time.time()
    task = tmp_path / "task"
    task.mkdir()
    root = tmp_path / "cache"
    root.mkdir()
    oldest = _cached(root, "oldest", [task], 600_000, now - 3000)
    middle = _cached(root, "middle", [task], 600_000, now - 2000)
    newest = _cached(root, "newest", [task], 600_000, now - 1000)
    monkeypatch.setenv(layers.CACHE_MB_VARIABLE, "1.5")  # room for two of the three
    done = layers.reclaim_layers(registered=(), root=root, now=now)
    assert not oldest.exists() and middle.exists() and newest.exists()
    assert done == [f"removed layer {oldest} (cache above 1.5 MB; least recently used)"]
    monkeypatch.setenv(layers.CACHE_MB_VARIABLE, "lots")
    with pytest.raises(ValueError, match=layers.CACHE_MB_VARIABLE):
        layers.reclaim_layers(registered=(), root=root, now=now)


@pytest.fixture
def cache_folder(monkeypatch):
    """This test's own layer cache, in a folder the sandbox uid can traverse (pytest's is private)."""
    folder = Path(tempfile.mkdtemp(prefix="harness-gym-test-cache-", dir=tempfile.gettempdir()))
    folder.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_layer_in_use_survives_its_sources_and_goes_after_the_episode(source, cache_folder):
    box = BubblewrapSandbox()
    workspace = box.new_layered_workspace([source], _fill(source))
    box.start(workspace, "/testbed")
    layer = box._layer
    assert layer.parent == cache_folder and layer.name in layers.layers_in_use(isolation.live_registry_values("layer"))
    shutil.rmtree(source)
    later = time.time() + 100 * 3600
    assert isolation.reclaim_layer_cache(now=later) == [] and layer.is_dir()
    assert box.run("cat a.txt").output == "alpha\n"
    box.close()
    assert layer.name not in layers.layers_in_use(isolation.live_registry_values("layer"))
    assert isolation.reclaim_layer_cache(now=later) == [f"removed layer {layer} (its sources are gone)"]
    assert not layer.exists()


def test_the_idmapping_namespace_is_made_in_a_process_whose_forks_come_up_threaded(tmp_path):
    # torch's thread pool (after its first matrix product) starts a thread in every forked child,
    # and a threaded process cannot unshare its user namespace: the replication's bench, run after
    # in-process training, could start no sandbox. An at-fork handler that starts a thread does the same.
    script = (
        "import os, threading, time\n"
        "os.register_at_fork(after_in_child=lambda: threading.Thread(target=time.sleep, args=(5,), daemon=True).start())\n"
        "from harness_gym.sandboxes.layers import _make_userns\n"
        "fd = _make_userns(os.getuid() + 1)\n"
        "print(os.readlink(f'/proc/self/fd/{fd}') != os.readlink('/proc/self/ns/user'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"


def test_user_namespaces_are_made_outside_the_cache_lock_and_held_through_an_eviction(monkeypatch):
    """Making a namespace (an interpreter start) under the cache's lock queued 64 spares made at
    once behind each other; and a descriptor handed out of the cache was closed when another thread
    evicted it, before the mount that used it."""
    import threading
    from collections import OrderedDict

    real = layers._make_userns
    barrier = threading.Barrier(2, timeout=10)

    def together(uid: int) -> int:  # each waits until the other is making its own too
        barrier.wait()
        return real(uid)

    monkeypatch.setattr(layers, "_USERNS", OrderedDict())
    monkeypatch.setattr(layers, "_make_userns", together)
    kinds: list[str] = []

    def make(uid: int) -> None:
        with layers._userns_for(uid) as fd:
            kinds.append(os.readlink(f"/proc/self/fd/{fd}").partition(":")[0])

    threads = [threading.Thread(target=make, args=(uid,)) for uid in (70_001, 70_002)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert kinds == ["user", "user"]
    monkeypatch.setattr(layers, "_make_userns", real)
    monkeypatch.setattr(layers, "_USERNS_KEEP", 1)
    with layers._userns_for(70_003) as held:
        with layers._userns_for(70_004):  # evicts 70_003 from the cache
            assert 70_003 not in layers._USERNS
        assert os.readlink(f"/proc/self/fd/{held}").startswith("user:")
    for fd in layers._USERNS.values():
        os.close(fd)


def test_a_new_sandbox_leases_a_free_uid_whose_namespace_is_cached(source, monkeypatch):
    """A spare is a new sandbox with no previous uid: it leased the next uid of the pool and made
    that uid's namespace (two more processes to start) on a reset right after a reset."""
    with BubblewrapSandbox() as first:
        first.start(first.new_layered_workspace([source], _fill(source)), "/testbed")
        uid = first.uid
    assert uid in layers.cached_uids()

    def refuse(uid: int) -> int:
        raise AssertionError(f"made a namespace for uid {uid}")

    monkeypatch.setattr(layers, "_make_userns", refuse)
    with BubblewrapSandbox() as second:
        second.start(second.new_layered_workspace([source], _fill(source)), "/testbed")
        assert second.uid == uid and second.run("cat a.txt").output == "alpha\n"


def _namespace_descriptors(pid: int) -> list[str]:
    """The mount-namespace descriptors ``pid`` holds (what could enter an episode's namespace)."""
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("mnt:["):
            found.append(target)
    return found


def test_the_agent_reaches_neither_another_episode_nor_its_own_namespace(source):
    """The episode namespaces are held by descriptors of the owner, opened by ``nsenter`` through
    /proc: none reaches the sandbox's processes, and an agent sees its own workspace only."""
    with BubblewrapSandbox() as box, BubblewrapSandbox() as other:
        box.start(box.new_layered_workspace([source], _fill(source)), "/testbed")
        other.start(other.new_layered_workspace([source], _fill(source)), "/testbed")
        other.run("echo secret > mine.txt")
        seen = box.run("cat /proc/self/mountinfo; ls -l /proc/*/fd 2>/dev/null; ls /proc").output
        assert str(_folder(other.workspace)) not in seen and "mine.txt" not in seen
        assert "mnt:[" not in seen  # no process of the sandbox holds a mount namespace
        assert str(os.getpid()) not in box.run("ls /proc").output.split()  # nor sees the owner
        assert box._proc is not None
        chain = [
            box._proc.pid,
            *(int(p) for p in Path(f"/proc/{box._proc.pid}/task/{box._proc.pid}/children").read_text().split()),
        ]
        assert all(_namespace_descriptors(pid) == [] for pid in chain)  # bwrap and the sandbox's init
        assert box.run("cat /testbed/mine.txt").exit_code != 0


def test_a_forked_child_holds_no_episode_namespace(source):
    """A process-pool worker forked beside a live episode must not keep its namespace (its tmpfs
    and the agent's files) alive after the owner releases it."""
    with BubblewrapSandbox() as box:
        workspace = box.new_layered_workspace([source], _fill(source))
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover (the child)
            os.close(read)
            os.write(write, " ".join(_namespace_descriptors(os.getpid())).encode() + b"\n")
            os._exit(0)
        os.close(write)
        held = os.read(read, 4096).decode().strip()
        os.close(read)
        os.waitpid(child, 0)
        assert held == "" and len(_namespace_descriptors(os.getpid())) >= 1
        assert layers.episode_for(workspace) is not None  # the owner's stay
