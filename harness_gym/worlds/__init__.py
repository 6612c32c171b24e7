"""Worlds: the root filesystems that sandboxes run on instead of the host's system folders.

A task suite assumes a machine with tools on it: ClawGym graders call ``python`` and
``python -m pytest``, prompts ask for ``jq`` or ``git``. Whether the host has them is an accident,
and an accident that decides a reward measures the host instead of the agent. A world makes the
machine part of the task: a YAML definition (base, Debian packages, pip requirements, setup
commands, validated by ``schemas/world.schema.json`` and identified by its content hash) built
once into the cache and shown read-only to every sandbox. The ``host`` world is the host's own
folders, as before worlds existed.

    harness-gym worlds build python        # once; offline afterwards
    gym.make("Harness-S0T0O0C0W0", world="python")

Bases: ``debian`` (built with mmdebstrap from the Debian mirror), ``docker_image`` (``docker
export`` of an existing image) and ``oci`` (an unpacked OCI image layout). The same world can be
imported as a Docker image (:func:`docker_image`), so both backends run the same files.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness_gym.errors import SandboxError
from harness_gym.paths import cache_dir, make_writable, remove_path, size_mb

HOST = "host"
MANIFEST = "world.json"
Progress = Callable[[str], None]


class WorldError(SandboxError, ValueError):
    """A world is unknown, invalid, not built, or failed to build; the message says what to do."""


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    text = resources.files("harness_gym").joinpath("schemas/world.schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@dataclass(frozen=True)
class World:
    """A validated world definition. ``folder`` holds ``rootfs/`` and the build manifest."""

    name: str
    definition: Mapping[str, Any]

    @property
    def digest(self) -> str:
        """SHA-256 of the definition's canonical JSON, first 16 hex digits: a changed definition
        is a different world, built beside the old one."""
        canonical = json.dumps(self.definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    @property
    def is_host(self) -> bool:
        return "host" in self.definition["base"]

    @property
    def folder(self) -> Path:
        """Where the world is built: in :func:`worlds_dir`, or, for a user who did not build it, in
        the system cache a root build filled (worlds are read-only and shared)."""
        name = f"{self.name}-{self.digest}"
        own = worlds_dir() / name
        shared = SYSTEM_WORLDS_DIR / name
        if (
            not (own / MANIFEST).is_file()
            and not os.environ.get("HARNESS_GYM_WORLDS")
            and (shared / MANIFEST).is_file()
        ):
            return shared
        return own

    @property
    def rootfs(self) -> Path:
        return self.folder / "rootfs"

    @property
    def built(self) -> bool:
        return self.is_host or (self.folder / MANIFEST).is_file()

    def root(self) -> Path | None:
        """The root filesystem to run on (None: the host's folders), or a WorldError that names
        the command that builds it."""
        if self.is_host:
            return None
        if not self.built:
            raise WorldError(
                f"world {self.name!r} is not built yet; build it once with `harness-gym worlds build {self.name}` "
                f"(it goes to {self.folder})"
            )
        return self.rootfs

    def manifest(self) -> dict[str, Any]:
        """What the build recorded (definition, time, size, installed Debian packages)."""
        if self.is_host:
            return {"name": self.name, "digest": self.digest, "definition": dict(self.definition)}
        try:
            return json.loads((self.folder / MANIFEST).read_text(encoding="utf-8"))
        except OSError:
            raise WorldError(f"world {self.name!r} is not built") from None


SYSTEM_WORLDS_DIR = Path("/var/cache/harness-gym/worlds")

#: interpreters a grader may call that a world may lack, looked for at a command's position in the
#: grade command and the grader's scripts (and in their ``#!`` lines)
INTERPRETERS = ("python3", "python", "ruby", "php", "node", "nodejs", "perl", "Rscript", "lua", "java", "bash")
_COMMAND = re.compile(
    r"(?:^|[;&|(`]|\$\(|\b(?:then|do|else|exec|env|timeout\s+\S+))[ \t]*(" + "|".join(INTERPRETERS) + r")(?=[\s;)`]|$)",
    re.MULTILINE,
)
_SHEBANG = re.compile(r"\A#!\s*(?:/usr/bin/env\s+)?(?:\S*/)?(\S+)")
_BIN_DIRS = ("usr/bin", "bin", "usr/local/bin")
_SCRIPT_LIMIT = 256 * 1024  # a grader script is small; bigger files are data


def grader_scripts(command: str, paths: Iterable[Path]) -> list[str]:
    """The grade command and the text of the grader's scripts (``*.sh`` files and files with a
    ``#!`` line) under ``paths``: what to scan for interpreters."""
    texts = [command]
    for path in paths:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
        for file in files:
            if file.stat().st_size > _SCRIPT_LIMIT:
                continue
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if file.suffix == ".sh" or text.startswith("#!"):
                texts.append(text)
    return texts


def interpreters_called(texts: Iterable[str]) -> set[str]:
    """The :data:`INTERPRETERS` these commands and scripts run."""
    called: set[str] = set()
    for text in texts:
        called.update(_COMMAND.findall(text))
        shebang = _SHEBANG.match(text)
        if shebang and shebang.group(1) in INTERPRETERS:
            called.add(shebang.group(1))
    return called


def missing_interpreters(world: World, texts: Iterable[str]) -> list[str]:
    """The interpreters ``texts`` call that the (built) world does not have; none for the host's world."""
    root = world.root()
    if root is None:
        return []
    return sorted(
        name
        for name in interpreters_called(texts)
        if not any(os.path.lexists(root / folder / name) for folder in _BIN_DIRS)
    )


def task_world(task: Any, backend: Any, requested: str | Path | World | None) -> World:
    """The world a task runs on: the one ``requested`` (an environment's or a run's ``world``), else
    the task's (its suite's default), else the host's folders. A world that is not built is an
    error now, naming the command that builds it, as is one whose grader calls an interpreter the
    world lacks; a task's own container image is its world under Docker. ``backend`` is a backend
    name or a custom sandbox factory (which cannot provide a world)."""
    world = load_world(requested or task.world or HOST)
    if world.is_host or (backend == "docker" and task.image is not None):
        return world
    if backend not in ("bubblewrap", "docker"):
        name = backend if isinstance(backend, str) else "a custom sandbox factory"
        raise SandboxError(
            f"task {task.id} runs on world {world.name!r}, which the {name} backend cannot provide; "
            "use sandbox='bubblewrap' or 'docker', or world='host'"
        )
    world.root()  # raises WorldError with the build command when it is missing
    missing = missing_interpreters(world, grader_scripts(task.grade_command, task.grader_files))
    if missing:  # a correct solution would be graded as a failure: refuse the task by name
        raise WorldError(
            f"task {task.id}: its grader calls {', '.join(missing)}, which world {world.name!r} does not have; "
            f"add the Debian package to the world's packages (a world YAML file, world=...) and build it "
            f"(harness-gym worlds build FILE), or leave the task out"
        )
    return world


def worlds_dir() -> Path:
    """Where built worlds live: ``HARNESS_GYM_WORLDS`` if set; as root the system cache
    ``/var/cache/harness-gym/worlds`` (sandboxes run as unprivileged uids that cannot enter
    ``/root``, and one machine-wide copy serves every user); otherwise ``<cache>/worlds``."""
    if os.environ.get("HARNESS_GYM_WORLDS"):
        return Path(os.environ["HARNESS_GYM_WORLDS"])
    return SYSTEM_WORLDS_DIR if os.geteuid() == 0 else cache_dir() / "worlds"


def shipped_worlds() -> list[str]:
    """Names of the world definitions that come with harness-gym."""
    folder = resources.files("harness_gym").joinpath("worlds")
    return sorted(Path(str(p)).stem for p in folder.iterdir() if str(p).endswith(".yaml"))


def load_world(reference: str | Path | World) -> World:
    """A world by shipped name (``python``) or by the path of a YAML definition."""
    if isinstance(reference, World):
        return reference
    text = str(reference)
    if text in shipped_worlds():
        path = Path(str(resources.files("harness_gym").joinpath(f"worlds/{text}.yaml")))
    elif text.endswith((".yaml", ".yml")) and Path(text).is_file():
        path = Path(text)
    else:
        raise WorldError(f"unknown world {text!r}; shipped worlds: {shipped_worlds()}, or give a world YAML file")
    try:
        definition = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise WorldError(f"world file {path}: not valid YAML: {exc}") from exc
    errors = sorted(_validator().iter_errors(definition), key=lambda e: list(e.absolute_path))
    if errors:
        lines = "\n".join(f"  at {e.json_path}: {e.message}" for e in errors[:10])
        raise WorldError(f"invalid world definition {path}:\n{lines}")
    return World(definition["name"], definition)


def list_worlds() -> list[dict[str, Any]]:
    """Shipped definitions and built folders: name, digest, built or not, size, path."""
    rows = []
    for name in shipped_worlds():
        world = load_world(name)
        rows.append(
            {
                "name": name,
                "digest": world.digest,
                "built": world.built,
                "size_mb": size_mb(world.rootfs) if world.built and not world.is_host else None,
                "path": None if world.is_host else str(world.folder),
                "description": world.definition.get("description", ""),
            }
        )
    current = {row["path"] for row in rows}
    for manifest in sorted(worlds_dir().glob(f"*/{MANIFEST}")) if worlds_dir().is_dir() else []:
        if str(manifest.parent) not in current:  # a world from a file, or an older definition
            data = json.loads(manifest.read_text(encoding="utf-8"))
            rows.append(
                {
                    "name": data["name"],
                    "digest": data["digest"],
                    "built": True,
                    "size_mb": size_mb(manifest.parent / "rootfs"),
                    "path": str(manifest.parent),
                    "description": data.get("definition", {}).get("description", "") + " (not the shipped definition)",
                }
            )
    return rows


def remove_world(reference: str | World) -> list[Path]:
    """Delete every built folder of a world (all digests of that name). Returns what was removed."""
    name = reference.name if isinstance(reference, World) else str(reference)
    removed = []
    for manifest in worlds_dir().glob(f"{name}-*/{MANIFEST}") if worlds_dir().is_dir() else []:
        folder = manifest.parent
        if json.loads(manifest.read_text(encoding="utf-8")).get("name") == name:
            make_writable(folder)
            shutil.rmtree(folder)
            removed.append(folder)
    return removed


# ---------------------------------------------------------------------------- building


def build_world(reference: str | Path | World, *, force: bool = False, progress: Progress = print) -> World:
    """Build a world into the cache (once; ``force`` rebuilds). The root filesystem is made in a
    staging folder and moved into place whole, so a crash never leaves a half-built world."""
    world = load_world(reference)
    if world.is_host:
        progress(f"world {world.name!r} uses the host's folders; nothing to build")
        return world
    if world.built and not force:
        progress(f"world {world.name!r} is already built at {world.folder}")
        return world
    if os.geteuid() != 0:
        raise WorldError(
            "building a world needs root (the root filesystem's files belong to root); "
            "build it once as root, or set HARNESS_GYM_CACHE to a cache a root build filled"
        )
    worlds_dir().mkdir(parents=True, exist_ok=True)
    worlds_dir().chmod(0o755)  # sandbox uids must reach the root filesystems
    staging = Path(tempfile.mkdtemp(prefix=f".{world.name}-building-", dir=worlds_dir()))
    started = time.monotonic()
    try:
        rootfs = staging / "rootfs"
        base = world.definition["base"]
        if "debian" in base:
            _build_debian(world, rootfs, progress)
        elif "docker_image" in base:
            _export_docker_image(base["docker_image"], rootfs, progress)
        else:
            _unpack_oci(Path(base["oci"]), rootfs, progress)
        _finish(world, rootfs, progress)
        manifest = {
            "name": world.name,
            "digest": world.digest,
            "definition": dict(world.definition),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.monotonic() - started, 1),
            "debian_packages": _installed_packages(rootfs),
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        if world.folder.exists():
            make_writable(world.folder)
            shutil.rmtree(world.folder)
        staging.chmod(0o755)  # mkdtemp made it private
        staging.rename(world.folder)
    except BaseException:
        make_writable(staging)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    progress(f"world {world.name!r} built in {time.monotonic() - started:.0f} s at {world.folder}")
    return world


def _build_debian(world: World, rootfs: Path, progress: Progress) -> None:
    base = world.definition["base"]
    tool = shutil.which("mmdebstrap")
    if tool is None:
        raise WorldError("building a Debian world needs mmdebstrap (Debian/Ubuntu: apt-get install -y mmdebstrap)")
    argv = [tool, f"--variant={base.get('variant', 'minbase')}", "--mode=root", "--format=directory"]
    # no fsync per file, and no documentation a sandbox never reads: a faster build, a smaller world
    argv += ["--dpkgopt=force-unsafe-io"] + [f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "info")]
    packages = world.definition.get("packages") or []
    if packages:
        argv.append("--include=" + ",".join(packages))
    if base.get("components"):
        argv.append("--components=" + ",".join(base["components"]))
    argv += [base["debian"], str(rootfs)]
    if base.get("mirror"):
        argv.append(base["mirror"])
    env = dict(os.environ, SOURCE_DATE_EPOCH=os.environ.get("SOURCE_DATE_EPOCH", "1704067200"))
    _stream(argv, progress, env=env, what=f"mmdebstrap ({world.name})")


