"""Whether a CLI's install tree can run on a world: its entry's interpreter and the shared libraries
its native files need, checked against the world's root filesystem before any sandbox starts.

An install tree carries its own runtime (Node from ``package.node``, a copied Python with its
standard library), but those binaries still link the world's C library, ``libstdc++`` and the like.
A world without one, or with an older glibc than a binary was linked against, would make the CLI
die inside the sandbox with a loader message the episode would record as the CLI's failure; here
it is a clear error naming the file, the library and the world. Read from the ELF files themselves
(``DT_NEEDED``, ``DT_RUNPATH``, ``PT_INTERP`` and the GNU version needs and definitions), not with
``ldd``: ldd runs the host's loader, and the question is about another root filesystem.
"""

from __future__ import annotations

import functools
import glob
import mmap
import os
import re
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness_gym.errors import SandboxError

# where the loader looks when a file names no RUNPATH (multiarch folders are globbed)
LIBRARY_DIRS = ("/lib/*-linux-gnu", "/usr/lib/*-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
SANDBOX_PATH = ("/usr/local/bin", "/usr/bin", "/bin")  # the runner's PATH after the tree's own folders
# a copied Python's extension modules a CLI may import (the rest, curses or tkinter, stay unchecked)
PYTHON_MODULES = frozenset(
    [
        "_ssl",
        "_hashlib",
        "_ctypes",
        "_sqlite3",
        "_lzma",
        "_bz2",
        "_uuid",
        "_decimal",
        "pyexpat",
        "zlib",
        "_json",
        "_asyncio",
        "_socket",
        "select",
        "math",
        "_struct",
        "binascii",
        "_multiprocessing",
        "_posixsubprocess",
        "_random",
        "_sha2",
        "_blake2",
        "unicodedata",
    ]
)
_SHT_DYNAMIC, _SHT_VERDEF, _SHT_VERNEED = 6, 0x6FFFFFFD, 0x6FFFFFFE
_DT_NEEDED, _DT_RPATH, _DT_RUNPATH, _PT_INTERP = 1, 15, 29, 3
_LINK_HOPS = 40
MAX_PROBLEMS = 12  # lines of one error (a world without glibc fails every file)


class WorldRuntimeError(SandboxError, ValueError):
    """A CLI's install tree cannot run on the chosen world; the message names the file, the
    library (or interpreter) and the world, and what to do."""


@dataclass(frozen=True)
class Elf:
    """What one ELF file asks of the loader."""

    interpreter: str | None = None
    needed: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    needs_versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # library -> GLIBC_2.34, ...
    defines_versions: tuple[str, ...] = ()


def read_elf(path: str | Path) -> Elf | None:
    """The loader's view of a 64-bit little-endian ELF file; None for anything else (a script, a
    32-bit or big-endian file, which this check does not judge)."""
    try:
        with open(path, "rb") as handle:
            if handle.read(6) != b"\x7fELF\x02\x01":
                return None
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _parse(data)
    except (OSError, ValueError, struct.error):
        return None


def _parse(data: mmap.mmap) -> Elf:
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    interpreter = None
    for i in range(phnum):
        kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if kind == _PT_INTERP:
            interpreter = bytes(data[offset : offset + size]).split(b"\0")[0].decode()
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def text(table: int, offset: int) -> str:
        start = sections[table][4] + offset
        return bytes(data[start : data.find(b"\0", start)]).decode(errors="replace")

    needed: list[str] = []
    runpath: list[str] = []
    needs: dict[str, tuple[str, ...]] = {}
    defines: list[str] = []
    for _, kind, _, _, offset, size, link, info, _, _ in sections:
        if kind == _SHT_DYNAMIC:
            for at in range(offset, offset + size, 16):
                tag, value = struct.unpack_from("<qQ", data, at)
                if tag == _DT_NEEDED:
                    needed.append(text(link, value))
                elif tag in (_DT_RPATH, _DT_RUNPATH):
                    runpath.extend(p for p in text(link, value).split(":") if p)
        elif kind == _SHT_VERNEED:
            at = offset
            for _ in range(info):
                _, count, file, aux, following = struct.unpack_from("<HHIII", data, at)
                names, here = [], at + aux
                for _ in range(count):
                    _, _, _, name, step = struct.unpack_from("<IHHII", data, here)
                    names.append(text(link, name))
                    here += step
                needs[text(link, file)] = tuple(names)
                at += following
        elif kind == _SHT_VERDEF:
            at = offset
            for _ in range(info):
                _, flags, _, count, _, aux, following = struct.unpack_from("<HHHHIII", data, at)
                if count and not flags & 1:  # VER_FLG_BASE names the file itself, not a version
                    defines.append(text(link, struct.unpack_from("<I", data, at + aux)[0]))
                at += following
    return Elf(interpreter, tuple(needed), tuple(runpath), needs, tuple(defines))


@functools.lru_cache(maxsize=4096)
def _read_cached(path: str, mtime_ns: int) -> Elf | None:
    return read_elf(path)


def _elf(path: Path) -> Elf | None:
    try:
        return _read_cached(str(path), path.stat().st_mtime_ns)
    except OSError:
        return None


def in_root(root: Path, path: str, mounts: Sequence[Path] = ()) -> tuple[str, Path] | None:
    """``path`` as the sandbox sees it, found in the root filesystem ``root`` (symbolic links,
    absolute ones included, resolved inside it; a folder of ``mounts`` is shown at its own host
    path, as the install tree is): the resolved sandbox path and the host path, or None when it
    does not exist there."""
    parts = [p for p in path.split("/") if p]
    current = Path("/")
    hops = 0
    while parts:
        part = parts.pop(0)
        if part in (".", ".."):
            current = current.parent if part == ".." else current
            continue
        candidate = current / part
        if any(candidate in m.parents for m in mounts):  # a folder on the way to a mount: made for it
            current = candidate
            continue
        host = _host(root, candidate, mounts)
        if host.is_symlink():
            hops += 1
            if hops > _LINK_HOPS:
                return None
            target = os.readlink(host)
            parts = [p for p in target.split("/") if p] + parts
            current = Path("/") if target.startswith("/") else current
            continue
        if not host.exists():
            return None
        current = candidate
    return str(current), _host(root, current, mounts)


def _host(root: Path, inside: Path, mounts: Sequence[Path]) -> Path:
    if any(inside == m or m in inside.parents for m in mounts):
        return inside
    return root / inside.relative_to("/")


@dataclass
class _Check:
    """One tree against one world: files seen, the first problem per (file, library)."""

    root: Path
    install: Path
    world: str
    library_path: Sequence[str]
    problems: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def locate(self, path: str) -> tuple[str, Path] | None:
        """A sandbox path, resolved: the tree is shown at its own path, the rest is the world's."""
        return in_root(self.root, path, (self.install,))

    def library_dirs(self, origin: str, elf: Elf) -> Iterator[str]:
        for entry in elf.runpath:
            yield entry.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
        yield from self.library_path
        for pattern in LIBRARY_DIRS:
            if "*" in pattern:
                found = glob.glob(str(self.root / pattern.lstrip("/")))
                yield from sorted("/" + os.path.relpath(f, self.root) for f in found)
            else:
                yield pattern

    def file(self, sandbox_path: str, what: str) -> None:
        """Check one ELF file (and, recursively, the libraries it finds inside the tree)."""
        located = self.locate(sandbox_path)
        if located is None or located[0] in self.seen:
            return
        resolved, host = located
        self.seen.add(resolved)
        elf = _elf(host)
        if elf is None:
            return
        if elf.interpreter and self.locate(elf.interpreter) is None:
            self.problems.append(f"{what} needs the loader {elf.interpreter}, which world {self.world!r} does not have")
            return
        origin = os.path.dirname(resolved)
        for library in elf.needed:
            found = next(
                (p for d in self.library_dirs(origin, elf) if (p := self.locate(f"{d}/{library}")) is not None), None
            )
            if found is None:
                self.problems.append(
                    f"{what} needs {library}, which world {self.world!r} does not have "
                    "(add the package that provides it to the world's packages)"
                )
                continue
            inside, host_path = found
            missing = [v for v in elf.needs_versions.get(library, ()) if v not in set(_defined(host_path))]
            if missing:
                newest = _newest(_defined(host_path), missing[0])
                family = "glibc" if missing[0].startswith("GLIBC_") else "library"
                self.problems.append(
                    f"{what} needs {', '.join(_sorted_versions(missing))} of {library}; world {self.world!r} has "
                    f"{library} only up to {newest or 'none of that family'} (an older {family})"
                )
            if inside.startswith(f"{self.install}/"):
                self.file(inside, f"{what} (through {library})")


def _defined(path: Path) -> tuple[str, ...]:
    elf = _elf(path)
    return elf.defines_versions if elf is not None else ()


def _version_key(name: str) -> tuple[str, tuple[int, ...]]:
    family, _, number = name.partition("_")
    return family, tuple(int(n) for n in re.findall(r"\d+", number))


def _sorted_versions(names: Iterable[str]) -> list[str]:
    return sorted(names, key=_version_key)


def _newest(defined: Iterable[str], like: str) -> str | None:
    family = _version_key(like)[0]
    same = [d for d in defined if _version_key(d)[0] == family]
    return _sorted_versions(same)[-1] if same else None


def _shebang(path: Path) -> list[str] | None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    return head[2:].split(b"\n")[0].decode(errors="replace").split()


def check_tree(
    cli_id: str,
    entry: Path,
    install: Path,
    root: Path | None,
    world: str,
    bin_dirs: Sequence[str] = (),
    library_path: Sequence[str] = (),
) -> None:
    """Raise :class:`WorldRuntimeError` unless the CLI's entry runs on the world with root
    filesystem ``root`` (None: the host's folders): its script interpreter is in the tree or the
    world, and every ELF file on the way (the entry, the tree's Node or Python, the copied
    Python's libpython and extension modules) finds its loader, libraries and symbol versions."""
    check = _Check(root or Path("/"), install, world, library_path)
    target = str(entry)
    for _ in range(4):  # a script's interpreter may itself be a script
        located = check.locate(target)
        if located is None:
            raise WorldRuntimeError(f"{cli_id}: {target} does not exist (the install tree is incomplete; reinstall it)")
        words = _shebang(located[1])
        if words is None:
            check.file(target, f"{cli_id}'s {os.path.basename(target)}")
            break
        target = _interpreter(check, words, bin_dirs, cli_id, world)
        if check.locate(target) is None:
            raise WorldRuntimeError(
                f"{cli_id} runs on {target} (its entry's #! line), which world {world!r} does not have; "
                "reinstall the CLI so that its tree carries its own interpreter "
                "(harness-gym external install --force NAME), or run on a world that has it"
            )
        if not check.locate(target)[0].startswith(f"{install}/"):  # type: ignore[index]
            break  # the world's own interpreter: the world's business
    _python_modules(check, install, cli_id)
    problems = list(dict.fromkeys(check.problems))
    if problems:
        shown = problems[:MAX_PROBLEMS] + (
            [f"... and {len(problems) - MAX_PROBLEMS} more"] * (len(problems) > MAX_PROBLEMS)
        )
        raise WorldRuntimeError(f"{cli_id} cannot run on world {world!r}:\n  " + "\n  ".join(shown))


def _interpreter(check: _Check, words: Sequence[str], bin_dirs: Sequence[str], cli_id: str, world: str) -> str:
    """The program a ``#!`` line runs, ``env NAME`` looked up on the sandbox's PATH."""
    program = words[0]
    if os.path.basename(program) != "env" or len(words) < 2:
        return program
    command = next((w for w in words[1:] if not w.startswith("-") and "=" not in w), program)
    for folder in [*bin_dirs, *SANDBOX_PATH]:
        if check.locate(f"{folder}/{command}") is not None:
            return f"{folder}/{command}"
    raise WorldRuntimeError(
        f"{cli_id} runs on `{command}` (its entry's #! line), which neither its install tree nor world {world!r} "
        "has; pin the runtime in the CLI file (package.node for Node), reinstall it, or run on a world that has it"
    )


def _python_modules(check: _Check, install: Path, name: str) -> None:
    """A copied Python's extension modules (``_ssl`` needs libssl, ``_ctypes`` libffi, ...)."""
    for module in sorted(glob.glob(str(install / "python/lib/python*/lib-dynload/*.so"))):
        if os.path.basename(module).split(".")[0] in PYTHON_MODULES:
            check.file(module, f"{name}'s Python module {os.path.basename(module).split('.')[0]}")
