"""Test-runner configuration is the task's, not the agent's: put it back before hidden tests run.

Files that change what a test run does without being tests: ``conftest.py`` anywhere,
``pytest.ini``, ``tox.ini``, the pytest sections of ``setup.cfg`` (``[tool:pytest]``, ``[pytest]``)
and ``pyproject.toml`` (``[tool.pytest...]``), ``sitecustomize.py``, ``usercustomize.py``, ``*.pth``;
plus bytecode (``__pycache__``, ``*.pyc``: an unchecked-hash .pyc shadows the source it names,
even a restored one) and ``.pytest_cache``. :func:`revert` restores the task's original of each
such file the agent changed, removes the ones it added, and removes all bytecode; it returns what
it did, for the grader's breakdown.

Standard library only and no harness_gym import: the host uses it to list a task's originals, and
the SWE-bench / R2E grader copies it into the sandbox and runs it there (any Python 3.6+).
"""

import filecmp
import os
import re
import shutil

CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", "tox.ini", "sitecustomize.py", "usercustomize.py"})
# files where only some sections configure the runner: name -> header of such a section
SECTIONED = {
    "setup.cfg": re.compile(r"^\s*\[\s*(tool:pytest|pytest)\s*\]"),
    "pyproject.toml": re.compile(r"^\s*\[\s*tool\.pytest"),
}
BYTECODE_DIRS = frozenset({"__pycache__", ".pytest_cache"})
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})


def is_runner_config(name):
    return name in CONFIG_NAMES or name in SECTIONED or name.endswith(".pth")


def config_files(root):
    """Relative paths of the runner configuration files under ``root`` (symbolic links not followed)."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and d not in BYTECODE_DIRS]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            if is_runner_config(name):
                found.append(os.path.relpath(os.path.join(folder, name), root))
    return sorted(found)


def runner_sections(path, pattern):
    """The text of the sections of an INI/TOML file whose header matches ``pattern``."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return ""
    kept, inside = [], False
    for line in lines:
        if re.match(r"^\s*\[", line):
            inside = bool(pattern.match(line))
        if inside:
            kept.append(line.rstrip())
    return "\n".join(kept)


def _same(current, original, name):
    if os.path.islink(current) or not os.path.isfile(current):
        return False
    if name in SECTIONED:
        return runner_sections(current, SECTIONED[name]) == runner_sections(original, SECTIONED[name])
    return filecmp.cmp(current, original, shallow=False)


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.chmod(os.path.dirname(path) or ".", 0o755)
        os.remove(path)


def remove_bytecode(root):
    """Delete every __pycache__, .pytest_cache and *.pyc under ``root``; returns how many went."""
    removed = 0
    for folder, dirs, files in os.walk(root):
        for name in [d for d in dirs if d in BYTECODE_DIRS]:
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
            removed += 1
        dirs[:] = [d for d in dirs if d not in BYTECODE_DIRS and d not in SKIPPED_DIRS]
        for name in files:
            if name.endswith((".pyc", ".pyo")):
                _remove(os.path.join(folder, name))
                removed += 1
    return removed


def revert(original, workspace):
    """Make ``workspace``'s runner configuration that of ``original`` (a folder holding the task's
    original configuration files at their relative paths); returns a list of what was reverted."""
    shipped = set(config_files(original)) if original and os.path.isdir(original) else set()
    current = set(config_files(workspace))
    reverted = []
    for relative in sorted(shipped | current):
        here, there = os.path.join(workspace, relative), os.path.join(original or "", relative)
        name = os.path.basename(relative)
        if relative in shipped:
            if relative in current and _same(here, there, name):
                continue
            _remove(here)
            os.makedirs(os.path.dirname(here) or ".", exist_ok=True)
            shutil.copyfile(there, here)
            reverted.append(relative + " (restored)")
        elif name not in SECTIONED or runner_sections(here, SECTIONED[name]):
            _remove(here)
            reverted.append(relative + " (removed)")
    removed = remove_bytecode(workspace)
    if removed:
        reverted.append(f"{removed} bytecode file(s)/cache folder(s) (removed)")
    return reverted


def copy_originals(root, destination):
    """Copy ``root``'s runner configuration files to ``destination`` (the host side of :func:`revert`)."""
    os.makedirs(destination, exist_ok=True)
    for relative in config_files(root):
        source = os.path.join(root, relative)
        if os.path.isfile(source) and not os.path.islink(source):
            target = os.path.join(destination, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)
    return destination
