"""Copy-on-write workspaces: a shared read-only layer, per-episode changes only, graders see the
agent's final view, the size limit applies to what the agent writes, nothing left after close."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import requires_bwrap

from harness_gym.sandboxes import BubblewrapSandbox, layers

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
        used = os.statvfs(workspace.parent)
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


def test_close_and_reset_leave_no_mounts(source):
    box = BubblewrapSandbox()
    first = box.new_layered_workspace([source], _fill(source))
    box.start(first, "/testbed")
    box.run("echo x > x.txt")
    second = box.new_layered_workspace([source], _fill(source))  # the next episode
    assert not first.parent.exists() and not _mounted(first.parent)
    box.start(second, "/testbed")
    assert box.run("ls").output == "a.txt\nbig.bin\npkg\n"
    box.close()
    assert not second.parent.exists() and not _mounted(second.parent)
