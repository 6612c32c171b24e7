"""Docker without a registry: a private engine and an image built from this host's own files.

Tests and benchmarks need a Docker engine and an image, and no registry is reachable on every
machine. :class:`PrivateDockerEngine` starts ``dockerd`` on a private socket (no bridge, no
iptables) and stops it by PID; :func:`build_local_image` imports a small root filesystem made of
the host's busybox (``busybox-static``) and, optionally, Debian's ``python3`` with its standard
library, enough for the harness's tool scripts and graders.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness_gym.sandboxes.base import SandboxError

KEEPALIVE = ["sleep", "2147483647"]  # a container's init: it only waits
BUSYBOX = "/bin/busybox"
PYTHON = "/usr/bin/python3"


class PrivateDockerEngine:
    """``dockerd`` on a private socket under a temporary folder; a context manager."""

    def __init__(self, root: str | Path | None = None, start_timeout_s: float = 60.0) -> None:
        if shutil.which("dockerd") is None:
            raise SandboxError("dockerd is not installed (Debian/Ubuntu: apt-get install -y docker.io)")
        if os.geteuid() != 0:
            raise SandboxError("starting a private dockerd needs root")
        self.root = Path(root or tempfile.mkdtemp(prefix="harness-gym-dockerd-"))
        self.host = f"unix://{self.root}/docker.sock"
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        log = open(self.root / "dockerd.log", "wb")  # noqa: SIM115 (kept open for the daemon's life)
        self.process = subprocess.Popen(
            [
                "dockerd",
                "--data-root",
                str(self.root / "data"),
                "--exec-root",
                str(self.root / "exec"),
                "--pidfile",
                str(self.root / "docker.pid"),
                "-H",
                self.host,
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SandboxError(f"dockerd exited: {(self.root / 'dockerd.log').read_text()[-2000:]}")
            probe = subprocess.run(["docker", "-H", self.host, "version"], capture_output=True)
            if probe.returncode == 0:
                return self.host
            time.sleep(0.3)
        self.stop()
        raise SandboxError(f"dockerd did not answer within {self.start_timeout_s:g} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        subprocess.run(["umount", "-R", "-l", str(self.root / "data")], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PrivateDockerEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _libraries(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    paths = []
    for line in out.splitlines():
        parts = line.split()
        for part in parts:
            if part.startswith("/") and os.path.exists(part):
                paths.append(part)
    return paths


def build_local_image(
    tag: str = "harness-gym-local:latest",
    *,
    with_python: bool = True,
    docker_host: str | None = None,
    extra_folders: Mapping[str, Path] | None = None,
    python_packages: Sequence[str] = (),
) -> str:
    """Import an image made of this host's busybox (and Debian python3). Returns the tag.

    ``extra_folders`` maps image paths to host folders to include (a repository at /testbed, say);
    ``python_packages`` names pure-Python packages importable here to copy into the image's
    dist-packages (e.g. pytest and its dependencies)."""
    if not os.path.exists(BUSYBOX):
        raise SandboxError(f"{BUSYBOX} not found (Debian/Ubuntu: apt-get install -y busybox-static)")
    if with_python and not os.path.exists(PYTHON):
        raise SandboxError(f"{PYTHON} not found (Debian/Ubuntu: apt-get install -y python3)")
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, check=True).stdout.split()
    with tempfile.TemporaryDirectory(prefix="harness-gym-image-") as folder:
        tar_path = Path(folder) / "rootfs.tar"
        with tarfile.open(tar_path, "w") as tar:

            def add_dir(name: str, mode: int = 0o755) -> None:
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, mode
                tar.addfile(info)

            for name in ("bin", "etc", "tmp", "root", "usr", "usr/bin", "proc", "sys", "dev"):
                add_dir(name, 0o1777 if name == "tmp" else 0o755)
            tar.add(BUSYBOX, "bin/busybox")
            for applet in applets:
                if applet != "busybox":
                    link = tarfile.TarInfo(f"bin/{applet}")
                    link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                    tar.addfile(link)
            passwd = b"root:x:0:0:root:/root:/bin/sh\n"
            info = tarfile.TarInfo("etc/passwd")
            info.size = len(passwd)
            tar.addfile(info, io.BytesIO(passwd))
            if with_python:
                real = os.path.realpath(PYTHON)
                tar.add(real, real.lstrip("/"))
                link = tarfile.TarInfo("usr/bin/python3")
                link.type, link.linkname = tarfile.SYMTYPE, os.path.basename(real)
                tar.addfile(link)
                for library in _libraries(real):
                    tar.add(os.path.realpath(library), library.lstrip("/"))
                version = os.path.basename(real).replace("python", "")
                stdlib = f"/usr/lib/python{version}"

                def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
                    skip = ("/test/", "/__pycache__", "/idlelib", "/tkinter", "/ensurepip", "/lib2to3")
                    return None if any(s in "/" + member.name + "/" for s in skip) else member

                tar.add(stdlib, stdlib.lstrip("/"), filter=keep)
                # the shared libraries of the standard library's extension modules (libffi for ctypes, ...)
                added = {os.path.realpath(library) for library in _libraries(real)}
                for extension in sorted(Path(stdlib, "lib-dynload").glob("*.so")):
                    for library in _libraries(str(extension)):
                        if os.path.realpath(library) not in added:
                            added.add(os.path.realpath(library))
                            tar.add(os.path.realpath(library), library.lstrip("/"))
                for name in python_packages:
                    module_file = Path(str(importlib.import_module(name).__file__))
                    source = module_file.parent if module_file.name == "__init__.py" else module_file
                    tar.add(str(source), f"usr/lib/python3/dist-packages/{source.name}", filter=keep)
                    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                        metadata = getattr(importlib.metadata.distribution(name), "_path", None)  # its metadata
                        if metadata is not None and Path(metadata).is_dir():
                            tar.add(str(metadata), f"usr/lib/python3/dist-packages/{Path(metadata).name}")
            for inside, host in (extra_folders or {}).items():
                tar.add(str(host), inside.strip("/"))
        env = dict(os.environ)
        if docker_host:
            env["DOCKER_HOST"] = docker_host
        result = subprocess.run(["docker", "import", str(tar_path), tag], capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise SandboxError(f"docker import failed: {result.stderr.strip()}")
    return tag


@contextlib.contextmanager
def local_docker(tag: str = "harness-gym-local:latest") -> Iterator[tuple[str, str]]:
    """An engine (the one at DOCKER_HOST if it answers, else a private one) and a local image."""
    engine = None
    host = os.environ.get("DOCKER_HOST")
    reachable = host is not None and subprocess.run(["docker", "version"], capture_output=True).returncode == 0
    if host is None or not reachable:
        engine = PrivateDockerEngine()
        host = engine.start()
    try:
        yield host, build_local_image(tag, docker_host=host)
    finally:
        if engine is not None:
            engine.stop()


def docker_client(docker_host: str | None) -> Any:
    """A client of the Docker engine at ``docker_host`` (default: ``DOCKER_HOST``), checked to answer."""
    try:
        import docker  # optional dependency (the docker extra): imported only when Docker is used
    except ImportError as exc:
        raise SandboxError("the Docker sandbox needs the docker SDK: pip install 'harness-gym[docker]'") from exc
    try:
        client = docker.DockerClient(base_url=docker_host) if docker_host else docker.from_env()
        client.ping()
    except Exception as exc:  # the SDK raises several unrelated types for an absent daemon
        where = docker_host or os.environ.get("DOCKER_HOST", "the default socket")
        raise SandboxError(
            f"cannot reach a Docker engine at {where}: {exc}. Start dockerd or set DOCKER_HOST."
        ) from exc
    return client


def missing_image(image: str, exc: BaseException) -> SandboxError | None:
    """A clear error for an image the engine does not have (Docker's own says only "No such
    image"): what to pull or build. None when ``exc`` is some other failure."""
    if type(exc).__name__ != "ImageNotFound" and "No such image" not in str(exc):
        return None
    name = image.split("/", 1)[1] if image.startswith("swebench/") else image
    if name.startswith("sweb.eval."):
        return SandboxError(
            f"image {image!r} is not on this Docker engine: pull SWE-bench's published image "
            f"(docker pull swebench/{name}) or build it with SWE-bench's harness (tagged {name}); "
            "harness-gym accepts either name"
        )
    return SandboxError(f"image {image!r} is not on this Docker engine: docker pull {image} (or build it)")


def extract_image_path(image: str, path: str, destination: Path, docker_host: str | None = None) -> None:
    """Copy a folder of an image (e.g. a repository at /testbed) into ``destination``."""
    client = docker_client(docker_host or os.environ.get("DOCKER_HOST"))
    try:
        container = client.containers.create(image, KEEPALIVE)
    except Exception as exc:
        clear = missing_image(image, exc)
        if clear is None:
            raise
        raise clear from exc
    try:
        stream, _ = container.get_archive(path.rstrip("/") + "/.")
        data = io.BytesIO(b"".join(stream))
        destination.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=data) as archive:
            members = [m for m in archive.getmembers() if m.name not in (".", "./")]
            archive.extractall(destination, members=members, filter="tar")
    finally:
        container.remove(force=True)