def _export_docker_image(image: str, rootfs: Path, progress: Progress) -> None:
    """The file system of an existing image: ``docker create`` + ``docker export``."""
    if shutil.which("docker") is None:
        raise WorldError("a world from a Docker image needs the docker client and a running engine")
    created = subprocess.run(["docker", "create", image, "true"], capture_output=True, text=True)
    if created.returncode != 0:
        raise WorldError(f"cannot create a container from image {image!r}: {created.stderr.strip()}")
    container = created.stdout.strip()
    progress(f"exporting the file system of {image}")
    rootfs.mkdir(parents=True)
    try:
        with subprocess.Popen(["docker", "export", container], stdout=subprocess.PIPE) as export:
            assert export.stdout is not None
            with tarfile.open(fileobj=export.stdout, mode="r|") as archive:
                archive.extractall(rootfs, filter="tar")
        if export.returncode != 0:
            raise WorldError(f"docker export of {image!r} failed (exit status {export.returncode})")
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True)


def _unpack_oci(layout: Path, rootfs: Path, progress: Progress) -> None:
    """Apply the layers of an unpacked OCI image layout in order, whiteouts included."""
    try:
        index = json.loads((layout / "index.json").read_text(encoding="utf-8"))
        manifest = _blob_json(layout, index["manifests"][0]["digest"])
        layers = manifest["layers"]
    except (OSError, KeyError, IndexError, ValueError) as exc:
        raise WorldError(f"{layout} is not an OCI image layout (index.json, blobs/): {exc}") from exc
    rootfs.mkdir(parents=True)
    for number, layer in enumerate(layers, 1):
        progress(f"applying layer {number}/{len(layers)} ({layer.get('size', 0) >> 20} MB)")
        path = _blob_path(layout, layer["digest"])
        opener = gzip.open if layer.get("mediaType", "").endswith("gzip") else open
        with opener(path, "rb") as stream, tarfile.open(fileobj=stream, mode="r|") as archive:
            written: set[str] = set()  # this layer's own entries: its whiteouts apply to lower layers only
            for member in archive:
                _apply_layer_member(archive, member, rootfs, written)


