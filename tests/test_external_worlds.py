"""Real CLIs inside the task's world (issue 26, item 4): the CLI runs on the world the task's suite
or the caller names, under bubblewrap or Docker, from an install tree that carries its own runtime
and is checked against the world's libraries before any sandbox starts.

Default suite: the trees' own runtimes (no sandbox), the library and glibc checks against small
fake worlds (gcc-built files, no sandbox), the world choice of the gym env and bench (errors, no
episode), and one Claude Code ``--bare`` episode on the built ``clawgym`` world under bubblewrap.
Behind ``slow``: the same CLI under Docker (reference 1.0, do-nothing 0.0), mini-swe-agent on a world.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_solution, require_cli, requires_bwrap

from harness_gym.external.catalog import load_cli, shipped_clis, validate_cli
from harness_gym.external.install import install_path, installed
from harness_gym.external.policies import DoNothingPolicy
from harness_gym.external.runner import run_external_episode, tree_bins
from harness_gym.external.runtime import WorldRuntimeError, check_tree, read_elf
from harness_gym.tasks import load_tasks
from harness_gym.tasks.base import Task
from harness_gym.worlds import WorldError

TASK_ID = "workspace-sort-unique"
WHERE = "test -e /usr/bin/docker && echo hg-on-the-host || echo hg-in-the-world"  # the world has no docker


@pytest.fixture(scope="module")
def task() -> Task:
    return next(t for t in load_tasks("builtin") if t.id == TASK_ID)


# ---------------------------------------------------------------------------- self-contained trees


def test_installed_trees_carry_their_own_node_or_python() -> None:
    """A Node CLI's entry finds its Node in the tree; a Python CLI's venv is made from the tree's own
    interpreter (before: the host's /usr/bin/python3.11 and the host's node, which no world has)."""
    checked = 0
    for name, cli in shipped_clis().items():
        if installed(cli) is None:
            continue
        folder = install_path(cli)
        if cli.package["manager"] == "pip":
            config = (folder / "venv/pyvenv.cfg").read_text()
            home = next(line.split("=", 1)[1].strip() for line in config.splitlines() if line.startswith("home"))
            assert home.startswith(f"{folder}/"), f"{name}: its venv uses {home}"
            assert (folder / f"python/lib/python{cli.package['python']}/os.py").is_file(), name
        else:
            entry = (folder / cli.data["entry"]).resolve()
            if read_elf(entry) is None:  # a script: its Node must be the tree's
                assert any((Path(b) / "node").exists() for b in tree_bins(folder)), f"{name} has no Node in its tree"
        checked += 1
    if not checked:
        pytest.skip("no CLI installed")


def test_a_changed_tree_layout_is_a_new_install_key() -> None:
    from harness_gym.spec import spec_hash

    pip = load_cli("mini-swe-agent")
    same_package_old_layout = spec_hash(dict(pip.package))[:12]
    assert not pip.install_key.endswith(same_package_old_layout)  # layout 2 (own interpreter): a new tree
    npm = load_cli("claude-code")
    assert npm.install_key.endswith(spec_hash(dict(npm.package))[:12])  # unchanged layout


# ---------------------------------------------------------------------------- the world's libraries

_LOADER = "/lib64/ld-linux-x86-64.so.2"


@pytest.fixture
def fake_worlds(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Built-looking worlds in a private worlds folder: ``make(name, libraries)`` copies the host's
    loader and the named host libraries (or given files) into a root filesystem."""
    if shutil.which("gcc") is None or not Path(_LOADER).exists():
        pytest.skip("needs gcc and an x86-64 glibc host")
    folder = Path(tempfile.mkdtemp(prefix="hg-worlds-test-"))
    monkeypatch.setenv("HARNESS_GYM_WORLDS", str(folder))
    from harness_gym.worlds import load_world

    def make(name: str, libraries: dict[str, Path]) -> Path:
        definition = folder / f"{name}.yaml"
        definition.write_text(f"version: 1\nname: {name}\ndescription: a test world\nbase: {{debian: bookworm}}\n")
        world = load_world(definition)
        root = world.rootfs
        for inside in ("lib64", "lib/x86_64-linux-gnu", "usr/bin", "bin"):
            (root / inside).mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(_LOADER).resolve(), root / "lib64/ld-linux-x86-64.so.2")
        for interpreter in ("sh", "bash", "python3", "python"):  # the task's grader looks for them
            (root / "usr/bin" / interpreter).touch()
        for library, source in libraries.items():
            shutil.copy(Path(source).resolve(), root / "lib/x86_64-linux-gnu" / library)
        (world.folder / "world.json").write_text(json.dumps({"name": name}))
        return definition

    yield make
    shutil.rmtree(folder, ignore_errors=True)


