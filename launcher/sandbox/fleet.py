"""Bring a sandbox fleet up, tear it down, report on it.

``up`` order (each step records what it made in state.json first, so a crash at any point is
cleaned by ``down`` or by the next ``up``): image template (cached) -> guard route -> ctl
namespace + bridge + root link -> host namespaces -> keys, fake hardware, sshd per host ->
seeded data-roots, dockerd per host -> image tags -> known_hosts + inventory.

``down`` ends what the state file records, by PID + start time (checked right before each
signal; a PID that now belongs to another process is left alone and reported), and the
descendants of those processes -- never "every process in namespace X" by a recorded number: a
namespace's inode number is reused once it dies, so a stale state file could name someone else's.
What is still in a host's own namespaces after that (held open by ``down`` from before the first
signal, so certainly the sandbox's) is ended too, and named on stderr.  Containers are
removed through each daemon's API; each dockerd gets SIGTERM through its tini (a child subreaper:
containerd's shims, which daemonize, stay below it) and what is left of its tree is killed; each
the tree below each host's hostinit.py (sshd's parent, a child subreaper: sessions' leftovers and
the sessions of a killed sshd stay below it) is killed leaves first.
Then the namespaces, the root link and the guard route go, the per-daemon cgroups are removed
and the state dir is deleted.  Nothing is mounted in the root namespace.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, TypeVar

from launcher.errors import FleetError, UsageError
from launcher.sandbox import dockerd, fakehw, image, inventory, netns, procs, realimage, sshd, state, systemd_host
from launcher.sandbox.state import HostState, SandboxState

T = TypeVar("T")
LOOPBACK_BASE_PORT = 22000
ModeWanted = Literal["auto", "netns", "loopback"]


def _parallel(fn: Callable[[T], Any], items: Iterable[T], workers: int = 16) -> list[Any]:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


def require_root() -> None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        raise UsageError("fleet sandbox needs Linux and root (namespaces, sshd, dockerd)")


def up(
    name: str = "default",
    n: int = 8,
    *,
    inventory_path: Path | None = None,
    tags: tuple[str, ...] = (),
    mode: ModeWanted = "auto",
    docker: bool = True,
    systemd_hosts: int = 0,
    real_engine: bool = False,
) -> SandboxState:
    """Brings up ``n`` hosts h1.. (and ``systemd_hosts`` hosts s1.. of kind systemd, see
    :mod:`launcher.sandbox.systemd_host`); cleans a previous sandbox of the same name first.
    With ``real_engine`` every host's docker also holds the real vLLM image and its models dir
    the generated model (:mod:`launcher.sandbox.realimage`; built once, ~3 GB)."""
    require_root()
    state.check_name(name)
    if n < 0 or systemd_hosts < 0 or n + systemd_hosts < 1:
        raise UsageError(f"sandbox needs at least one host, got {n} (+{systemd_hosts} systemd)")
    if state.load(name) is not None or netns.namespaces(name):
        down(name)
    base = state.state_root() / name
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    with ExitStack() as stack:
        # Held (shared lock) until every data-root is seeded: no concurrent build prunes it.
        template = stack.enter_context(image.template(realimage.extra() if real_engine else None)) if docker else None
        st = SandboxState(name=name, mode="netns", dir=str(base), image_tags=(image.IMAGE, *tags))
        model = realimage.model_path(template.parent) if template is not None and real_engine else None
        try:
            st = _network(st, mode)
            st = _hosts(st, n)
            st = _start_sshds(st)
            if model is not None:
                _parallel(lambda h: _copy_model(model, Path(h.dir)), st.hosts)
            if template is not None:
                st = _start_dockerds(st, template)
            if systemd_hosts:
                st = systemd_host.start(st, systemd_hosts, real_engine=real_engine)
            Path(st.known_hosts).write_text("".join(sshd.known_hosts_line(h) + "\n" for h in st.hosts))
            st = replace(st, inventory=str(inventory_path or base / "inventory.yaml"))
            inventory.write(st, Path(st.inventory))
            state.save(st)
            return st
        except BaseException as err:
            down(name)
            if isinstance(err, (OSError, subprocess.CalledProcessError)):
                raise FleetError(f"sandbox {name}: {_one_line(err)}") from err
            raise


def _one_line(err: BaseException) -> str:
    if isinstance(err, subprocess.CalledProcessError):
        cmd = err.cmd if isinstance(err.cmd, str) else " ".join(map(str, err.cmd))
        return f"`{cmd[:120]}` exited {err.returncode}"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _network(st: SandboxState, mode: ModeWanted) -> SandboxState:
    if mode == "loopback":
        return replace(st, mode="loopback")
    with _slot_lock():
        slot = netns.free_slot()
        st = replace(st, slot=slot.index, route_metric=slot.route_metric,
                     ctl_netns=netns.ctl_name(st.name), root_ifname=slot.root_ifname)  # fmt: skip
        state.save(st)
        netns.add_guard(slot)  # before any host address exists
        try:
            netns.make_ctl(st.name, slot)
        except netns.NetnsRefused:
            netns.del_guard(slot.route_metric)
            if mode == "netns":
                raise
            return replace(st, mode="loopback", slot=None, route_metric=None, ctl_netns=None,
                           root_ifname=None)  # fmt: skip
    return st


@contextmanager
def _slot_lock() -> Iterator[None]:
    """Slots are claimed by recording one in a state file and then creating its root link
    fsb<k>, and released by deleting that link and the slot's guard route: both under this lock,
    so concurrent ``up`` and ``down`` calls (test sessions side by side) see each other's claims."""
    with open("/run/fleet-sandbox.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _release_slot(st: SandboxState) -> None:
    """Deletes the slot's root link and guard route unless another sandbox's state claims the
    slot: a stale state (its machine rebooted, its links gone) names a slot a later ``up`` may
    have reused, and removing that one's link would cut its hosts off mid-bring-up."""
    if st.slot is None:
        return
    with _slot_lock():
        others = (state.load(n) for n in state.names() if n != st.name)
        if any(o is not None and o.slot == st.slot for o in others):
            return
        netns.delete_root_link(st.root_ifname)
        if st.route_metric is not None:
            netns.del_guard(st.route_metric)


def _hosts(st: SandboxState, n: int) -> SandboxState:
    hosts = []
    slot = netns.Slot(index=st.slot) if st.slot is not None else None
    for i in range(1, n + 1):
        name = f"h{i}"
        ifname = fakehw.ifname_for(i)
        if slot is not None:
            ns: str | None = netns.host_ns_name(st.name, name)
            address, port = slot.host_address(i), 22
        else:
            ns, address, port = None, "127.0.0.1", LOOPBACK_BASE_PORT + i
        hosts.append(HostState(name=name, index=i, dir=f"{st.dir}/{name}", netns=ns,
                               address=address, port=port, ifname=ifname,
                               data_ip=address))  # fmt: skip
    st = replace(st, hosts=tuple(hosts))
    state.save(st)
    if slot is not None:
        for h in st.hosts:
            netns.make_host(st.name, slot, h.index, h.name, h.ifname)
    return st


def _start_sshds(st: SandboxState) -> SandboxState:
    base = Path(st.dir)
    sshd.keygen(base / "client_key", f"fleet-sandbox-{st.name}")
    script = sshd.hostinit_script(base / "hostinit.py")
    tools = fakehw.install_tools(base)

    def prepare(h: HostState) -> None:
        d = Path(h.dir)
        d.mkdir(parents=True, exist_ok=True)
        sshd.keygen(d / "ssh_host_ed25519_key", h.name)
        fakehw.materialize(fakehw.profile(h.index, h.data_ip), h.index, d, tools)
        for sub in ("srv/models", "srv/cache", "run/sshd"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        sshd.write_config(h, base / "client_key.pub")

    _parallel(prepare, st.hosts)
    for h in st.hosts:
        init, daemon = sshd.start(h, script)
        st = st.with_host(replace(h, sshd_init=init, sshd=daemon))
        state.save(st)
    deadline = time.monotonic() + sshd.READY_TIMEOUT_S
    _parallel(lambda h: sshd.wait_ready(h, deadline), st.hosts)
    return st


def _copy_model(model: Path, host_dir: Path) -> None:
    """The generated model into the host's models dir (hardlinks: the engines mount it read-only)."""
    subprocess.run(("cp", "-al", str(model), str(host_dir / "srv/models" / realimage.MODEL)), check=True)


def _start_dockerds(st: SandboxState, template: Path) -> SandboxState:
    _parallel(lambda h: dockerd.seed(template, Path(h.dir) / "docker"), st.hosts, workers=4)
    for h in st.hosts:
        st = st.with_host(replace(h, dockerd=dockerd.start(st.name, h)))
        state.save(st)
    deadline = time.monotonic() + dockerd.READY_TIMEOUT_S
    _parallel(lambda h: dockerd.wait_ready(h, deadline), st.hosts)
    extra = tuple(t for t in st.image_tags if t != image.IMAGE)
    if extra:
        _parallel(lambda h: _tag_all(h, extra), st.hosts)
    return st


def _tag_all(h: HostState, tags: tuple[str, ...]) -> None:
    for t in tags:
        dockerd.tag(h, image.IMAGE, t)


def down(name: str = "default", note: Callable[[str], None] | None = None) -> bool:
    """Tears the sandbox down; True if there was anything to remove.  Ends only the processes
    the state file records (PID + start time, checked right before each signal) and their
    descendants; a recorded PID that now belongs to another process is left alone and
    ``note`` (default: a line on stderr) says so."""
    require_root()
    state.check_name(name)
    st = state.load(name)
    leftovers = netns.namespaces(name)
    if st is None and not leftovers:
        return False
    hosts = st.hosts if st is not None else ()
    say = note or (lambda line: print(line, file=sys.stderr))
    for h in hosts:
        for what, r in (("sshd", h.sshd), ("hostinit", h.sshd_init), ("dockerd", h.dockerd)):
            if r is not None and r.stale():
                say(f"sandbox {name}: {h.name} {what}: PID {r.pid} now belongs to another process, not touched")
    held = _hold_namespaces(hosts)
    try:
        _parallel(dockerd.remove_containers, [h for h in hosts if h.dockerd and h.dockerd.alive()])
        _parallel(lambda r: procs.end_tree_root_first(r, 15.0), [h.dockerd for h in hosts if h.dockerd is not None])
        _parallel(_end_sessions, hosts)
        for ns in held:
            _end_strays(name, ns, say)
    finally:
        for ns in held:
            os.close(ns.fd)
    for h in hosts:
        dockerd.remove_cgroups(name, h.name)
    netns.delete(name)
    if st is not None:
        _release_slot(st)
    shutil.rmtree(state.state_root() / name, ignore_errors=True)
    return True


def _hold_namespaces(hosts: Iterable[HostState]) -> list[procs.HeldNamespace]:
    """Each host's own namespaces, opened before anything is ended: its network namespace
    through its ``/run/netns`` name (only this sandbox makes ``fsb-NAME-`` names) and the
    private mount namespace of its live hostinit.py (or sshd)."""
    held = []
    for h in hosts:
        if h.netns:
            held.append(procs.hold_namespace(f"{h.name} net", "net", f"/run/netns/{h.netns}"))
        root = h.sshd_init or h.sshd
        if root is not None:
            held.append(procs.hold_process_namespace(f"{h.name} mnt", "mnt", root))
    return [ns for ns in held if ns is not None]


def _end_strays(name: str, ns: procs.HeldNamespace, say: Callable[[str], None]) -> None:
    """Ends what is still in a host's namespace once its recorded trees are ended: a process
    that escaped them (forked after the last scan of a tree, or put there from outside, e.g.
    ``ip netns exec``) -- still this sandbox's, as the namespace is held open, so not reused.
    Said on ``say``: a stray means a tree's teardown missed something worth knowing."""
    strays = procs.members(ns)
    if strays:
        say(f"sandbox {name}: {ns.owner} namespace still held {len(strays)} process(es) outside the "
            f"recorded trees, ending them: {procs.describe(strays)}")  # fmt: skip
        procs.kill_all(strays, 2.0)


def _end_sessions(h: HostState) -> None:
    """The tree below hostinit.py (sshd, its sessions, what they left behind), or below sshd in
    a state file older than the record of hostinit."""
    root = h.sshd_init or h.sshd
    if root is not None:
        procs.end_tree_leaves_first(root, 2.0)


def status(name: str = "default") -> dict[str, Any]:
    """What is up, as plain data (the CLI prints it as a table or JSON)."""
    st = state.load(name)
    if st is None:
        return {"name": name, "up": False, "namespaces": list(netns.namespaces(name))}
    return {
        "name": st.name,
        "up": True,
        "mode": st.mode,
        "dir": st.dir,
        "subnet": str(netns.Slot(index=st.slot).network) if st.slot is not None else None,
        "client_key": st.client_key,
        "known_hosts": st.known_hosts,
        "inventory": st.inventory,
        "image_tags": list(st.image_tags),
        "hosts": [
            {
                "name": h.name,
                "address": h.address,
                "port": h.port,
                "ifname": h.ifname,
                "data_ip": h.data_ip,
                "netns": h.netns,
                "kind": h.kind,
                "sshd": bool(h.sshd and h.sshd.alive()) if h.kind == "docker" else _answers(h),
                "dockerd": bool(h.dockerd and h.dockerd.alive()),
                "docker_socket": h.docker_socket,
            }
            for h in st.hosts
        ],
    }


def _answers(h: HostState) -> bool:
    """Whether the host's sshd sends its banner (a systemd host's sshd is the container's)."""
    try:
        return sshd.banner(h.address, h.port)
    except OSError:
        return False


def loaded(name: str) -> SandboxState:
    st = state.load(name)
    if st is None:
        raise FleetError(f"sandbox {name!r} is not up (run `fleet sandbox up --name {name}`)")
    return st