def _apply_layer_member(archive: tarfile.TarFile, member: tarfile.TarInfo, rootfs: Path, written: set[str]) -> None:
    name = member.name.lstrip("./").rstrip("/")
    parent, _, base = name.rpartition("/")
    if base == ".wh..wh..opq":  # opaque folder: drop what lower layers put there
        folder = rootfs / parent
        for child in folder.iterdir() if folder.is_dir() else []:
            if f"{parent}/{child.name}".lstrip("/") not in written:
                remove_path(child)
        return
    if base.startswith(".wh."):
        remove_path(rootfs / parent / base[len(".wh.") :])
        return
    target = rootfs / name
    if (target.exists() or target.is_symlink()) and not (member.isdir() and target.is_dir()):
        remove_path(target)
    written.add(name)
    archive.extract(member, rootfs, filter="tar")


def _finish(world: World, rootfs: Path, progress: Progress) -> None:
    """pip requirements and setup commands, run inside the new root (as root, with network)."""
    steps = []
    if world.definition.get("pip"):
        quoted = " ".join(shlex.quote(r) for r in world.definition["pip"])
        steps.append(f"python3 -m pip install --no-cache-dir --break-system-packages {quoted}")
    steps += list(world.definition.get("setup") or [])
    for command in steps:
        progress(f"in the world: {command}")
        argv = [
            "bwrap", "--bind", str(rootfs), "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf", "--unshare-pid", "--die-with-parent",
            "--setenv", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--", "/bin/sh", "-ec", command,
        ]  # fmt: skip
        _stream(argv, progress, what=f"setup command {command!r}")


