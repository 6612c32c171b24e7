"""The per-machine cache's verified folders (:func:`harness_gym.paths.build_verified`, what the
converted SmolLM2 is kept in): built once, and a damaged or half-built entry is found and rebuilt,
never loaded. Real files, real hashes and real processes racing; no model needed."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import harness_gym.paths
from harness_gym.paths import COMPLETE, MANIFEST, build_verified, manifest_problem

WEIGHTS = bytes(range(256)) * 64  # 16 KiB standing in for a model's weights


def builder(calls: list[Path]):
    def build(staging: Path) -> None:
        calls.append(staging)
        (staging / "weights.bin").write_bytes(WEIGHTS)
        (staging / "sub").mkdir()
        (staging / "sub" / "config.json").write_text('{"layers": 2}')

    return build


def test_a_verified_folder_is_built_once_and_checked_on_every_use(tmp_path):
    calls: list[Path] = []
    folder = build_verified(tmp_path / "entry", builder(calls))
    assert build_verified(tmp_path / "entry", builder(calls)) == folder and len(calls) == 1
    assert manifest_problem(folder) is None and (folder / COMPLETE).exists()
    recorded = json.loads((folder / MANIFEST).read_text())
    assert sorted(recorded) == ["sub/config.json", "weights.bin"] and recorded["weights.bin"][0] == len(WEIGHTS)
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]  # no staging folder left behind


def truncate(folder: Path) -> None:
    (folder / "weights.bin").write_bytes(WEIGHTS[:1000])


def flip_a_byte(folder: Path) -> None:  # same size: only the hash tells
    data = bytearray(WEIGHTS)
    data[5000] ^= 1
    (folder / "weights.bin").write_bytes(bytes(data))


DAMAGE = {
    "truncated": truncate,
    "a byte flipped": flip_a_byte,
    "a file removed": lambda folder: (folder / "sub" / "config.json").unlink(),
    "a file added": lambda folder: (folder / "stray.bin").write_bytes(b"x"),
    "no manifest": lambda folder: (folder / MANIFEST).unlink(),
    "a garbled manifest": lambda folder: (folder / MANIFEST).write_text("{"),
    "half-built (no completion mark)": lambda folder: (folder / COMPLETE).unlink(),
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_or_partial_entry_is_detected_and_rebuilt(tmp_path, damage):
    calls: list[Path] = []
    folder = build_verified(tmp_path / "entry", builder(calls))
    damage(folder)
    assert manifest_problem(folder) is not None or not (folder / COMPLETE).exists()
    assert build_verified(tmp_path / "entry", builder(calls)) == folder and len(calls) == 2
    assert manifest_problem(folder) is None and (folder / "weights.bin").read_bytes() == WEIGHTS
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]  # the damaged copy is gone too


def test_manifest_problem_names_the_damaged_file(tmp_path):
    folder = build_verified(tmp_path / "entry", builder([]))
    flip_a_byte(folder)
    assert manifest_problem(folder) == "files that differ from the manifest: weights.bin"


def test_the_folder_appears_only_whole(tmp_path):
    """Built in a staging folder and renamed into place: a reader polling the name while the build
    writes never sees a half-written file or a folder without its manifest."""
    folder, seen, stop = tmp_path / "entry", [], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):  # not there yet
                seen.append((len((folder / "weights.bin").read_bytes()), (folder / MANIFEST).exists()))
            time.sleep(0.002)

    def build(staging: Path) -> None:
        (staging / "weights.bin").write_bytes(WEIGHTS[:100])
        time.sleep(0.2)  # the half-written moment a reader must never meet
        (staging / "weights.bin").write_bytes(WEIGHTS)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        build_verified(folder, build)
        time.sleep(0.05)
    finally:
        stop.set()
        watcher.join()
    assert seen and set(seen) == {(len(WEIGHTS), True)}


# paths.py needs only the standard library: loaded by its file, without the package's (slow) import
RACER = """
import importlib.util, sys, time
from pathlib import Path
spec = importlib.util.spec_from_file_location("paths", sys.argv[4])
paths = importlib.util.module_from_spec(spec)
spec.loader.exec_module(paths)

def build(staging):
    time.sleep(0.3)  # both processes are inside their builds at once
    (staging / "weights.bin").write_bytes(bytes(range(256)) * 64)
    (Path(sys.argv[2]) / f"built-{sys.argv[3]}").touch()

paths.build_verified(Path(sys.argv[1]), build)
print((Path(sys.argv[1]) / "weights.bin").stat().st_size)
"""


def test_concurrent_builders_both_get_a_whole_folder(tmp_path):
    (tmp_path / "log").mkdir()
    module = Path(harness_gym.paths.__file__)
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(tmp_path / "cache" / "entry"), str(tmp_path / "log"), str(n), module],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    outputs = [racer.communicate(timeout=60)[0].strip() for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0] and outputs == [str(len(WEIGHTS))] * 2
    assert manifest_problem(tmp_path / "cache" / "entry") is None
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["entry"]
