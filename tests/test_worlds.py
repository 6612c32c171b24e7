"""Worlds: definitions validated and hashed, root filesystems built from Debian, Docker images and OCI
layouts, sandboxes that run on them under bubblewrap and Docker, and a SWE-bench-format instance in
an image made from a world."""

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
import textwrap

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.cli import main
from harness_gym.tasks import load_tasks, validate_suite
from harness_gym.worlds import WorldError, build_world, docker_image, load_world

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="building a world needs root")


def world_file(tmp_path, text):
    path = tmp_path / "world.yaml"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def bash(env, command):
    call = {"name": env.tool_interface.name_for("execute_bash"), "arguments": {"command": command}}
    return env.step(f"<tool_call>{json.dumps(call)}</tool_call>")[0]["messages"][-1]["content"]


def finish(env):
    call = {"name": env.tool_interface.name_for("finish"), "arguments": {"message": "done"}}
    return env.step(f"<tool_call>{json.dumps(call)}</tool_call>")


@pytest.mark.parametrize(
    "body, message",
    [
        ("name: x\nbase: {host: true}\n", "'version' is a required property"),
        ("version: 1\nname: Bad Name\nbase: {host: true}\n", "does not match"),
        ("version: 1\nname: x\nbase: {host: true}\npackages: [jq]\n", "at $.packages"),
        ("version: 1\nname: x\nbase: {oci: /x}\npackages: [jq]\n", "at $.packages"),
        ("version: 1\nname: x\nbase: {debian: bookworm, flavour: big}\n", "at $.base"),
        ("version: 1\nname: x\nbase: {debian: bookworm}\nrecipe: []\n", "Additional properties"),
    ],
)
def test_invalid_definitions_are_refused_with_their_path(tmp_path, body, message):
    with pytest.raises(WorldError, match="invalid world definition") as error:
        load_world(world_file(tmp_path, body))
    assert message in str(error.value)


def test_unknown_and_unbuilt_worlds_name_the_fix(tmp_path, monkeypatch):
    with pytest.raises(WorldError, match=r"unknown world 'nope'; shipped worlds: \['clawgym', 'host', 'python'\]"):
        load_world("nope")
    monkeypatch.setenv("HARNESS_GYM_WORLDS", str(tmp_path / "empty"))
    with pytest.raises(WorldError, match="build it once with `harness-gym worlds build python`"):
        HarnessEnv(tasks=load_tasks("builtin")[:1], world="python")  # at construction, not mid-run
    assert main(["worlds", "path", "python"]) == 2


def test_the_digest_follows_the_definition(tmp_path):
    first = load_world(world_file(tmp_path, "version: 1\nname: w\nbase: {debian: bookworm}\npackages: [jq]\n"))
    again = load_world(world_file(tmp_path, "version: 1\nname: w\nbase: {debian: bookworm}\npackages: [jq]\n"))
    other = load_world(world_file(tmp_path, "version: 1\nname: w\nbase: {debian: bookworm}\npackages: [git]\n"))
    assert first.digest == again.digest != other.digest and len(first.digest) == 16
    assert first.folder != other.folder  # a changed definition is built beside the old one


def _layer(files, whiteouts=()):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name in whiteouts:
            tar.addfile(tarfile.TarInfo(name))
    return gzip.compress(buffer.getvalue())


def _blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}"


