"""Easy workspace tasks a small model can learn: one to three tool calls built from words in the prompt.

Harness Scaling's effect (a policy trained in one harness learns its interface, not the task) can
only be watched on tasks the policy can learn at all. These tasks are solved by a command or three
whose every word is in the prompt (create a file with given content, append a line, copy, rename,
count lines, replace a word, delete, move into a folder), so a 135M-parameter model can learn them
on a CPU. Each task is drawn from a seed; graders are data (``expect.json``: files that must hold
exact content, files that must be gone), checked by one shared runner that never executes anything
from the workspace.

    tasks="generated-easy:7"                          # 40 tasks of every template, from seed 7
    tasks="generated-easy:7#count=200,templates=train" # the training templates only
    tasks="generated-easy:1007#templates=heldout"      # templates never trained on

Held out two ways: by seed (a different seed, different words and files) and by template
(:data:`HELDOUT_TEMPLATES` never appear in ``templates=train``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness_gym.paths import build_once, cache_dir
from harness_gym.tasks.base import Suite, Task, TaskError, register_loader

GENERATOR_VERSION = 1  # bump when a template changes: cached suites are keyed by it
MOUNT = "/workspace"
RUNNER = Path(__file__).resolve().parent / "graders" / "easy_runner.py"
DEFAULT_COUNT = 40
WORDS = (
    "apple", "banana", "cherry", "mango", "lemon", "peach", "plum", "grape", "melon", "kiwi",
    "red", "green", "blue", "amber", "violet", "silver", "golden", "coral", "olive", "ivory",
    "otter", "falcon", "badger", "heron", "lynx", "panda", "tiger", "raven", "koala", "bison",
    "river", "forest", "meadow", "canyon", "island", "harbor", "valley", "summit", "desert", "glacier",
)  # fmt: skip


@dataclass
class Draft:
    """One task as a template draws it: prompt, starting files, expectations and the solution."""

    instruction: str
    files: dict[str, str] = field(default_factory=dict)
    expect: dict[str, str] = field(default_factory=dict)  # path -> exact content after the task
    absent: list[str] = field(default_factory=list)  # paths that must not exist afterwards
    commands: list[str] = field(default_factory=list)  # the reference solution, one bash call each

    def solution(self) -> tuple[dict[str, Any], ...]:
        return tuple({"tool": "execute_bash", "arguments": {"command": c}} for c in self.commands)


def _pick(rng: np.random.Generator, count: int) -> list[str]:
    return [str(w) for w in rng.choice(WORDS, size=count, replace=False)]


def _lines(words: list[str]) -> str:
    return "".join(f"{w}\n" for w in words)


def _create_file(rng: np.random.Generator) -> Draft:
    name, word = _pick(rng, 2)
    return Draft(
        f"Create a file named {name}.txt containing the word {word}.",
        expect={f"{name}.txt": f"{word}\n"},
        commands=[f"echo {word} > {name}.txt"],
    )


def _append_line(rng: np.random.Generator) -> Draft:
    name, word, *existing = _pick(rng, 5)
    return Draft(
        f"Append the line {word} to the end of {name}.txt.",
        files={f"{name}.txt": _lines(existing)},
        expect={f"{name}.txt": _lines([*existing, word])},
        commands=[f"echo {word} >> {name}.txt"],
    )


def _copy_file(rng: np.random.Generator) -> Draft:
    source, target, *content = _pick(rng, 4)
    return Draft(
        f"Copy {source}.txt to {target}.txt.",
        files={f"{source}.txt": _lines(content)},
        expect={f"{source}.txt": _lines(content), f"{target}.txt": _lines(content)},
        commands=[f"cp {source}.txt {target}.txt"],
    )


def _count_lines(rng: np.random.Generator) -> Draft:
    source, target = _pick(rng, 2)
    content = _pick(rng, int(rng.integers(2, 9)))
    return Draft(
        f"Count the lines of {source}.txt and write the number to {target}.txt.",
        files={f"{source}.txt": _lines(content)},
        expect={f"{source}.txt": _lines(content), f"{target}.txt": f"{len(content)}\n"},
        commands=[f"wc -l < {source}.txt > {target}.txt"],
    )


def _replace_word(rng: np.random.Generator) -> Draft:
    name, old, new, *other = _pick(rng, 6)
    before = [other[0], old, other[1], old, other[2]]
    return Draft(
        f"In {name}.txt, replace every {old} with {new}.",
        files={f"{name}.txt": _lines(before)},
        expect={f"{name}.txt": _lines([new if w == old else w for w in before])},
        commands=[f"sed -i 's/{old}/{new}/g' {name}.txt"],
    )


def _rename_file(rng: np.random.Generator) -> Draft:
    source, target, *content = _pick(rng, 4)
    return Draft(
        f"Rename {source}.txt to {target}.txt.",
        files={f"{source}.txt": _lines(content)},
        expect={f"{target}.txt": _lines(content)},
        absent=[f"{source}.txt"],
        commands=[f"mv {source}.txt {target}.txt"],
    )


def _delete_file(rng: np.random.Generator) -> Draft:
    doomed, kept, *content = _pick(rng, 4)
    return Draft(
        f"Delete {doomed}.txt and keep {kept}.txt.",
        files={f"{doomed}.txt": _lines(content[:1]), f"{kept}.txt": _lines(content[1:])},
        expect={f"{kept}.txt": _lines(content[1:])},
        absent=[f"{doomed}.txt"],
        commands=[f"rm {doomed}.txt"],
    )


def _move_into_folder(rng: np.random.Generator) -> Draft:
    name, folder, *content = _pick(rng, 4)
    return Draft(
        f"Create a folder named {folder} and move {name}.txt into it.",
        files={f"{name}.txt": _lines(content)},
        expect={f"{folder}/{name}.txt": _lines(content)},
        absent=[f"{name}.txt"],
        commands=[f"mkdir {folder}", f"mv {name}.txt {folder}/"],
    )


TEMPLATES: dict[str, Callable[[np.random.Generator], Draft]] = {
    "create_file": _create_file,
    "append_line": _append_line,
    "copy_file": _copy_file,
    "count_lines": _count_lines,
    "replace_word": _replace_word,
    "rename_file": _rename_file,
    "delete_file": _delete_file,
    "move_into_folder": _move_into_folder,
}
HELDOUT_TEMPLATES = ("delete_file", "move_into_folder")
TRAIN_TEMPLATES = tuple(name for name in TEMPLATES if name not in HELDOUT_TEMPLATES)
TEMPLATE_SETS = {"train": TRAIN_TEMPLATES, "heldout": HELDOUT_TEMPLATES, "all": tuple(TEMPLATES)}


def draw(seed: int, index: int, template: str) -> Draft:
    """Task ``index`` of ``seed``: the same arguments always give the same task."""
    return TEMPLATES[template](np.random.default_rng([GENERATOR_VERSION, seed, index]))


def generate_easy(seed: int, count: int = DEFAULT_COUNT, templates: str = "all") -> list[Task]:
    """``count`` tasks from ``seed``, templates taken in turn (so each appears equally often)."""
    if templates not in TEMPLATE_SETS:
        raise TaskError(f"generated-easy: templates must be one of {sorted(TEMPLATE_SETS)}, got {templates!r}")
    if count < 1:
        raise TaskError(f"generated-easy: count must be at least 1, got {count}")
    chosen = TEMPLATE_SETS[templates]
    drafts = {
        f"easy-{seed}-{i:04d}-{chosen[i % len(chosen)]}": draw(seed, i, chosen[i % len(chosen)]) for i in range(count)
    }
    key = {"version": GENERATOR_VERSION, "seed": seed, "count": count, "templates": templates}
    root = write_drafts("generated-easy", f"{seed}-{templates}-{count}", key, drafts)
    return [
        draft_task(
            root,
            task_id,
            draft,
            heldout=task_id.rsplit("-", 1)[-1] in HELDOUT_TEMPLATES,
            metadata={"family": "generated-easy", "template": task_id.split("-", 3)[-1], "seed": seed},
        )
        for task_id, draft in drafts.items()
    ]


def draft_task(root: Path, task_id: str, draft: Draft, *, heldout: bool, metadata: dict[str, Any]) -> Task:
    """The task of a draft that :func:`write_drafts` wrote under ``root``."""
    return Task(
        id=task_id,
        instruction=draft.instruction,
        mount_path=MOUNT,
        workspace_dir=root / task_id / "workspace",
        grader_files=(root / task_id / "grader",),
        solution=draft.solution(),
        split="eval" if heldout else "train",
        metadata=metadata,
    )


def write_drafts(family: str, name: str, key: Mapping[str, Any], drafts: Mapping[str, Draft]) -> Path:
    """The drafts' workspaces and data graders (``expect.json`` and the shared runner), built once
    in the cache under a digest of ``key`` and the runner; returns the folder (one per task id)."""
    runner = RUNNER.read_bytes()
    digest = hashlib.sha256(json.dumps(dict(key), sort_keys=True).encode() + runner).hexdigest()[:16]

    def build(staging: Path) -> None:
        for task_id, draft in drafts.items():
            for relative, content in draft.files.items():
                path = staging / task_id / "workspace" / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content, encoding="utf-8")
            (staging / task_id / "workspace").mkdir(parents=True, exist_ok=True)
            grader = staging / task_id / "grader"
            grader.mkdir()
            (grader / "expect.json").write_text(json.dumps({"files": draft.expect, "absent": draft.absent}))
            shutil.copy2(RUNNER, grader / "grade.py")

    return build_once(cache_dir() / family / f"{name}-{digest}", build)


def load_generated_easy(argument: str) -> Suite:
    """``generated-easy:SEED[#count=N,templates=train|heldout|all]``."""
    seed_text, _, option_text = argument.partition("#")
    options = dict(item.partition("=")[::2] for item in option_text.split(",") if item)
    unknown = set(options) - {"count", "templates"}
    if unknown:
        raise TaskError(f"generated-easy: unknown options {sorted(unknown)}; options are count=N, templates=NAME")
    try:
        seed, count = int(seed_text), int(options.get("count", DEFAULT_COUNT))
    except ValueError:
        raise TaskError(f"generated-easy: expected generated-easy:SEED[#count=N,...], got {argument!r}") from None
    return Suite(generate_easy(seed, count, options.get("templates", "all")))


register_loader("generated-easy", load_generated_easy)