def _fake_tree(external: Path, source: str, libraries: tuple[str, ...] = ()) -> Any:
    """A CLI whose entry is a native C program compiled here (it links what the host has, and
    ``libraries`` even unused)."""
    data = {
        "name": "native",
        "description": "a native test CLI",
        "package": {"manager": "npm", "name": "hg-native-cli", "version": "1.0.0"},
        "entry": "bin/native",
        "wire_api": "chat",
        "model": "policy",
        "argv": ["{entry}"],
        "shell_tool": {"name": "bash", "argument": "command"},
        "tool_roles": {"bash": "shell"},
        "completion": {"exit_codes": [0]},
    }
    cli = validate_cli(data)
    folder = install_path(cli)
    (folder / "bin").mkdir(parents=True)
    program = folder / "bin/native.c"
    program.write_text(source)
    links = ["-Wl,--no-as-needed", *(f"-l{name}" for name in libraries)] if libraries else []
    subprocess.run(["gcc", str(program), *links, "-o", str(folder / "bin/native")], check=True)
    (folder / "install.json").write_text(json.dumps({"key": cli.install_key}))
    return cli


@pytest.fixture
def external_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="hg-external-test-"))
    folder.chmod(0o755)
    monkeypatch.setenv("HARNESS_GYM_EXTERNAL", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


_LIBC = {n: Path(f"/lib/x86_64-linux-gnu/{n}") for n in ("libc.so.6", "libm.so.6")}


def test_a_world_without_libstdcxx_is_a_clear_error_before_any_sandbox(
    fake_worlds: Any, external_dir: Path, task: Task
) -> None:
    cli = _fake_tree(external_dir, "int main(void){return 0;}\n", ("stdc++",))
    gcc_s = Path("/lib/x86_64-linux-gnu/libgcc_s.so.1")
    lean = fake_worlds("lean", {**_LIBC, "libgcc_s.so.1": gcc_s})
    with pytest.raises(WorldRuntimeError, match=r"needs libstdc\+\+\.so\.6, which world 'lean' does not have"):
        run_external_episode(cli, task, DoNothingPolicy(), world=str(lean))
    full = fake_worlds(
        "full", {**_LIBC, "libgcc_s.so.1": gcc_s, "libstdc++.so.6": Path("/lib/x86_64-linux-gnu/libstdc++.so.6")}
    )
    from harness_gym.worlds import load_world

    world = load_world(full)
    check_tree(cli.id, install_path(cli) / "bin/native", install_path(cli), world.rootfs, "full")  # all there


def test_a_world_with_an_older_glibc_is_a_clear_error(fake_worlds: Any, external_dir: Path, task: Task) -> None:
    cli = _fake_tree(external_dir, "int main(void){return 0;}\n")
    wanted = read_elf(install_path(cli) / "bin/native")
    assert wanted is not None and "GLIBC_2.34" in wanted.needs_versions["libc.so.6"]  # __libc_start_main
    old = external_dir / "oldlibc"
    old.mkdir()
    (old / "v.map").write_text("GLIBC_2.2.5 { global: *; };\n")
    (old / "c.c").write_text("int hg_old_glibc(void){return 1;}\n")
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-nostdlib",
            "-Wl,-soname,libc.so.6",
            f"-Wl,--version-script={old / 'v.map'}",
            str(old / "c.c"),
            "-o",
            str(old / "libc.so.6"),
        ],
        check=True,
    )
    world = fake_worlds("oldglibc", {"libc.so.6": old / "libc.so.6"})
    with pytest.raises(WorldRuntimeError) as raised:
        run_external_episode(cli, task, DoNothingPolicy(), world=str(world))
    message = str(raised.value)
    assert "GLIBC_2.34" in message and "libc.so.6" in message and "'oldglibc'" in message
    assert "up to GLIBC_2.2.5 (an older glibc)" in message


def test_a_script_entry_whose_runtime_the_world_lacks_is_a_clear_error(fake_worlds: Any, external_dir: Path) -> None:
    """An old-layout Node CLI (``#!/usr/bin/env node``, no Node in its tree) on a world without node."""
    cli = _fake_tree(external_dir, "int main(void){return 0;}\n")
    entry = install_path(cli) / "bin/launcher"
    entry.write_text("#!/usr/bin/env node\nconsole.log(1)\n")
    from harness_gym.worlds import load_world

    world = load_world(fake_worlds("nonode", dict(_LIBC)))
    with pytest.raises(WorldRuntimeError, match=r"runs on `node`.*neither its install tree nor world 'nonode'"):
        check_tree(cli.id, entry, install_path(cli), world.rootfs, "nonode")
    node_bin = install_path(cli) / "node_modules/.bin"
    node_bin.mkdir(parents=True)
    (node_bin / "node").symlink_to(install_path(cli) / "bin/native")  # the tree's own (native) runtime
    check_tree(cli.id, entry, install_path(cli), world.rootfs, "nonode", tree_bins(install_path(cli)))


