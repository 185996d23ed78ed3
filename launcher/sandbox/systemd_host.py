"""Sandbox hosts of kind ``systemd``: systemd as PID 1 of a container with its OWN root filesystem,
for fleet's ``runtime: systemd`` path (units started, stopped and restarted by a real systemd,
logs read from a real journal).

Why a container: systemd booted over this machine's shared root filesystem runs
systemd-tmpfiles over the machine's real /tmp (measured: it wipes it).  Here systemd sees only
the image's rootfs (an overlay in the host's own data-root); nothing of the machine's filesystem
is bound in but the host's keys and fake-hardware directories.

Layout of host ``sK`` (its index is ``INDEX_BASE + K``, so its address sits in the sandbox's /20
clear of the docker hosts): a network namespace ``fsb-<name>-sK`` on the ctl bridge (NIC
``veth0``), a runner dockerd in that namespace and a private mount namespace (``/run`` bound to
``<hostdir>/run``, data-root seeded from the systemd image template; it is the host's
``HostState.dockerd``), and one container ``fleet-host`` on ``--network host`` whose PID 1 is
``/sbin/init`` and whose sshd (a systemd service) answers on port 22 with the sandbox-generated
host key.  ``fleet sandbox down`` needs nothing new: it removes the runner's containers, stops the
runner and kills what is left of the runner's process tree (the runner runs under tini, a child
subreaper, so the container's shim and everything the container's systemd started stay in it).

The image (cached like the stand-in's): ``mmdebstrap`` of Debian with systemd, dbus, openssh-server
and python3 (maintainer scripts run, so users, enabled units and ``/etc`` are what a real host
has), the stand-in installed as a native engine (python packages in the system site dir, the
``sglang``/``vllm``/``mooncake_master`` shims in /usr/local/bin: fleet's systemd units run the
engine without a container), and an sshd drop-in for key-only root login.

Container flags, measured on this kernel (cgroup v1, no CAP_SYS_RESOURCE in the bounding set):
``--privileged`` fails (runc: ``unable to apply caps``), so every capability but SYS_RESOURCE is
added; ``--cgroupns=private`` and a rw remount of ``/sys/fs/cgroup/systemd`` give systemd its
own subtree of the named hierarchy (read-only, every unit start logs ``Failed to attach ... to
compat systemd cgroup``); ``/run`` and ``/run/lock`` are tmpfs; ``container=docker``; SIGRTMIN+3
stops it.  Hard rlimits cannot be raised here, so systemd clamps a unit's ``LimitMEMLOCK=infinity``
to the inherited hard limit (its ``setrlimit_closest``) instead of failing the unit.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from launcher.errors import FleetError
from launcher.sandbox import dockerd, fakehw, image, netns, procs, realimage, sshd, state
from launcher.sandbox.state import HostState, SandboxState

IMAGE = "fleet-systemd-host:latest"
CONTAINER = "fleet-host"
INDEX_BASE = 200  # sK has index 200+K: addresses .211, .212, ... of the slot's /20
IFNAME = "veth0"
READY_TIMEOUT_S = 60.0
SHM_SIZE = "2g"  # tmpfs: memory is used only as filled
_RECIPE = "systemd-host-3"  # bump when the build steps below change
PACKAGES = ("systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2", "procps")
SITE = "usr/local/lib/python3.11/dist-packages"  # on the system python's sys.path
SSHD_DROPIN = """\
# fleet sandbox: the host key and the client key are the sandbox's (bind mounts, read-only).
HostKey /etc/ssh/fleet/ssh_host_ed25519_key
AuthorizedKeysFile /etc/ssh/fleet/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
UseDNS no
MaxStartups 200:30:400
MaxSessions 64
"""
# The named v1 hierarchy comes read-only without --privileged; systemd needs its subtree rw.
_INIT = "mount -o remount,bind,rw /sys/fs/cgroup/systemd && exec /sbin/init"


def host_files() -> dict[str, bytes]:
    """Image path -> content of fleet's files in the systemd host image: the stand-in as a
    native engine (the stand-in image's ``/app`` tree goes to the system site dir) and the sshd
    drop-in."""
    files = {"etc/ssh/sshd_config.d/fleet.conf": SSHD_DROPIN.encode()}
    for path, content in image.image_files().items():
        files[f"{SITE}/{path.removeprefix('app/')}" if path.startswith("app/") else path] = content
    return files


def base_hash() -> str:
    """Identifies the unpacked Debian rootfs: packages and build steps (not fleet's files)."""
    return hashlib.sha256("\0".join((_RECIPE, " ".join(PACKAGES))).encode()).hexdigest()[:16]


def source_hash() -> str:
    h = hashlib.sha256(base_hash().encode())
    for path, content in sorted(host_files().items()):
        h.update(b"\0" + path.encode() + b"\0" + hashlib.sha256(content).digest())
    return h.hexdigest()[:16]


@contextmanager
def template(real_engine: bool = False) -> Iterator[Path]:
    """The data-root template holding :data:`IMAGE` (built once per input hash), held with a
    shared lock while the caller seeds from it.  The Debian rootfs is cached apart
    (``systemd-base-<hash>/``), so a change of the stand-in rebuilds the image from it in seconds
    instead of running mmdebstrap again; other hashes' templates and bases are dropped at build.
    With ``real_engine`` the image also holds the real vLLM (CPU build) installed natively, from
    the real-engine image (:mod:`launcher.sandbox.realimage`: its ``/usr`` tree over the Debian
    rootfs, same release and packages), and the generated model in ``/srv/models``."""
    cache = state.cache_root() / image.IMAGES
    cache.mkdir(parents=True, exist_ok=True)
    digest = source_hash()
    kind = "systemd-template"
    if real_engine:
        digest = hashlib.sha256(f"{digest}+{realimage.digest()}".encode()).hexdigest()[:16]
        kind = "systemd-real-template"
    path = cache / f"{kind}-{digest}"
    with open(cache / "systemd.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_dir():
            for old in (*cache.glob(f"{kind}-*"), *cache.glob("systemd-base-*")):
                if not old.name.endswith(base_hash()):
                    shutil.rmtree(old, ignore_errors=True)
            _build(cache, path, real_engine)
        fcntl.flock(lock, fcntl.LOCK_SH)  # downgrade: concurrent ups seed, nobody rebuilds
        yield path


def _base(cache: Path) -> Path:
    """The Debian rootfs (mmdebstrap: maintainer scripts run, so users, enabled units and /etc
    are a real host's) without its generated host keys."""
    base = cache / f"systemd-base-{base_hash()}"
    if base.is_dir():
        return base
    if shutil.which("mmdebstrap") is None:
        raise FleetError("sandbox systemd image: mmdebstrap is missing (scripts/install.sh installs it)")
    sources = [str(p) for p in sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))]
    sources += [p for p in ("/etc/apt/sources.list",) if Path(p).is_file() and Path(p).read_text().strip()]
    work = base.with_name(base.name + ".build")
    shutil.rmtree(work, ignore_errors=True)
    cmd = (
        "mmdebstrap", "--variant=minbase", "--mode=root", f"--include={','.join(PACKAGES)}",
        *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "locale")),
        "bookworm", str(work), *sources,
    )  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise FleetError(f"sandbox systemd image: mmdebstrap failed: {tail}")
    for key in (work / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # each host gets the sandbox's key
    for sub in ("etc/ssh/fleet", "srv/models", "srv/cache"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    work.replace(base)
    return base


def _build(cache: Path, path: Path, real_engine: bool) -> None:
    base = _base(cache)
    with tempfile.TemporaryDirectory(dir=cache, prefix="systemd-rootfs-") as tmp:
        root = Path(tmp) / "root"
        image.copy_with_files(base, root, host_files())
        if real_engine:  # after the stand-in: the real `vllm` replaces its shim
            _add_real_engine(cache, root)
        tar = Path(tmp) / "rootfs.tar"
        subprocess.run(("tar", "-C", str(root), "-cf", str(tar), "."), check=True)
        image.build_template(tar, path, image=IMAGE, changes=(f'CMD ["/bin/sh", "-c", "{_INIT}"]',))


def _add_real_engine(cache: Path, root: Path) -> None:
    """The real-engine image's ``/usr`` (its python's site dir with vLLM and torch, console
    scripts, the compiler torch's inductor runs) over ``root`` -- not its /etc (one-line passwd)
    nor its /bin (busybox applets) -- and the generated model at ``/srv/models``."""
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # realimage builds under the image build lock
        tar, model = realimage.ensure(cache)
    # tar unlinks a file before extracting over it: the base's hardlinked files stay untouched.
    subprocess.run(("tar", "-C", str(root), "--keep-directory-symlink", "-xf", str(tar), "./usr"), check=True)
    shutil.copytree(model, root / "srv/models" / realimage.MODEL)


def profile(host: HostState) -> fakehw.Profile:
    """What a systemd host pretends to have: 8x H100 and no RDMA fabric (no fake sysfs tree is
    bound into the container)."""
    return fakehw.Profile(
        host=host.name, ifname=host.ifname, data_ip=host.data_ip, gpu_model="H100", gpu_count=8,
        gpu_memory_gib=80, fabric="none", hcas_declared=(), hcas_present=(), gid_index=None,
    )  # fmt: skip


def start(st: SandboxState, count: int, *, real_engine: bool = False) -> SandboxState:
    """Adds ``count`` systemd hosts s1.. to a netns sandbox whose client key exists; each step
    is recorded in the state file before it runs.  ``real_engine``: see :func:`template`."""
    if st.slot is None:
        raise FleetError(f"sandbox {st.name}: systemd hosts need network namespaces (loopback mode here)")
    slot = netns.Slot(index=st.slot)
    new = []
    for k in range(1, count + 1):
        index = INDEX_BASE + k
        address = slot.host_address(index)
        new.append(HostState(name=f"s{k}", index=index, dir=f"{st.dir}/s{k}", kind="systemd",
                             netns=netns.host_ns_name(st.name, f"s{k}"), address=address, port=22,
                             ifname=IFNAME, data_ip=address))  # fmt: skip
    st = replace(st, hosts=(*st.hosts, *new))
    state.save(st)
    tools = fakehw.install_tools(Path(st.dir))
    with template(real_engine) as tmpl:
        for h in new:
            netns.make_host(st.name, slot, h.index, h.name, h.ifname)
            _prepare(st, h, tools, tmpl)
            st = st.with_host(replace(h, dockerd=_start_runner(st.name, h)))
            state.save(st)
    deadline = time.monotonic() + READY_TIMEOUT_S
    for h in new:
        dockerd.wait_ready(st.host(h.name), deadline)
        _run_container(st, st.host(h.name))
    for h in new:
        _wait_booted(st.host(h.name), deadline)
    return st


def _prepare(st: SandboxState, h: HostState, tools: Path, tmpl: Path) -> None:
    d = Path(h.dir)
    (d / "run").mkdir(parents=True, exist_ok=True)
    sshd.keygen(d / "ssh_host_ed25519_key", h.name)
    shutil.copy(f"{st.client_key}.pub", d / "authorized_keys")
    fakehw.materialize(profile(h), h.index, d, tools)
    dockerd.seed(tmpl, d / "docker")


def _start_runner(sandbox: str, h: HostState) -> procs.ProcRef:
    """The host's dockerd: in its network namespace (``nsenter``, so /sys and its cgroup mounts
    stay this machine's) and a private mount namespace whose /run is ``<hostdir>/run``."""
    cmd = (
        "nsenter", f"--net=/run/netns/{h.netns}", "unshare", "--mount", "--uts", "--propagation", "private",
        "sh", "-c", 'mount --bind "$0" /run && hostname "$1" && shift && exec "$@"', f"{h.dir}/run", h.name,
        *procs.REAPER, *dockerd.argv(f"{h.dir}/docker", dockerd.cgroup_parent(sandbox, h.name)),
    )  # fmt: skip
    with open(Path(h.dir) / "dockerd.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    return procs.ref(proc.pid)


def run_argv(st: SandboxState, h: HostState) -> tuple[str, ...]:
    """``docker run`` of the host container (see the module docstring for each flag)."""
    d = h.dir
    binds = (
        (f"{d}/ssh_host_ed25519_key", "/etc/ssh/fleet/ssh_host_ed25519_key", "ro"),
        (f"{d}/authorized_keys", "/etc/ssh/fleet/authorized_keys", "ro"),
        # The fake tools' wrappers name these absolute paths (the machine's python3 path exists
        # in the image too); the host's fakehw dir holds the tools' answer cache, so rw.
        (f"{st.dir}/{fakehw.TOOLS_DIR}", f"{st.dir}/{fakehw.TOOLS_DIR}", "ro"),
        (f"{d}/fakehw", f"{d}/fakehw", "rw"),
        (f"{d}/fakehw/bin", "/usr/local/sbin", "ro"),
    )
    return (
        "docker", "-H", f"unix://{h.docker_socket}", "run", "-d", "--name", CONTAINER,
        "--network", "host", "--hostname", h.name, "--cgroupns", "private",
        "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
        *(x for o in ("seccomp", "apparmor", "systempaths") for x in ("--security-opt", f"{o}=unconfined")),
        "--tmpfs", "/run", "--tmpfs", "/run/lock", "-e", "container=docker", "--stop-signal", "SIGRTMIN+3",
        # A host's /dev/shm (docker's default is 64 MB; vLLM's engine core needs 160 MB here).
        "--shm-size", SHM_SIZE,
        *(x for src, dst, mode in binds for x in ("-v", f"{src}:{dst}:{mode}")),
        IMAGE,
    )  # fmt: skip


def _run_container(st: SandboxState, h: HostState) -> None:
    proc = subprocess.run(run_argv(st, h), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise FleetError(f"{h.name}: systemd host container did not start: {tail}")


def _wait_booted(h: HostState, deadline: float) -> None:
    """Until the container's systemd finished booting (``running``: no unit failed) and its
    sshd sends its banner."""
    _wait_sshd(h, deadline)
    cmd = ("docker", "-H", f"unix://{h.docker_socket}", "exec", CONTAINER, "systemctl", "is-system-running", "--wait")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise FleetError(f"{h.name}: systemd of the systemd host still booting after {READY_TIMEOUT_S:.0f}s") from None
    if proc.stdout.strip() != "running":
        failed = subprocess.run(cmd[:-2] + ("--failed", "--no-legend", "--plain"), capture_output=True, text=True)
        units = " ".join(line.split()[0] for line in failed.stdout.splitlines() if line.strip()) or "none listed"
        raise FleetError(f"{h.name}: systemd of the systemd host is {proc.stdout.strip() or proc.stderr.strip()!r} (failed units: {units})")


def _wait_sshd(h: HostState, deadline: float) -> None:
    """Until the container's sshd (started by its systemd) sends its banner."""
    assert h.dockerd is not None

    def exited() -> str | None:
        try:
            status, info = dockerd.api(h.docker_socket, "GET", f"/containers/{CONTAINER}/json", timeout=2.0)
        except OSError:
            return None
        if status == 200 and not info["State"]["Running"]:
            return f"{h.name}: systemd host container exited ({info['State']['ExitCode']})"
        return None

    procs.poll_until(lambda: sshd.banner(h.address, h.port), deadline, died=exited,
                     late=lambda: f"{h.name}: sshd of the systemd host not answering on {h.address}:22")  # fmt: skip