def _stream(argv: list[str], progress: Progress, *, what: str, env: Mapping[str, str] | None = None) -> None:
    """Run a build step, passing its output lines to ``progress``; its tail goes into the error."""
    tail: list[str] = []
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail = [*tail[-30:], line]
            if line.startswith(("I: ", "E: ", "W: ")) or "Successfully installed" in line:
                progress(f"  {line}")
    if proc.returncode != 0:
        raise WorldError(f"{what} failed (exit status {proc.returncode}):\n" + "\n".join(tail))


def _installed_packages(rootfs: Path) -> dict[str, str]:
    status = rootfs / "var/lib/dpkg/status"
    packages: dict[str, str] = {}
    if status.is_file():
        name = ""
        for line in status.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Package: "):
                name = line[9:]
            elif line.startswith("Version: ") and name:
                packages[name] = line[9:]
    return packages


# ---------------------------------------------------------------------------- Docker


def docker_image(reference: str | World, docker_host: str | None = None) -> str:
    """The world as a Docker image (``docker import`` of its root filesystem, once). Returns the tag."""
    world = load_world(reference)
    root = world.root()
    if root is None:
        raise WorldError("the host world has no image; name a built world, or give the Docker sandbox an image")
    tag = f"harness-gym-world-{world.name}:{world.digest}"
    env = dict(os.environ, **({"DOCKER_HOST": docker_host} if docker_host else {}))
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True, env=env).returncode == 0:
        return tag
    with subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE) as packer:
        imported = subprocess.run(["docker", "import", "-", tag], stdin=packer.stdout, capture_output=True, env=env)
    if imported.returncode != 0 or packer.returncode != 0:
        raise WorldError(f"docker import of world {world.name!r} failed: {imported.stderr.decode().strip()}")
    return tag


# ---------------------------------------------------------------------------- helpers


def _blob_path(layout: Path, digest: str) -> Path:
    algorithm, _, value = digest.partition(":")
    return layout / "blobs" / algorithm / value


def _blob_json(layout: Path, digest: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_blob_path(layout, digest).read_text(encoding="utf-8"))
    return data
