"""Installs of external CLIs as content-addressed, read-only trees, like worlds.

Each CLI's package (exact version, extras, its own Node or Python) is installed once into
``<external dir>/<slug>-<version>-<hash>/`` and then made read-only; the sandbox shows the tree
read-only at the same absolute path (shebangs, ``node_modules/.bin`` links and virtual
environments hold absolute paths, so a tree is never moved). ``install.json`` is written last:
a folder without it is a broken install and is redone.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from harness_gym.errors import SandboxError
from harness_gym.external.catalog import ExternalCli, load_cli, shipped_clis
from harness_gym.paths import cache_dir, make_writable, remove_path, size_mb

MANIFEST = "install.json"
SYSTEM_EXTERNAL_DIR = Path("/var/cache/harness-gym/external")
INSTALL_TIMEOUT_S = 1800.0
Progress = Callable[[str], None]


class ExternalInstallError(SandboxError):
    """A CLI is not installed, or its install failed; the message names the command that installs it."""


def external_dir() -> Path:
    """Where CLI installs live: ``HARNESS_GYM_EXTERNAL`` if set; as root the system cache
    ``/var/cache/harness-gym/external`` (sandbox uids cannot enter ``/root``); else ``<cache>/external``."""
    if "HARNESS_GYM_EXTERNAL" in os.environ:
        return Path(os.environ["HARNESS_GYM_EXTERNAL"])
    return SYSTEM_EXTERNAL_DIR if os.geteuid() == 0 else cache_dir() / "external"


def install_path(cli: ExternalCli) -> Path:
    return external_dir() / cli.install_key


def install_command(cli: ExternalCli) -> str:
    return f"harness-gym external install {cli.name}"


def installed(cli: ExternalCli) -> dict[str, Any] | None:
    """The install's manifest, or None when the CLI is not (completely) installed."""
    try:
        manifest = json.loads((install_path(cli) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("key") == cli.install_key else None


def require_install(cli: ExternalCli) -> Path:
    """The CLI's install tree; a missing one is an error that prints the install command."""
    if installed(cli) is None:
        raise ExternalInstallError(
            f"external CLI {cli.id} ({cli.package['name']} {cli.version}) is not installed in "
            f"{install_path(cli)}; install it with: {install_command(cli)}"
        )
    return install_path(cli)


def list_installs() -> list[dict[str, Any]]:
    """One row per shipped CLI: id, package, version, whether installed, size and path."""
    rows = []
    for cli in shipped_clis().values():
        manifest = installed(cli)
        rows.append(
            {
                "id": cli.id,
                "package": f"{cli.package['manager']}:{cli.package['name']}",
                "version": cli.version,
                "wire_api": cli.wire_api,
                "heavy": cli.heavy,
                "installed": manifest is not None,
                "size_mb": manifest.get("size_mb") if manifest else None,
                "path": str(install_path(cli)),
            }
        )
    return rows


def install(reference: str | ExternalCli, *, force: bool = False, progress: Progress = print) -> Path:
    """Install one CLI (once; ``force`` reinstalls) and return its read-only tree."""
    cli = load_cli(reference)
    folder = install_path(cli)
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.parent.chmod(0o755)  # sandbox uids must reach the trees
    with open(folder.parent / f".{cli.install_key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process installing the same tree: wait for it
        if installed(cli) is not None and not force:
            return folder
        _remove(folder)
        folder.mkdir()
        started = time.monotonic()
        try:
            if cli.package["manager"] == "npm":
                _install_npm(cli, folder, progress)
            else:
                _install_pip(cli, folder, progress)
            for name, source in (cli.package.get("files") or {}).items():
                shipped = resources.files("harness_gym").joinpath(f"external/runners/{source}")
                (folder / name).write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
            entry = folder / cli.data["entry"]
            if not os.access(entry, os.X_OK):
                raise ExternalInstallError(f"{cli.id}: the install has no executable {cli.data['entry']}")
        except BaseException:
            _remove(folder)
            raise
        manifest = {
            "key": cli.install_key,
            "package": dict(cli.package),
            "size_mb": size_mb(folder),
            "install_s": round(time.monotonic() - started, 1),
            "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        _make_read_only(folder)
        progress(f"installed {cli.id} {cli.version} into {folder} ({manifest['size_mb']} MB)")
        return folder


def _install_npm(cli: ExternalCli, folder: Path, progress: Progress) -> None:
    """``npm install`` into the tree; a CLI with its own Node gets that Node first, then is installed
    with it first on PATH (OpenClaw's install scripts refuse an older Node)."""
    npm = shutil.which("npm")
    if npm is None:
        raise ExternalInstallError(
            f"{cli.id}: npm is not on PATH (install Node.js and npm, then {install_command(cli)})"
        )
    common = [npm, "install", "--no-audit", "--no-fund", "--no-save", "--omit=dev"]
    env = dict(os.environ)
    if "node" in cli.package:  # its own prefix: the CLI's install must not re-link it midway
        node_prefix = folder / "node"
        _stream(
            [*common, "--prefix", str(node_prefix), f"node@{cli.package['node']}"], progress, what=f"Node for {cli.id}"
        )
        node_bin = node_prefix / "node_modules" / ".bin"
        env["PATH"] = f"{node_bin}:{env.get('PATH', '')}"
        # npm runs install scripts with the Node that runs npm: run npm itself with the new one
        common = [str(node_bin / "node"), os.path.realpath(npm), *common[1:]]
    packages = [f"{cli.package['name']}@{cli.version}", *cli.package.get("extra", [])]
    _stream([*common, "--prefix", str(folder), *packages], progress, what=f"npm install for {cli.id}", env=env)


def _install_pip(cli: ExternalCli, folder: Path, progress: Progress) -> None:
    python = _python(cli, folder, progress)
    _stream([python, "-m", "venv", str(folder / "venv")], progress, what=f"venv for {cli.id}")
    pip = str(folder / "venv" / "bin" / "pip")
    packages = [f"{cli.package['name']}=={cli.version}", *cli.package.get("extra", [])]
    _stream([pip, "install", "--no-input", *packages], progress, what=f"pip install for {cli.id}")


def _python(cli: ExternalCli, folder: Path, progress: Progress) -> str:
    """The tree's own interpreter, which the virtual environment is made from: a copy of the
    system's ``/usr/bin/pythonX.Y`` with its standard library when it has that version, else a copy
    of a pyenv or uv build of it. Always inside the tree: a world has no host interpreter, and a
    venv's interpreter must be visible in every sandbox the tree is shown to."""
    version = str(cli.package.get("python", f"{sys.version_info.major}.{sys.version_info.minor}"))
    target = folder / "python"
    system = Path(f"/usr/bin/python{version}")
    stdlib = Path(f"/usr/lib/python{version}")
    if system.is_file() and (stdlib / "os.py").is_file():
        progress(f"copying Python {version} from {system} and {stdlib} into the tree")
        (target / "bin").mkdir(parents=True)
        shutil.copy2(system, target / "bin" / f"python{version}")
        # links resolved (Debian links sitecustomize into /etc); dist-packages stay the host's own
        shutil.copytree(
            stdlib,
            target / "lib" / f"python{version}",
            ignore_dangling_symlinks=True,
            ignore=shutil.ignore_patterns("dist-packages", "site-packages"),
        )
        return str(target / "bin" / f"python{version}")
    candidates = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*")))
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.local/share/uv/python/cpython-{version}.*")))
    if not candidates:
        raise ExternalInstallError(
            f"{cli.id} needs Python {version}: not at {system}, nor in pyenv or uv's folders; install one "
            f"(e.g. `uv python install {version}`), then {install_command(cli)}"
        )
    progress(f"copying Python {version} from {candidates[-1]} into the tree")
    shutil.copytree(candidates[-1], target, symlinks=True)
    return str(target / "bin" / f"python{version}")


def _stream(argv: Sequence[str], progress: Progress, *, what: str, env: dict[str, str] | None = None) -> None:
    progress(f"$ {' '.join(argv)}")
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExternalInstallError(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout)[-2000:]
        raise ExternalInstallError(f"{what} failed (exit {done.returncode}):\n{tail}")


def _make_read_only(folder: Path) -> None:
    """Everyone may read and enter, no one but root may write (the sandbox uid is not root)."""
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                mode = os.lstat(path).st_mode
                os.chmod(path, (mode | 0o444 | (0o111 if mode & 0o111 or name in dirs else 0)) & ~0o222)
    os.chmod(folder, 0o555)


def _remove(folder: Path) -> None:
    """Delete a tree (read-only folders made writable first)."""
    if folder.exists():
        make_writable(folder)
        remove_path(folder)