# ---------------------------------------------------------------------------- choosing the world


def test_gym_env_and_bench_take_the_world_and_refuse_an_unknown_one(task: Task) -> None:
    require_cli("claude-code-bare")
    import gymnasium as gym

    with pytest.raises(WorldError, match="no-such-world"):
        gym.make("harness_gym/External-ClaudeCodeBare-v0", tasks=[task], world="no-such-world")
    with pytest.raises(ValueError, match="bubblewrap or docker"):
        gym.make("harness_gym/External-ClaudeCodeBare-v0", tasks=[task], sandbox="unsafe-host")
    with pytest.raises(ValueError, match="under Docker needs a world"):  # the host's folders are no image
        run_external_episode("external:claude-code-bare", task, DoNothingPolicy(), sandbox="docker")
    from harness_gym.bench.external import run_external_plan
    from harness_gym.records import EpisodePlan, HarnessChoice

    plan = EpisodePlan(HarnessChoice("external:claude-code-bare", "external"), task.id, 0, 0, "null")
    record, episode = run_external_plan(plan, lambda: None, [task], {"world": "no-such-world"})
    assert episode is None and record["outcome"] == "error" and "no-such-world" in record["error"]


@requires_bwrap
def test_a_light_cli_runs_on_a_built_world_under_bubblewrap(task: Task, clawgym_world: Any) -> None:
    require_cli("claude-code-bare")
    policy = cli_solution(task, "claude-code-bare", first=(WHERE,))
    episode = run_external_episode("external:claude-code-bare", task, policy, max_turns=10, wall_s=400, world="clawgym")
    record = episode.record
    assert record["outcome"] == "passed" and record["reward"] == 1.0, record["error"]
    assert record["world"] == "clawgym" and record["sandbox"] == "bubblewrap"
    results = [m["content"] for m in episode.transcript if m["role"] == "tool"]
    assert any("hg-in-the-world" in str(r) for r in results) and not any("hg-on-the-host" in str(r) for r in results)


@pytest.mark.slow
@requires_bwrap
def test_mini_swe_agent_runs_on_a_world_from_its_own_interpreter(task: Task, clawgym_world: Any) -> None:
    require_cli("mini-swe-agent")
    policy = cli_solution(task, "mini-swe-agent")
    episode = run_external_episode("external:mini-swe-agent", task, policy, max_turns=10, wall_s=600, world="clawgym")
    assert episode.record["outcome"] == "passed" and episode.record["reward"] == 1.0, episode.record["error"]


@pytest.mark.slow
def test_a_light_cli_runs_in_docker_on_the_world(task: Task, docker_engine: Any, clawgym_world: Any) -> None:
    """Claude Code --bare in the Docker sandbox (network none, the tree bind-mounted read-only, the
    proxy through the host-side forwarder in its network namespace): the reference solves the task, doing nothing scores 0."""
    require_cli("claude-code-bare")
    host, _ = docker_engine
    options = {"docker_host": host} if host else None
    tree = require_cli("claude-code-bare")
    escape = f"touch {tree}/hg-escape; chmod u+w {tree}; echo hg-tree-write=$?"  # root in the container
    policy = cli_solution(task, "claude-code-bare", first=(WHERE, escape))
    solved = run_external_episode(
        "external:claude-code-bare",
        task,
        policy,
        max_turns=10,
        wall_s=600,
        world="clawgym",
        sandbox="docker",
        sandbox_options=options,
    )
    record = solved.record
    assert record["outcome"] == "passed" and record["reward"] == 1.0, record["error"]
    assert record["sandbox"] == "docker" and record["world"] == "clawgym"
    results = [str(m["content"]) for m in solved.transcript if m["role"] == "tool"]
    assert any("hg-in-the-world" in r for r in results)
    assert any("hg-tree-write=1" in r for r in results) and not (tree / "hg-escape").exists()  # shown read-only
    nothing = run_external_episode(
        "external:claude-code-bare",
        task,
        DoNothingPolicy(),
        max_turns=3,
        wall_s=600,
        world="clawgym",
        sandbox="docker",
        sandbox_options=options,
    )
    assert nothing.record["reward"] == 0.0 and not nothing.record["passed"]
