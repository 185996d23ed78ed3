"""The sandbox test image, built locally with no registry, and the data-root template.

Recipe (measured in docs/test-fleet.md): Debian packages fetched with ``apt-get download`` and
unpacked with ``dpkg -x`` (python3.11-minimal + stdlib + busybox-static + the C++ runtime, ~35
MB); the REAL sglang-router (PyPI ``sglang-router==0.3.2``, a Rust router behind a Python entry
point) with its runtime dependencies, as pinned cp311 manylinux wheels unpacked into the image
python's ``/usr/local/lib/python3.11/dist-packages`` -- so a router unit running the recipe's
``python3 -m sglang_router.launch_router ...`` in this image runs the real router, as in the
production image; the stand-in at ``/app`` with ``argcheck.py`` and the option snapshots beside
it, shims for ``sglang``, ``vllm``, ``mooncake_master`` and ``python3 -m
sglang.launch_server``.  Everything python in the image is byte-compiled by the image's own
python (chroot), since containers run with PYTHONDONTWRITEBYTECODE.  Then ``docker import`` into a
throw-away dockerd whose data-root becomes the template every host's data-root is seeded from
(same image ID on every host, no per-host import).

Cache (under the cache root): ``debs/`` and ``wheels/`` (downloads); under ``images/`` (a
directory of its own, so checkouts with an older image layout -- which pruned every
``template-*`` but their own -- never touch these): ``base-<hash>/`` (the unpacked, compiled
rootfs without fleet's own files; keyed by packages + wheels), ``standin-<hash>.tar`` and
``template-<hash>/`` (keyed by everything).  Builds are serialised by
an exclusive lock on ``.lock``; a template in use (an ``up`` seeding from it) holds a shared lock
on ``template-<hash>.lock``, and pruning skips what is held, so a concurrent ``up`` from another
checkout (another stand-in, another hash) never loses its template half-way through seeding.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from dataclasses import dataclass
from typing import IO, Callable, Iterator

from launcher.errors import FleetError
from launcher.sandbox import dockerd, procs
from launcher.sandbox.state import cache_root

# Progress of a build (minutes on a first run): the CLI shows it on stderr (cli/common.py).
steps = logging.getLogger("fleet.sandbox")

IMAGE = "fleet-standin:latest"
_RECIPE = "standin-image-2"  # bump when the build steps below change
PACKAGES = (
    "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libc6", "libexpat1",
    "zlib1g", "libssl3", "media-types", "libffi8", "libbz2-1.0", "liblzma5", "libuuid1",
    "busybox-static", "libstdc++6", "libgcc-s1",
)  # fmt: skip
ROUTER_VERSION = "0.3.2"
# sglang-router and what `pip install sglang-router==0.3.2` resolved to (its runtime closure),
# pinned so the image is reproducible; cp311 manylinux wheels for the image's python 3.11.
ROUTER_WHEELS = (
    f"sglang-router=={ROUTER_VERSION}", "aiohappyeyeballs==2.7.1", "aiohttp==3.14.5",
    "aiosignal==1.4.0", "annotated-doc==0.0.7", "annotated-types==0.8.0", "anyio==4.16.0",
    "attrs==26.1.0", "click==8.5.1", "fastapi==0.165.0", "frozenlist==1.8.0", "h11==0.16.0",
    "idna==3.20", "multidict==7.2.1", "opentelemetry-api==1.45.2", "orjson==3.13.0",
    "propcache==0.5.4", "pydantic==2.14.4", "pydantic_core==2.50.5", "setproctitle==1.3.8",
    "starlette==1.10.0", "typing-inspection==0.4.5", "typing_extensions==4.16.0",
    "uvicorn==0.54.0", "yarl==1.25.1",
)  # fmt: skip
_WHEEL_PLATFORMS = ("manylinux_2_36_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64",
                    "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64")  # fmt: skip
SITE = "usr/local/lib/python3.11/dist-packages"  # on the image python's sys.path (Debian site)
_APPLETS = ("sh", "ls", "cat", "ip", "hostname", "nc", "wget", "sleep", "ps", "kill", "env", "ifconfig")
_TRIM = (
    "usr/share/doc", "usr/share/man", "usr/share/locale", "usr/lib/x86_64-linux-gnu/gconv",
    "usr/lib/python3.11/test", "usr/lib/python3.11/idlelib", "usr/lib/python3.11/tkinter",
    "usr/lib/python3.11/lib2to3", "usr/lib/python3.11/ensurepip", "usr/lib/python3.11/pydoc_data",
)  # fmt: skip
_CHANGES = (
    'CMD ["python3", "-m", "standin.server"]',
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV PYTHONPATH=/app",
    "ENV PYTHONDONTWRITEBYTECODE=1",
    "ENV PYTHONUNBUFFERED=1",
)
IMAGES = "images"  # subdirectory of the cache root for bases, tars, templates and their locks
KEEP_OLD = 2  # templates/bases of other hashes kept (other checkouts alternate between them)


def image_files() -> dict[str, bytes]:
    """Image path -> content of everything fleet puts into the image (besides the packages)."""
    standin = resources.files("launcher.sandbox.standin")
    engines = resources.files("launcher.engines")
    files = {
        "app/standin/__init__.py": b"",
        "app/standin/server.py": standin.joinpath("server.py").read_bytes(),
        "app/standin/metrics.py": standin.joinpath("metrics.py").read_bytes(),
        "app/standin/router.py": standin.joinpath("router.py").read_bytes(),
        "app/sglang/__init__.py": standin.joinpath("sglang/__init__.py").read_bytes(),
        "app/sglang/launch_server.py": standin.joinpath("sglang/launch_server.py").read_bytes(),
    }
    for shim in ("sglang", "vllm", "mooncake_master"):
        files[f"usr/local/bin/{shim}"] = standin.joinpath(f"bin/{shim}").read_bytes()
    argcheck = engines.joinpath("argcheck.py")
    if argcheck.is_file():
        files["app/argcheck.py"] = argcheck.read_bytes()
    options = engines.joinpath("options")
    if options.is_dir():
        for snap in sorted(options.iterdir(), key=lambda p: p.name):
            if snap.name.endswith(".json"):
                files[f"app/options/{snap.name}"] = snap.read_bytes()
    return files


def base_hash() -> str:
    """Identifies the base rootfs: packages, router wheels and the build steps."""
    text = "\0".join((_RECIPE, " ".join(PACKAGES), " ".join(ROUTER_WHEELS)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def source_hash() -> str:
    h = hashlib.sha256(base_hash().encode())
    for path, content in sorted(image_files().items()):
        h.update(b"\0" + path.encode() + b"\0" + hashlib.sha256(content).digest())
    return h.hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtraImage:
    """Another image the template also holds (the real vLLM image:
    :func:`launcher.sandbox.realimage.extra`, which builds on this module's helpers)."""

    digest: str  # identifies its inputs; part of the template's hash
    image: str
    changes: tuple[str, ...]  # docker import --change lines
    tar: Callable[[Path], Path]  # cache dir -> its rootfs tar, built if absent (the build lock is held)


@contextmanager
def template(extra: ExtraImage | None = None) -> Iterator[Path]:
    """The data-root template holding ``fleet-standin:latest`` (built once per input hash),
    and ``extra``'s image if given; held with a shared lock for as long as the caller seeds
    data-roots from it."""
    cache = cache_root() / IMAGES
    cache.mkdir(parents=True, exist_ok=True)
    digest = source_hash()
    if extra is not None:
        digest = hashlib.sha256(f"{digest}+{extra.digest}".encode()).hexdigest()[:16]
    path = cache / f"template-{digest}"
    with open(cache / ".lock", "w") as build_lock:
        fcntl.flock(build_lock, fcntl.LOCK_EX)  # one build at a time (parallel `up`s, test workers)
        hold = open(cache / f"template-{digest}.lock", "w")
        fcntl.flock(hold, fcntl.LOCK_SH)  # taken before the build lock is released
        try:
            if not path.is_dir():
                t0 = time.monotonic()
                steps.info("sandbox image: building the hosts' image template (once per input change)%s",
                         " with the real-engine image: ~7-13 min on 2 busy cores" if extra else "")  # fmt: skip
                _build(cache, source_hash(), path, extra)
                steps.info("sandbox image: template ready in %.0fs", time.monotonic() - t0)
            os.utime(path)  # most recently used: pruned last
            _prune(cache, keep=(digest, base_hash()))
        except BaseException:
            hold.close()
            raise
    try:
        yield path
    finally:
        hold.close()


def ensure_template(extra: ExtraImage | None = None) -> Path:
    """The template's path, built if needed (not held: prefer :func:`template`)."""
    with template(extra) as path:
        return path


def _build(cache: Path, digest: str, path: Path, extra: ExtraImage | None) -> None:
    try:
        tar = cache / f"standin-{digest}.tar"
        if not tar.exists():
            _build_tar(cache, tar)
        build_template(tar, path, extra=((extra.tar(cache), extra.image, extra.changes),) if extra else ())
    except subprocess.CalledProcessError as err:
        cmd = err.cmd if isinstance(err.cmd, str) else " ".join(map(str, err.cmd))
        raise FleetError(f"sandbox image: `{cmd[:120]}` exited {err.returncode}") from err
    except OSError as err:
        raise FleetError(f"sandbox image: {err}") from err


def _try_exclusive(lock_path: Path) -> IO[str] | None:
    """An exclusive lock on ``lock_path`` if nobody holds it (the caller closes it), else None."""
    f = open(lock_path, "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    return f


def _prune(cache: Path, keep: tuple[str, ...]) -> None:
    """Drops all but the ``KEEP_OLD`` most recently used templates/bases of other hashes, never
    one in use (seeded data-roots hold their own hardlinks, so deleting a template is safe)."""
    for kind in ("template", "base"):
        old = sorted((p for p in cache.glob(f"{kind}-*") if p.is_dir() and p.name.split("-", 1)[1] not in keep),
                     key=lambda p: p.stat().st_mtime, reverse=True)  # fmt: skip
        for d in old[KEEP_OLD:]:
            digest = d.name.split("-", 1)[1]
            held = _try_exclusive(cache / f"{d.name}.lock") if kind == "template" else None
            if kind == "template" and held is None:
                continue  # an `up` is seeding from it
            try:
                shutil.rmtree(d, ignore_errors=True)
                (cache / f"standin-{digest}.tar").unlink(missing_ok=True)
                (cache / f"{d.name}.lock").unlink(missing_ok=True)
            finally:
                if held is not None:
                    held.close()
    live = {p.name.split("-", 1)[1] for p in cache.glob("template-*") if p.is_dir()}
    for tar in cache.glob("standin-*.tar"):
        if tar.stem.split("-", 1)[1] not in live | set(keep):
            tar.unlink(missing_ok=True)


def download_debs(debs: Path, packages: tuple[str, ...] = PACKAGES) -> tuple[Path, ...]:
    """The ``.deb`` of each package (``apt-get download`` once, kept in ``debs``)."""
    debs.mkdir(parents=True, exist_ok=True)
    missing = [p for p in packages if not any(debs.glob(f"{p}_*.deb"))]
    if missing:
        steps.info("sandbox image: downloading %d Debian packages", len(missing))
        cmd = ("apt-get", "download", "-q", *missing)
        proc = subprocess.run(cmd, cwd=debs, capture_output=True, text=True)
        if proc.returncode != 0:  # stale or absent package lists
            subprocess.run(("apt-get", "update", "-qq"), capture_output=True)
            proc = subprocess.run(cmd, cwd=debs, capture_output=True, text=True)
        if proc.returncode != 0:
            last = proc.stderr.strip().splitlines()[-1:] or ["no output"]
            raise FleetError(f"sandbox image: apt-get download failed: {last[0]}")
    return tuple(sorted(next(iter(sorted(debs.glob(f"{p}_*.deb")))) for p in packages))


def wheel_glob(pin: str) -> str:
    name, _, version = pin.partition("==")
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-*.whl"


def _download_wheels(wheels: Path) -> tuple[Path, ...]:
    """The pinned router wheels (downloaded once with ``pip download``, no dependency resolution
    at build time: the pins are the closure)."""
    wheels.mkdir(parents=True, exist_ok=True)

    def found(pin: str) -> list[Path]:
        return sorted(p for p in wheels.iterdir() if fnmatch.fnmatch(p.name.lower(), wheel_glob(pin)))

    missing = [pin for pin in ROUTER_WHEELS if not found(pin)]
    if missing:
        steps.info("sandbox image: downloading %d router wheels", len(missing))
        platforms = tuple(x for p in _WHEEL_PLATFORMS for x in ("--platform", p))
        cmd = (sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
               "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
               "--abi", "cp311", *platforms, "-d", str(wheels), *missing)  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")] or proc.stderr.splitlines()
            raise FleetError(f"sandbox image: pip download of the router wheels failed: {(errors or ['no output'])[-1]}")
    out = []
    for pin in ROUTER_WHEELS:
        hits = found(pin)
        if not hits:
            raise FleetError(f"sandbox image: no wheel for {pin} in {wheels}")
        out.append(hits[0])
    return tuple(out)


def install_wheel(wheel: Path, site: Path) -> None:
    """A wheel install is an unzip, plus moving ``*.data/{purelib,platlib}`` into the site dir."""
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    for data in site.glob("*.data"):
        for sub in ("purelib", "platlib"):
            if (data / sub).is_dir():
                for item in (data / sub).iterdir():
                    item.replace(site / item.name)
        shutil.rmtree(data)


def chroot_python(root: Path, *args: str, wrap: tuple[str, ...] = ()) -> None:
    """Runs the image's own python inside the rootfs (its bytecode magic, its sys.path);
    ``wrap`` is a command prefix that execs the rest (e.g. mounts first)."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    chroot = shutil.which("chroot", path="/usr/sbin:/usr/bin:/sbin:/bin") or "chroot"
    proc = subprocess.run((*wrap, chroot, str(root), "/usr/bin/python3.11", *args), capture_output=True,
                          text=True, env=env)  # fmt: skip
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise FleetError(f"sandbox image: python in the image failed ({' '.join(args[:3])}): {tail}")


def unpack_rootfs(root: Path, debs: tuple[Path, ...], trim: tuple[str, ...]) -> None:
    """A fresh ``root``: the debs unpacked (``dpkg -x``), ``trim`` removed, :func:`finish_rootfs`."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    for deb in debs:
        subprocess.run(("dpkg", "-x", str(deb), str(root)), check=True)
    for sub in trim:
        shutil.rmtree(root / sub, ignore_errors=True)
    finish_rootfs(root)


def finish_rootfs(root: Path) -> None:
    """What an unpacked set of debs lacks to be a root: python3, busybox applets, root's
    account, the mount points and a sticky /tmp."""
    python3 = root / "usr/bin/python3"
    if not python3.is_symlink() and not python3.exists():
        python3.symlink_to("python3.11")
    for applet in _APPLETS:
        link = root / "bin" / applet
        if not link.exists() and not link.is_symlink():
            link.symlink_to("busybox")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    for sub in ("tmp", "root", "proc", "sys", "dev", "run"):
        (root / sub).mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)


def _base_rootfs(cache: Path) -> Path:
    """The unpacked, trimmed, byte-compiled rootfs with the router installed (no /app)."""
    base = cache / f"base-{base_hash()}"
    if base.is_dir():
        os.utime(base)
        return base
    debs = download_debs(cache.parent / "debs")
    wheels = _download_wheels(cache.parent / "wheels")
    work = base.with_name(base.name + ".build")
    steps.info("sandbox image: unpacking %d debs and %d wheels", len(debs), len(wheels))
    unpack_rootfs(work, debs, _TRIM)
    site = work / SITE
    site.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        install_wheel(wheel, site)
    # The router's whole import chain must load with the image's python and libraries.
    chroot_python(work, "-c", "import sglang_router.launch_router, sglang_router.sglang_router_rs")
    steps.info("sandbox image: byte-compiling")
    chroot_python(work, "-m", "compileall", "-q", "/usr/lib/python3.11", f"/{SITE}")
    work.replace(base)
    return base


def copy_with_files(base: Path, root: Path, files: dict[str, bytes]) -> None:
    """``root`` becomes a hardlink copy of ``base`` with ``files`` (image path -> content) written
    as new inodes, so the cached base is never written; ``usr/local/bin`` files are executable."""
    subprocess.run(("cp", "-al", str(base), str(root)), check=True)
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.write_bytes(content)
        path.chmod(0o755 if rel.startswith("usr/local/bin/") else 0o644)


def _build_tar(cache: Path, tar: Path) -> None:
    base = _base_rootfs(cache)
    with tempfile.TemporaryDirectory(dir=cache, prefix="rootfs-") as tmp:
        root = Path(tmp) / "root"
        copy_with_files(base, root, image_files())
        chroot_python(root, "-m", "compileall", "-q", "/app")
        part = tar.with_suffix(".part")
        subprocess.run(("tar", "-C", str(root), "-cf", str(part), "."), check=True)
        part.chmod(0o644)
        part.replace(tar)


def build_template(
    tar: Path, template: Path, *, image: str = IMAGE, changes: tuple[str, ...] = _CHANGES,
    extra: tuple[tuple[Path, str, tuple[str, ...]], ...] = (),
) -> None:
    """Imports the rootfs ``tar`` as ``image`` (and each (tar, image, changes) of ``extra``) into
    a throw-away dockerd (private mount ns, own /run) and keeps that daemon's data-root as
    ``template``."""
    work = template.with_name(template.name + ".build")
    shutil.rmtree(work, ignore_errors=True)
    (work / "run").mkdir(parents=True)
    data = work / "data"
    with template_daemon(work, data) as sock:
        for one_tar, name, one_changes in ((tar, image, changes), *extra):
            steps.info("sandbox image: docker import %s into the template", name)
            flags = tuple(x for c in one_changes for x in ("-c", c))
            imp = subprocess.run(
                ("docker", "-H", f"unix://{sock}", "import", *flags, str(one_tar), name),
                capture_output=True, text=True,
            )  # fmt: skip
            if imp.returncode != 0:
                raise FleetError(f"sandbox image: docker import of {name} failed: {imp.stderr.strip()}")
    data.replace(template)
    shutil.rmtree(work, ignore_errors=True)


@contextmanager
def template_daemon(work: Path, data: Path) -> Iterator[str]:
    """A throw-away dockerd with data-root ``data`` (its own /run under ``work``, in a private
    mount namespace), ready; its socket.  Stopped on exit."""
    cmd = (
        "unshare", "--mount", "--propagation", "private", "sh", "-c",
        'mount --bind "$0" /run && exec "$@"', str(work / "run"),
        *dockerd.argv(str(data), "/fleet-sandbox/template"),
    )  # fmt: skip
    with open(work / "dockerd.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    daemon = procs.ref(proc.pid)
    sock = str(work / "run/docker.sock")
    try:
        procs.poll_until(
            lambda: dockerd.api(sock, "GET", "/_ping", timeout=2.0)[0] == 200,
            time.monotonic() + dockerd.READY_TIMEOUT_S,
            died=lambda: None if proc.poll() is None else f"sandbox image: template dockerd exited, see {work}/dockerd.log",
            late=lambda: f"sandbox image: template dockerd not ready, see {work}/dockerd.log",
        )  # fmt: skip
        yield sock
    finally:
        procs.kill_all((daemon,), 20.0)
        proc.wait()
