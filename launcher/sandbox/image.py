"""The sandbox test image, built locally with no registry, and the data-root template.

Recipe (measured in docs/test-fleet.md): Debian packages fetched with ``apt-get download`` and
unpacked with ``dpkg -x`` (python3.11-minimal + stdlib + busybox-static, ~33 MB), the stand-in at
``/app`` with ``argcheck.py`` and the option snapshots beside it, shims for ``sglang``, ``vllm``,
``mooncake_master`` and ``python3 -m sglang.launch_server``; then ``docker import`` into a
throw-away dockerd whose data-root becomes the template every host's data-root is seeded from
(same image ID on every host, no per-host import).  Everything is cached under the cache root,
keyed by a hash of the image's inputs: ``debs/``, ``standin-<hash>.tar``, ``template-<hash>/``.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
import time
from importlib import resources
from pathlib import Path

from launcher.errors import FleetError
from launcher.sandbox import dockerd, procs
from launcher.sandbox.state import cache_root

IMAGE = "fleet-standin:latest"
_RECIPE = "standin-image-1"  # bump when the build steps below change
PACKAGES = (
    "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libc6", "libexpat1",
    "zlib1g", "libssl3", "media-types", "libffi8", "libbz2-1.0", "liblzma5", "libuuid1",
    "busybox-static",
)  # fmt: skip
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


def image_files() -> dict[str, bytes]:
    """Image path -> content of everything fleet puts into the image (besides the packages)."""
    standin = resources.files("launcher.sandbox.standin")
    engines = resources.files("launcher.engines")
    files = {
        "app/standin/__init__.py": b"",
        "app/standin/server.py": standin.joinpath("server.py").read_bytes(),
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


def source_hash() -> str:
    h = hashlib.sha256(_RECIPE.encode() + b"\0" + " ".join(PACKAGES).encode())
    for path, content in sorted(image_files().items()):
        h.update(b"\0" + path.encode() + b"\0" + hashlib.sha256(content).digest())
    return h.hexdigest()[:16]


def ensure_template() -> Path:
    """The data-root template holding ``fleet-standin:latest``; built once per input hash."""
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    digest = source_hash()
    template = cache / f"template-{digest}"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (parallel `up`s, test workers)
        if template.is_dir():
            return template
        tar = cache / f"standin-{digest}.tar"
        if not tar.exists():
            _build_tar(cache, tar)
        _build_template(tar, template)
        _prune(cache, digest)
    return template


def _prune(cache: Path, keep: str) -> None:
    """Drops older tars/templates (seeded data-roots hold their own hardlinks, so it is safe)."""
    for old in (*cache.glob("standin-*.tar"), *cache.glob("template-*")):
        if keep not in old.name:
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


def _download_debs(debs: Path) -> tuple[Path, ...]:
    debs.mkdir(parents=True, exist_ok=True)
    missing = [p for p in PACKAGES if not any(debs.glob(f"{p}_*.deb"))]
    if missing:
        cmd = ("apt-get", "download", "-q", *missing)
        proc = subprocess.run(cmd, cwd=debs, capture_output=True, text=True)
        if proc.returncode != 0:  # stale or absent package lists
            subprocess.run(("apt-get", "update", "-qq"), capture_output=True)
            proc = subprocess.run(cmd, cwd=debs, capture_output=True, text=True)
        if proc.returncode != 0:
            last = proc.stderr.strip().splitlines()[-1:] or ["no output"]
            raise FleetError(f"sandbox image: apt-get download failed: {last[0]}")
    return tuple(sorted(next(iter(sorted(debs.glob(f"{p}_*.deb")))) for p in PACKAGES))


def _build_tar(cache: Path, tar: Path) -> None:
    debs = _download_debs(cache / "debs")
    with tempfile.TemporaryDirectory(dir=cache, prefix="rootfs-") as tmp:
        root = Path(tmp)
        for deb in debs:
            subprocess.run(("dpkg", "-x", str(deb), str(root)), check=True)
        for sub in _TRIM:
            shutil.rmtree(root / sub, ignore_errors=True)
        (root / "usr/bin/python3").symlink_to("python3.11")
        for applet in _APPLETS:
            link = root / "bin" / applet
            if not link.exists():
                link.symlink_to("busybox")
        (root / "etc").mkdir(exist_ok=True)
        (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (root / "etc/group").write_text("root:x:0:\n")
        for sub in ("tmp", "root", "proc", "sys", "dev", "run"):
            (root / sub).mkdir(exist_ok=True)
        (root / "tmp").chmod(0o1777)
        for rel, content in image_files().items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(0o755 if rel.startswith("usr/local/bin/") else 0o644)
        part = tar.with_suffix(".part")
        subprocess.run(("tar", "-C", str(root), "-cf", str(part), "."), check=True)
        part.chmod(0o644)
        part.replace(tar)


def _build_template(tar: Path, template: Path) -> None:
    """Imports the tar into a throw-away dockerd (private mount ns, own /run); keeps its root."""
    work = template.with_name(template.name + ".build")
    shutil.rmtree(work, ignore_errors=True)
    (work / "run").mkdir(parents=True)
    data = work / "data"
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
        deadline = time.monotonic() + dockerd.READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise FleetError(f"sandbox image: template dockerd exited, see {work}/dockerd.log")
            try:
                if dockerd.api(sock, "GET", "/_ping", timeout=2.0)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise FleetError(f"sandbox image: template dockerd not ready, see {work}/dockerd.log")
            time.sleep(0.05)
        changes = tuple(x for c in _CHANGES for x in ("-c", c))
        imp = subprocess.run(
            ("docker", "-H", f"unix://{sock}", "import", *changes, str(tar), IMAGE),
            capture_output=True, text=True,
        )  # fmt: skip
        if imp.returncode != 0:
            raise FleetError(f"sandbox image: docker import failed: {imp.stderr.strip()}")
    finally:
        procs.kill_all((daemon,), 20.0)
        proc.wait()
    data.replace(template)
    shutil.rmtree(work, ignore_errors=True)