@needs_root
def test_an_oci_layout_becomes_a_world_with_whiteouts_applied(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GYM_WORLDS", str(tmp_path / "worlds"))
    layout = tmp_path / "oci"
    lower = _layer({"etc/motd": b"lower\n", "opt/a/keep": b"1", "opt/a/gone": b"2", "opt/b/x": b"3"})
    upper = _layer({"etc/motd": b"upper\n", "opt/b/new": b"4"}, whiteouts=["opt/a/.wh.gone", "opt/b/.wh..wh..opq"])
    layers = [
        {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": _blob(layout, d), "size": len(d)}
        for d in (lower, upper)
    ]
    manifest = json.dumps({"schemaVersion": 2, "layers": layers}).encode()
    index = {"schemaVersion": 2, "manifests": [{"digest": _blob(layout, manifest), "size": len(manifest)}]}
    (layout / "index.json").write_text(json.dumps(index))
    lines = []
    world = build_world(
        world_file(tmp_path, f"version: 1\nname: tiny\nbase: {{oci: {layout}}}\n"), progress=lines.append
    )
    root = world.root()
    assert (root / "etc/motd").read_text() == "upper\n" and (root / "opt/a/keep").exists()
    assert not (root / "opt/a/gone").exists() and sorted(p.name for p in (root / "opt/b").iterdir()) == ["new"]
    assert any("layer 2/2" in line for line in lines) and world.manifest()["digest"] == world.digest
    assert not list((tmp_path / "worlds").glob(".tiny-building-*"))  # the staging folder is gone
    assert main(["worlds", "rm", str(tmp_path / "world.yaml")]) == 2  # rm takes names, not files
    assert main(["worlds", "rm", "tiny"]) == 0 and not world.built


@requires_bwrap
def test_a_sandbox_on_the_clawgym_world(clawgym_world):
    """The world's tools are there, and nothing of the host's /usr is: not even harness-gym itself."""
    env = HarnessEnv(tasks=load_tasks("builtin")[:1], world="clawgym")
    env.reset(seed=0)
    out = bash(
        env, "python --version && python -m pytest --version && jq --version && git --version && sqlite3 -version"
    )
    assert "Python 3" in out and "pytest" in out and "jq-" in out and "git version" in out, out
    assert "command not found" not in out
    hidden = bash(env, "ls /usr/local/lib/python3*/*-packages 2>&1; find / -name 'hidden_test_*' 2>/dev/null | head")
    assert "harness_gym" not in hidden and "hidden_test_" not in hidden, hidden
    _, reward, *_ = finish(env)
    env.close()
    assert reward == 0.0  # the task is unsolved: the grader ran on the world too


def test_cli_lists_worlds(capsys):
    assert main(["worlds", "list"]) == 0
    listing = capsys.readouterr().out
    assert listing.splitlines()[0].split()[:3] == ["world", "built", "size"]
    assert {line.split()[0] for line in listing.splitlines()[1:]} == {"clawgym", "host", "python"}
    assert main(["worlds", "build"]) == 2  # no name


@needs_root
def test_a_world_from_a_docker_image(docker_engine, tmp_path, monkeypatch):
    host, image = docker_engine
    monkeypatch.setenv("DOCKER_HOST", host)
    monkeypatch.setenv("HARNESS_GYM_WORLDS", str(tmp_path / "worlds"))
    definition = world_file(tmp_path, f"version: 1\nname: fromimage\nbase: {{docker_image: '{image}'}}\n")
    root = build_world(definition, progress=lambda line: None).root()
    assert (root / "bin" / "busybox").is_file() and (root / "usr" / "bin" / "python3").exists()


SWE_TEST_PATCH = "\n".join(
    [
        "--- a/tests/test_words.py",
        "+++ b/tests/test_words.py",
        "@@ -4,3 +4,7 @@",
        " ",
        " def test_title():",
        '     assert title("a b") == "A B"',
        "+",
        "+",
        "+def test_count():",
        '+    assert count("a b  c") == 3',
        "",
    ]
)
SWE_GOLD = "\n".join(
    [
        "--- a/words.py",
        "+++ b/words.py",
        "@@ -1,4 +1,4 @@",
        " def count(text):",
        '-    return len(text.split(" "))',
        "+    return len(text.split())",
        " ",
        " ",
        "",
    ]
)


@needs_root
def test_swebench_instance_on_an_image_made_from_a_world(docker_engine, clawgym_world, tmp_path, monkeypatch):
    """A SWE-bench-format instance end to end through the real Docker backend, on an image that is
    a world plus a small git repository at /testbed: the gold patch resolves it, no patch does not."""
    host, _ = docker_engine
    monkeypatch.setenv("DOCKER_HOST", host)
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    base = docker_image(clawgym_world, host)
    assert base == docker_image(clawgym_world, host)  # imported once
    repo = tmp_path / "testbed"
    (repo / "tests").mkdir(parents=True)
    (repo / "words.py").write_text(
        'def count(text):\n    return len(text.split(" "))\n\n\ndef title(text):\n    return text.title()\n'
    )
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_words.py").write_text(
        'from words import count, title\n\n\ndef test_title():\n    assert title("a b") == "A B"\n'
    )
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"], check=True
    )
    tag = "sweb.eval.x86_64.demo_1776_words-1:latest"
    container = subprocess.run(
        ["docker", "create", base, "true"], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        subprocess.run(["docker", "cp", str(repo), f"{container}:/testbed"], check=True)
        subprocess.run(["docker", "commit", container, tag], check=True, capture_output=True)
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True)
    row = {
        "repo": "demo/words", "instance_id": "demo__words-1", "base_commit": "HEAD", "patch": SWE_GOLD,
        "test_patch": SWE_TEST_PATCH, "problem_statement": "count() miscounts repeated spaces.", "hints_text": "",
        "version": "1.0", "FAIL_TO_PASS": json.dumps(["tests/test_words.py::test_count"]),
        "PASS_TO_PASS": json.dumps(["tests/test_words.py::test_title"]), "environment_setup_commit": "HEAD",
    }  # fmt: skip
    (tmp_path / "swe.jsonl").write_text(json.dumps(row) + "\n")
    suite = validate_suite(f"swebench:{tmp_path / 'swe.jsonl'}")
    assert suite.errors == [] and suite.tasks[0].image == tag
    env = HarnessEnv(tasks=suite.tasks)
    env.reset(seed=0)
    _, reward, *_ = finish(env)  # no patch
    assert reward == 0.0, env.last_grade.log
    env.reset(seed=0)
    applied = bash(env, f"cat > /tmp/gold.diff <<'EOF'\n{SWE_GOLD}EOF\ngit apply /tmp/gold.diff && git diff --stat")
    assert "1 file changed" in applied, applied
    _, reward, _, _, info = finish(env)
    env.close()
    assert reward == 1.0, (info["reward_breakdown"], env.last_grade.log)


def test_interpreters_a_grader_calls_are_found_where_commands_start(tmp_path):
    from harness_gym.worlds import grader_scripts, interpreters_called

    (tmp_path / "reward.sh").write_text("#!/bin/bash\nset -e\nif true; then ruby check.rb; fi\nout=$(php -r 1)\n")
    (tmp_path / "check.js").write_text("#!/usr/bin/env node\nconsole.log(1)\n")
    (tmp_path / "notes.txt").write_text("ruby php perl\n")  # data, not a script
    (tmp_path / "data.py").write_text("print('run perl here')\n")  # not at a command's position
    texts = grader_scripts("timeout 60 perl grade.pl && python3 -m pytest", [tmp_path])
    assert interpreters_called(texts) == {"bash", "ruby", "php", "node", "perl", "python3"}
    assert interpreters_called(["echo rubyist; cat php.ini"]) == set()
