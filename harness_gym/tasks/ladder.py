"""A procedurally generated task ladder: from one call to several calls that depend on what a tool printed.

The easy tasks (:mod:`harness_gym.tasks.easy`) are one call built from words in the prompt, so a
small model saturates them and a harness's history management (C) and output format (O) never act.
The ladder climbs in rungs:

1. one call from words in the prompt (create, append; held out: delete);
2. look, then act on what was printed: find the file that holds a word and edit it, count matching
   lines and write the number (held out: find a file and delete it);
3. three or four calls, each using the previous output: follow a pointer file, copy and append;
   find a file, count its lines, write the count (held out: follow a pointer and rename);
4. six or more calls (seven turns or more with the finish, so that C2's history folding, after 5
   turns, acts before the end): rename every ``.txt`` of a folder after listing it, follow a chain
   of files to its end (held out: move every file holding a word into a new folder).

The answer of rungs 2-4 is not in the prompt: the file to edit, the number to write, the names to
rename come from a tool's output. Held out three ways: by seed, by words (``words=heldout`` draws
from :data:`HELDOUT_WORDS`, disjoint from the training words) and by template
(:data:`HELDOUT_TEMPLATES`, one per rung). Graders are data (``expect.json``: exact content of
every file that matters, decoys included, and paths that must be gone), run by the easy tasks'
runner, which executes nothing from the workspace.

    tasks="ladder:7#count=200,templates=train,words=train"   # training
    tasks="ladder:1007#templates=train,words=heldout"         # held out by seed and words
    tasks="ladder:1007#templates=heldout,words=heldout,rungs=3-4"
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness_gym.tasks.base import Suite, Task, TaskError, register_loader
from harness_gym.tasks.easy import WORDS, Draft, _lines, draft_task, write_drafts

LADDER_VERSION = 1  # part of every task's seed: bump it to redraw the ladder
SOURCE_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]  # cached suites are keyed by it
DEFAULT_COUNT = 48
TRAIN_WORDS = WORDS
HELDOUT_WORDS = (
    "almond", "walnut", "papaya", "quince", "fig", "guava", "lime", "date", "cashew", "pecan",
    "indigo", "maroon", "teal", "saffron", "cobalt", "magenta", "umber", "azure", "khaki", "ochre",
    "beaver", "condor", "gecko", "jaguar", "moose", "ferret", "walrus", "weasel", "yak", "zebra",
    "lagoon", "prairie", "tundra", "delta", "fjord", "mesa", "plateau", "reef", "steppe", "marsh",
)  # fmt: skip
WORD_SETS = {"train": TRAIN_WORDS, "heldout": HELDOUT_WORDS}


def _substring_free(words: Sequence[str]) -> bool:
    """No word inside another: a grep for one never matches a line of another."""
    return not any(a != b and a in b for a in words for b in words)


assert set(TRAIN_WORDS).isdisjoint(HELDOUT_WORDS) and _substring_free(TRAIN_WORDS + HELDOUT_WORDS)


class Words:
    """Distinct words of one set for one task, drawn without replacement."""

    def __init__(self, rng: np.random.Generator, pool: Sequence[str]) -> None:
        self.rng, self.left = rng, [str(w) for w in rng.permutation(pool)]

    def take(self, count: int) -> list[str]:
        if count > len(self.left):
            raise TaskError(f"ladder: a template asked for more than the {len(self.left)} words left")
        out, self.left = self.left[:count], self.left[count:]
        return out

    def integer(self, low: int, high: int) -> int:
        """An integer in [low, high]."""
        return int(self.rng.integers(low, high + 1))


def _write_word(w: Words) -> Draft:
    name, word = w.take(2)
    return Draft(
        f"Create a file named {name}.txt containing the word {word}.",
        expect={f"{name}.txt": f"{word}\n"},
        commands=[f"echo {word} > {name}.txt"],
    )


def _append_line(w: Words) -> Draft:
    name, word, *existing = w.take(5)
    return Draft(
        f"Append the line {word} to the end of {name}.txt.",
        files={f"{name}.txt": _lines(existing)},
        expect={f"{name}.txt": _lines([*existing, word])},
        commands=[f"echo {word} >> {name}.txt"],
    )


def _delete_file(w: Words) -> Draft:
    doomed, kept, *content = w.take(4)
    return Draft(
        f"Delete {doomed}.txt and keep {kept}.txt.",
        files={f"{doomed}.txt": _lines(content[:1]), f"{kept}.txt": _lines(content[1:])},
        expect={f"{kept}.txt": _lines(content[1:])},
        absent=[f"{doomed}.txt"],
        commands=[f"rm {doomed}.txt"],
    )


def _folder_of_files(w: Words, folder: str, count: int, marked: int, mark: str) -> tuple[dict[str, str], list[str]]:
    """``count`` files of three filler words in ``folder``; the first ``marked`` (in a random place
    of the sorted listing) also hold ``mark``. Returns the files and the marked paths."""
    names = sorted(w.take(count))
    chosen = {names[int(i)] for i in w.rng.choice(count, size=marked, replace=False)}
    files, hits = {}, []
    for name in names:
        content = w.take(2)
        if name in chosen:
            content.insert(w.integer(0, 2), mark)
            hits.append(f"{folder}/{name}.txt")
        files[f"{folder}/{name}.txt"] = _lines(content)
    return files, hits


def _find_and_replace(w: Words) -> Draft:
    folder, old, new = w.take(3)
    files, (hit,) = _folder_of_files(w, folder, w.integer(3, 4), 1, old)
    expect = dict(files)
    expect[hit] = files[hit].replace(f"{old}\n", f"{new}\n")
    return Draft(
        f"One of the files in the {folder} folder contains the word {old}. In that file, replace {old} with {new}; "
        "leave the other files as they are.",
        files=files,
        expect=expect,
        commands=[f"grep -l {old} {folder}/*", f"sed -i 's/{old}/{new}/g' {hit}"],
    )


def _count_then_write(w: Words) -> Draft:
    source, target, word = w.take(3)
    fillers = w.take(3)
    lines = [str(w.rng.choice(fillers)) for _ in range(w.integer(5, 9))]
    hits = w.integer(1, 4)
    for index in w.rng.choice(len(lines), size=hits, replace=False):
        lines[int(index)] = f"{lines[int(index)]} {word}"
    return Draft(
        f"Count how many lines of {source}.txt contain the word {word} and write that number to {target}.txt.",
        files={f"{source}.txt": _lines(lines)},
        expect={f"{source}.txt": _lines(lines), f"{target}.txt": f"{hits}\n"},
        commands=[f"grep -c {word} {source}.txt", f"echo {hits} > {target}.txt"],
    )


def _find_and_delete(w: Words) -> Draft:
    folder, word = w.take(2)
    files, (hit,) = _folder_of_files(w, folder, w.integer(3, 4), 1, word)
    return Draft(
        f"One of the files in the {folder} folder contains the word {word}. Delete that file and keep the others.",
        files=files,
        expect={p: c for p, c in files.items() if p != hit},
        absent=[hit],
        commands=[f"grep -l {word} {folder}/*", f"rm {hit}"],
    )


def _pointer_files(w: Words, folder: str) -> tuple[dict[str, str], str]:
    """pointer.txt naming one of three files in ``folder``; returns the files and the named path."""
    names = w.take(3)
    files = {f"{folder}/{n}.txt": _lines(w.take(2)) for n in names}
    target = f"{folder}/{names[w.integer(0, 2)]}.txt"
    files["pointer.txt"] = f"{target}\n"
    return files, target


def _pointer_copy_append(w: Words) -> Draft:
    folder, out, word = w.take(3)
    files, target = _pointer_files(w, folder)
    return Draft(
        f"pointer.txt names a file in the {folder} folder. Copy that file to {out}.txt, then append the line "
        f"{word} to {out}.txt.",
        files=files,
        expect={**files, f"{out}.txt": files[target] + f"{word}\n"},
        commands=["cat pointer.txt", f"cp {target} {out}.txt", f"echo {word} >> {out}.txt"],
    )


def _find_count_write(w: Words) -> Draft:
    folder, out, word = w.take(3)
    names = sorted(w.take(3))
    counts = [int(c) for c in w.rng.choice(range(2, 8), size=3, replace=False)]  # distinct: a guess is wrong
    hit_index = w.integer(0, 2)
    files = {}
    for index, (name, lines) in enumerate(zip(names, counts, strict=True)):
        content = w.take(lines - 1 if index == hit_index else lines)
        if index == hit_index:
            content.insert(w.integer(0, len(content)), word)
        files[f"{folder}/{name}.txt"] = _lines(content)
    hit, count = f"{folder}/{names[hit_index]}.txt", counts[hit_index]
    return Draft(
        f"One of the files in the {folder} folder contains the word {word}. Count the lines of that file and write "
        f"the number to {out}.txt.",
        files=files,
        expect={**files, f"{out}.txt": f"{count}\n"},
        commands=[f"grep -l {word} {folder}/*", f"wc -l < {hit}", f"echo {count} > {out}.txt"],
    )


def _pointer_rename(w: Words) -> Draft:
    folder, new = w.take(2)
    files, target = _pointer_files(w, folder)
    expect = {p: c for p, c in files.items() if p not in (target, "pointer.txt")}
    expect[f"{folder}/{new}.txt"] = files[target]
    return Draft(
        f"pointer.txt names a file in the {folder} folder. Rename that file to {new}.txt (in the same folder), "
        "then delete pointer.txt.",
        files=files,
        expect=expect,
        absent=[target, "pointer.txt"],
        commands=["cat pointer.txt", f"mv {target} {folder}/{new}.txt", "rm pointer.txt"],
    )


def _rename_extension(w: Words) -> Draft:
    folder, decoy = w.take(2)
    names = sorted(w.take(w.integer(5, 6)))
    files = {f"{folder}/{n}.txt": _lines(w.take(1)) for n in names}
    files[f"{folder}/{decoy}.log"] = _lines(w.take(1))
    expect = {f"{folder}/{n}.md": files[f"{folder}/{n}.txt"] for n in names}
    expect[f"{folder}/{decoy}.log"] = files[f"{folder}/{decoy}.log"]
    return Draft(
        f"Rename every .txt file in the {folder} folder so that it ends in .md instead; leave other files alone.",
        files=files,
        expect=expect,
        absent=[f"{folder}/{n}.txt" for n in names],
        commands=[f"ls {folder}", *(f"mv {folder}/{n}.txt {folder}/{n}.md" for n in names)],
    )


def _follow_chain(w: Words) -> Draft:
    folder, out = w.take(2)
    length = w.integer(4, 5)
    names = w.take(length + 2)
    chain, decoys = names[:length], names[length:]
    files = {"start.txt": f"{folder}/{chain[0]}.txt\n"}
    for current, following in zip(chain, [*chain[1:], None], strict=True):
        files[f"{folder}/{current}.txt"] = f"{folder}/{following}.txt\n" if following else "END\n"
    for decoy in decoys:  # ends of no chain that starts at start.txt
        files[f"{folder}/{decoy}.txt"] = "END\n"
    return Draft(
        f"start.txt names a file; each file names the next one, until a file that says END. Write the name of "
        f"that last file (like name.txt, without its folder) to {out}.txt.",
        files=files,
        expect={**files, f"{out}.txt": f"{chain[-1]}.txt\n"},
        commands=["cat start.txt", *(f"cat {folder}/{c}.txt" for c in chain), f"echo {chain[-1]}.txt > {out}.txt"],
    )


def _move_matching(w: Words) -> Draft:
    source, target, word = w.take(3)
    files, hits = _folder_of_files(w, source, 6, 4, word)
    expect = {p: c for p, c in files.items() if p not in hits}
    expect.update({f"{target}/{p.split('/', 1)[1]}": files[p] for p in hits})
    return Draft(
        f"Move every file in the {source} folder that contains the word {word} into a new folder named {target}; "
        "the other files stay where they are.",
        files=files,
        expect=expect,
        absent=hits,
        commands=[f"grep -l {word} {source}/*", f"mkdir {target}", *(f"mv {p} {target}/" for p in hits)],
    )


@dataclass(frozen=True)
class Template:
    """A template of the ladder: its rung (how many dependent calls) and whether it is held out."""

    rung: int
    draw: Callable[[Words], Draft]
    heldout: bool = False


TEMPLATES: dict[str, Template] = {
    "write_word": Template(1, _write_word),
    "append_line": Template(1, _append_line),
    "delete_file": Template(1, _delete_file, heldout=True),
    "find_and_replace": Template(2, _find_and_replace),
    "count_then_write": Template(2, _count_then_write),
    "find_and_delete": Template(2, _find_and_delete, heldout=True),
    "pointer_copy_append": Template(3, _pointer_copy_append),
    "find_count_write": Template(3, _find_count_write),
    "pointer_rename": Template(3, _pointer_rename, heldout=True),
    "rename_extension": Template(4, _rename_extension),
    "follow_chain": Template(4, _follow_chain),
    "move_matching": Template(4, _move_matching, heldout=True),
}
HELDOUT_TEMPLATES = tuple(name for name, t in TEMPLATES.items() if t.heldout)
TRAIN_TEMPLATES = tuple(name for name, t in TEMPLATES.items() if not t.heldout)
TEMPLATE_SETS = {"train": TRAIN_TEMPLATES, "heldout": HELDOUT_TEMPLATES, "all": tuple(TEMPLATES)}
RUNGS = (1, 2, 3, 4)


def draw(seed: int, index: int, template: str, words: str = "train") -> Draft:
    """Task ``index`` of ``seed``: the same arguments always give the same task."""
    rng = np.random.default_rng([LADDER_VERSION, seed, index, list(WORD_SETS).index(words)])
    return TEMPLATES[template].draw(Words(rng, WORD_SETS[words]))


def parse_rungs(text: str) -> tuple[int, ...]:
    """``2``, ``1-3`` or ``1+4`` (a comma separates options) -> the rungs, checked."""
    try:
        if "-" in text:
            low, high = (int(p) for p in text.split("-", 1))
            chosen = tuple(range(low, high + 1))
        else:
            chosen = tuple(int(p) for p in text.replace("+", ",").split(",") if p)
    except ValueError:
        raise TaskError(f"ladder: rungs must look like 2, 1-3 or 1+4, got {text!r}") from None
    if not chosen or not set(chosen) <= set(RUNGS):
        raise TaskError(f"ladder: rungs must be among {RUNGS}, got {text!r}")
    return chosen


def generate_ladder(
    seed: int, count: int = DEFAULT_COUNT, templates: str = "all", words: str = "train", rungs: str = "1-4"
) -> list[Task]:
    """``count`` tasks from ``seed``, the chosen templates taken in turn (each equally often)."""
    if templates not in TEMPLATE_SETS:
        raise TaskError(f"ladder: templates must be one of {sorted(TEMPLATE_SETS)}, got {templates!r}")
    if words not in WORD_SETS:
        raise TaskError(f"ladder: words must be one of {sorted(WORD_SETS)}, got {words!r}")
    if count < 1:
        raise TaskError(f"ladder: count must be at least 1, got {count}")
    chosen_rungs = parse_rungs(rungs)
    chosen = [name for name in TEMPLATE_SETS[templates] if TEMPLATES[name].rung in chosen_rungs]
    if not chosen:
        raise TaskError(f"ladder: no {templates} template on rungs {rungs}")
    names = [chosen[i % len(chosen)] for i in range(count)]
    drafts = {f"ladder-{seed}-{words}-{i:04d}-{n}": draw(seed, i, n, words) for i, n in enumerate(names)}
    key = {"source": SOURCE_DIGEST, "seed": seed, "count": count, "templates": chosen, "words": words}
    root = write_drafts("ladder", f"{seed}-{templates}-{words}-{rungs}-{count}", key, drafts)
    return [
        draft_task(
            root,
            task_id,
            draft,
            heldout=TEMPLATES[name].heldout,
            metadata={
                "family": "ladder",
                "template": name,
                "rung": TEMPLATES[name].rung,
                "seed": seed,
                "words": words,
                "heldout_template": TEMPLATES[name].heldout,
            },
        )
        for (task_id, draft), name in zip(drafts.items(), names, strict=True)
    ]


OPTIONS = ("count", "templates", "words", "rungs")


def load_ladder(argument: str) -> Suite:
    """``ladder:SEED[#count=N,templates=train|heldout|all,words=train|heldout,rungs=1-4]``."""
    seed_text, _, option_text = argument.partition("#")
    pairs = [item.partition("=") for item in option_text.split(",") if item]
    options = {key: value for key, _, value in pairs}
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TaskError(f"ladder: unknown options {unknown}; options are {', '.join(OPTIONS)}")
    try:
        seed, count = int(seed_text), int(options.get("count", DEFAULT_COUNT))
    except ValueError:
        raise TaskError(f"ladder: expected ladder:SEED[#count=N,...], got {argument!r}") from None
    return Suite(
        generate_ladder(
            seed, count, options.get("templates", "all"), options.get("words", "train"), options.get("rungs", "1-4")
        )
    )


register_loader("ladder", load_ladder)
