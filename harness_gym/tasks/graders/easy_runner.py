"""Grader of the generated easy tasks (harness_gym/tasks/easy.py), run in the grading sandbox with
the workspace as the working directory. ``expect.json`` beside this file lists files that must hold
exact content (regular files: a link to the right content is not a copy) and paths that must be
gone. Nothing from the workspace is executed or imported. Prints one JSON line:
{"reward": 1.0 only if every check passes, "breakdown": {check: 0 or 1}}.
"""

import json
import os
import stat
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LIMIT = 1 << 20  # an expected file is a few words: read no more than this


def content(path):
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size > LIMIT:
        return None
    with open(path, "rb") as handle:
        return handle.read(LIMIT).decode("utf-8", errors="replace")


def main():
    with open(os.path.join(HERE, "expect.json"), encoding="utf-8") as handle:
        expect = json.load(handle)
    checks = {}
    # A hard link is a link too: two expected files that are one file are not a copy. Same inode, or
    # (overlayfs reports a copied-up file under its lower inode) both linked more than once with the
    # same content; a real copy is a new file with one link.
    inodes, linked = {}, {}  # type: dict[tuple[int, int], list[str]], dict[tuple[int, object], list[str]]
    for path in expect["files"]:
        try:
            info = os.lstat(path)
        except OSError:
            continue
        inodes.setdefault((info.st_dev, info.st_ino), []).append(path)
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            linked.setdefault((info.st_size, content(path)), []).append(path)
    shared = {p for group in (*inodes.values(), *linked.values()) if len(group) > 1 for p in group}
    for path, wanted in sorted(expect["files"].items()):
        found = None if path in shared else content(path)
        # tolerant of the trailing newline only: `printf word` and `echo word` both count
        checks[f"content:{path}"] = found is not None and found.rstrip("\n") == wanted.rstrip("\n")
    for path in expect["absent"]:
        checks[f"absent:{path}"] = not os.path.lexists(path)
    reward = 1.0 if checks and all(checks.values()) else 0.0
    print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
