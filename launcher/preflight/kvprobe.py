"""Preflight rule family: the KV transport between each prefill and decode host pair.

A PD deployment whose ranks all answer /health can still move no KV: the decode cannot reach
the prefill's side channel, ``UCX_NET_DEVICES`` names an interface the host lacks (NIXL then
cannot create its UCX backend), or -- silently -- UCX finds no usable RDMA device in the
container and moves the KV over TCP, which costs PD its point.  So before anything starts,
preflight runs the transfer library the engine will load, inside the deployment's own image
with the unit's rendered env (``UCX_*``, ``MOONCAKE_*``/``MC_*``), docker flags and host network:

1. on each prefill host a detached probe container registers :data:`PROBE_BYTES` of a known
   pattern and listens on the prefill's side-channel address (``VLLM_NIXL_SIDE_CHANNEL``, or the
   Mooncake bootstrap port; beside it when our own running engine holds it);
2. on each decode host a probe container connects from the host's data IP, reads the buffer
   across (NIXL: ``nixl_agent`` READ over UCX, as vLLM's decode pulls; Mooncake: its
   ``TransferEngine`` in P2P-handshake mode, ``transfer_sync_read``), checks the bytes, and
   reports the transport the library picked (UCX: its own protocol table for remote reads,
   ``UCX_PROTO_INFO``) and the bandwidth of a second, timed read;
3. the probe containers are removed (also on errors, and after a Ctrl-C over new connections:
   a serving one left running would hold the prefill's side-channel port).

Verdicts, one per (prefill host, decode host) pair on the decode's unit: pass (transport and
bandwidth); fail naming both hosts and the library's own message (side channel unreachable, the
backend cannot be created, the read fails or returns other bytes); warn when either host's fabric
is RDMA (inventory) but the transport is TCP; warn when the image has no such library (vLLM's
NIXL is required by the image-programs check already) or is not on the host yet.  The script
is ``hostscripts/kv-probe.py``.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from typing import Callable, Sequence

from launcher import hostscripts, network
from launcher.engines.context import BOOTSTRAP, NIXL_SIDE_CHANNEL
from launcher.execute.fanout import Connector, Ok, cleanup_connector, run_all
from launcher.execute.transport import Transport
from launcher.facts.gather import outcome_reason
from launcher.model import Host, Inventory, Plan, Recipe, Unit
from launcher.preflight.rules.images import PROBE_CONTAINER_PREFIX, rdma_probe_flags
from launcher.preflight.rules.base import Check, Status

PROBE_BYTES = 32 << 20
READY_TIMEOUT_S = 180  # the serving side imports NIXL/Mooncake in a fresh container on a busy host
READ_TIMEOUT_S = 120.0  # each step of the reading side (connect, the reads)
SERVE_LIFE_S = READY_TIMEOUT_S + 2 * READ_TIMEOUT_S + 60  # exits by itself if never cleaned up
ENV_PREFIXES = ("UCX_", "NIXL_", "MC_", "MOONCAKE_")  # what the transfer libraries read
MARK = "fleet-kv-probe "
KILLED = "fleet-kv-probe-killed oom="  # read_script's line about a container that died of a signal
NAME = "kv-transport"
_SCRIPT = hostscripts.text("kv-probe.py")
_LIBRARY = {"nixl": "NIXL", "mooncake": "Mooncake's transfer engine"}
_FIX = {
    "nixl": "check UCX_NET_DEVICES / the data NIC in the inventory and that the side channel is open between the hosts",
    # P2P handshake: each engine listens for the handshake and for TCP transfers on ports it picks at start.
    "mooncake": "check MOONCAKE_PROTOCOL / MOONCAKE_DEVICE and that the prefill host accepts TCP from the decode "
                "host on the bootstrap port and on the ports Mooncake picks at start (handshake, transfers)",
}
_RDMA_TRANSPORTS = ("rc", "ud", "dc", "ib", "roce", "rdma", "gga", "srd")
Note = Callable[[str], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Pair:
    backend: str  # nixl / mooncake
    prefill: Unit
    decode: Unit
    ip: str  # the prefill host's data IP
    port: int  # its side channel (0: any free port)
    src: str  # the decode host's data IP


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What one read across said: ``transport`` and figures, or ``error``."""

    transport: str = ""
    how: str = ""
    seconds: float = 0.0
    bytes: int = 0
    error: str = ""
    missing: bool = False  # the image has no such library
    no_image: bool = False  # the image is not on the host yet
    killed: bool = False  # the probe died of a signal before it said anything


def pairs(plan: Plan, inventory: Inventory, recipe: Recipe) -> tuple[Pair, ...]:
    """Every (prefill unit, decode unit) on two different hosts of a NIXL or Mooncake PD plan,
    one per host pair (the first units found), containerised units only (the probe runs the
    unit's image)."""
    backend = recipe.pd.transfer_backend if recipe.pd is not None else None
    if backend not in _LIBRARY:
        return ()
    prefill = [u for u in plan.units if u.role == "prefill" and u.container is not None]
    decode = [u for u in plan.units if u.role == "decode" and u.container is not None]
    out: dict[tuple[str, str], Pair] = {}
    for p in prefill:
        for d in decode:
            if p.host != d.host and (p.host, d.host) not in out:
                port = p.ports.get(NIXL_SIDE_CHANNEL) or p.ports.get(BOOTSTRAP) or 0
                out[(p.host, d.host)] = Pair(
                    backend=str(backend), prefill=p, decode=d, ip=network.data_ip(inventory.host(p.host)), port=port,
                    src=network.data_ip(inventory.host(d.host)),
                )  # fmt: skip
    return tuple(out.values())


def _container(unit: Unit, role: str) -> str:
    return f"{PROBE_CONTAINER_PREFIX}kv-{role}-{unit.name}"


def _docker_run(unit: Unit, role: str, args: Sequence[str], *, detach: bool) -> tuple[str, ...]:
    """The probe container's ``docker run`` (never ``--rm``: a reading side that died is
    inspected before its script removes it)."""
    c = unit.container
    assert c is not None
    env = [x for k, v in sorted(unit.env.items()) if k.startswith(ENV_PREFIXES) for x in ("-e", f"{k}={v}")]
    flags = rdma_probe_flags(unit)[:-1]  # the rendered devices/caps/ulimits and the playbook's docker args
    return ("docker", "run", *(("-d",) if detach else ()), "--name", _container(unit, role), "--network", "host",
            *env, *flags, "--entrypoint", "python3", c.image, "-c", _SCRIPT, role, *args)  # fmt: skip


def _image_guard(unit: Unit) -> str:
    assert unit.container is not None
    return (f"docker rm -f {shlex.quote(_container(unit, 'serve'))} {shlex.quote(_container(unit, 'read'))} "
            f">/dev/null 2>&1; if ! docker image inspect {shlex.quote(unit.container.image)} >/dev/null 2>&1; then "
            f"echo 'fleet: image not present'; exit 3; fi; ")  # fmt: skip


def serve_script(pair: Pair, clients: int) -> str:
    """On the prefill host: start the serving container, wait until it printed its first line
    (listening, or why not), print its log."""
    name = shlex.quote(_container(pair.prefill, "serve"))
    run = shlex.join(_docker_run(pair.prefill, "serve", (pair.backend, pair.ip, str(pair.port), str(PROBE_BYTES),
                                                          f"{SERVE_LIFE_S:g}", str(clients)), detach=True))  # fmt: skip
    return (_image_guard(pair.prefill) + f"{run} >/dev/null || exit 4; i=0; while [ $i -lt {READY_TIMEOUT_S} ]; do "
            f"out=$(docker logs {name} 2>&1); case $out in *'{MARK}'*) printf '%s\\n' \"$out\"; exit 0;; esac; "
            f"sleep 1; i=$((i+1)); done; echo 'fleet: the probe printed nothing within {READY_TIMEOUT_S}s'; exit 124")  # fmt: skip


def read_script(pair: Pair, port: int) -> str:
    """On the decode host: read across from the serving container on ``port``; a container that
    died of a signal (exit status above 128) is inspected first -- whether the kernel's OOM
    killer ended it -- then removed, and the script exits with the container's status."""
    name = shlex.quote(_container(pair.decode, "read"))
    run = shlex.join(_docker_run(pair.decode, "read", (pair.backend, pair.ip, str(port), pair.src,
                                                       f"{READ_TIMEOUT_S:g}"), detach=False))  # fmt: skip
    return (_image_guard(pair.decode) + f"{run}; rc=$?; if [ $rc -gt 128 ]; then docker inspect -f "
            f"'{KILLED}{{{{.State.OOMKilled}}}}' {name} 2>/dev/null; fi; docker rm -f {name} >/dev/null 2>&1; exit $rc")


def cleanup_script(units: Sequence[Unit]) -> str:
    names = " ".join(shlex.quote(_container(u, r)) for u in units for r in ("serve", "read"))
    return f"docker rm -f {names} >/dev/null 2>&1; true"


def parse(rc: int, text: str) -> Outcome:
    """A probe's output (either side) as an :class:`Outcome`; a serving side's ``listening``
    line becomes ``bytes`` = the port."""
    docs = []
    for line in text.splitlines():
        if line.startswith(MARK):
            try:
                doc = json.loads(line[len(MARK):])
            except ValueError:
                continue
            if isinstance(doc, dict):
                docs.append(doc)
    if not docs:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if rc == 3 and "fleet: image not present" in lines:
            return Outcome(no_image=True, error="the image is not on the host yet")
        if rc > 128:
            oom = " (OOM-killed: the host is out of memory)" if f"{KILLED}true" in lines else ""
            return Outcome(killed=True, error=f"the probe container was killed by signal {rc - 128}{oom}")
        shown = (lines[-1] if lines else f"exited {rc}").removeprefix("docker: ").removeprefix("Error response from daemon: ")
        return Outcome(error=f"the probe container failed: {shown}")
    doc = docs[-1]
    if "error" in doc:
        return Outcome(error=str(doc["error"]), missing=bool(doc.get("missing")))
    if "listening" in doc:
        return Outcome(bytes=int(doc["listening"]))
    return Outcome(transport=str(doc.get("transport", "")), how=str(doc.get("how", "")),
                   seconds=float(doc.get("seconds", 0.0)), bytes=int(doc.get("bytes", 0)))  # fmt: skip


def _tcp_only(transport: str) -> bool:
    lanes = [t.strip().split("/", 1)[0].lower() for t in transport.split(",") if t.strip()]
    return bool(lanes) and not any(lane.startswith(_RDMA_TRANSPORTS) for lane in lanes)


def verdict(pair: Pair, got: Outcome, inventory: Inventory) -> Check:
    """The check for one pair (see the module docstring)."""
    p, d = pair.prefill.host, pair.decode.host
    where = f"{_LIBRARY[pair.backend]} from prefill {p} ({pair.ip}) to decode {d}"

    def check(status: Status, message: str, fix: str = "") -> Check:
        return Check(host=d, unit=pair.decode.name, name=NAME, status=status, message=message, fix=fix)

    if got.missing or got.no_image:
        return not_probed(pair, got, pair.decode)
    if got.error:
        return check("fail", f"{where}: {got.error}", _FIX[pair.backend])
    rate = got.bytes / got.seconds / 2**20 if got.seconds > 0 else 0.0
    how = f" ({got.how})" if got.how else ""
    message = f"{where}: read {got.bytes / 2**20:g} MiB over {got.transport}{how} in {got.seconds:.3f}s ({rate:.1f} MiB/s)"
    rdma = [h for h in (p, d) if inventory.host(h).spec.fabric != "none"]
    if rdma and _tcp_only(got.transport):
        return check("warn", f"{message}, but the fabric of {', '.join(rdma)} is RDMA: the KV would move over TCP",
                     "check the HCAs the container sees and UCX_TLS")  # fmt: skip
    return check("pass", message)


def not_probed(pair: Pair, got: Outcome, unit: Unit | None = None) -> Check:
    """A warning on ``unit`` (the prefill's by default): its image lacks the library or is not
    on its host yet (no host names in the message: one line for many hosts)."""
    u = unit or pair.prefill
    assert u.container is not None
    why = got.error if got.no_image else f"the image has no {pair.backend} ({got.error.rsplit(': ', 1)[-1]})"
    return Check(host=u.host, unit=u.name, name=NAME, status="warn",
                 message=f"{_LIBRARY[pair.backend]} not probed in {u.container.image}: {why}")  # fmt: skip


def probe(plan: Plan, inventory: Inventory, recipe: Recipe, connector: Connector, forks: int,
          usable: Callable[[str], bool], note: Note) -> tuple[Check, ...]:
    """Runs the probe for every pair whose two hosts are ``usable`` (answered the probe round)
    and returns their checks; the serving containers are removed before it returns."""
    todo = [pr for pr in pairs(plan, inventory, recipe) if usable(pr.prefill.host) and usable(pr.decode.host)]
    if not todo:
        return ()
    hosts = {h.name: h for h in inventory.hosts}
    servers: dict[str, Pair] = {}
    clients: dict[str, int] = {}
    for pr in todo:
        servers.setdefault(pr.prefill.host, pr)
        clients[pr.prefill.host] = clients.get(pr.prefill.host, 0) + 2  # each read may be taken twice (killed)
    note(f"preflight: KV transport ({', '.join(sorted({_LIBRARY[p.backend] for p in todo}))}) between "
         f"{len(todo)} prefill/decode host pair(s)")  # fmt: skip
    found: dict[tuple[str, str], Check] = {}
    interrupted = False
    try:
        def serve(host: Host, t: Transport) -> Outcome:
            res = t.run(("sh", "-c", serve_script(servers[host.name], clients[host.name])), timeout=READY_TIMEOUT_S + 60)
            return parse(res.exit_status, res.stdout_text + res.stderr_text)

        ready: dict[str, int] = {}  # prefill host -> the port its probe listens on
        for o in run_all([hosts[h] for h in servers], serve, connector=connector, forks=forks).outcomes:
            got = o.value if isinstance(o, Ok) else Outcome(error=outcome_reason(o))
            if got.missing or got.no_image:  # the same for every pair of this prefill: one line
                found[(o.host.name, "")] = not_probed(servers[o.host.name], got)
            elif got.error:
                got = dataclasses.replace(got, error=f"on the prefill host: {got.error}")
                found.update({(pr.prefill.host, pr.decode.host): verdict(pr, got, inventory) for pr in todo
                              if pr.prefill.host == o.host.name})  # fmt: skip
            else:
                ready[o.host.name] = got.bytes
        jobs: dict[str, list[Pair]] = {}
        for pr in todo:
            if pr.prefill.host in ready:
                jobs.setdefault(pr.decode.host, []).append(pr)

        def read(host: Host, t: Transport) -> list[Outcome]:
            got = []
            for pr in jobs[host.name]:  # one at a time: each reads the whole buffer
                for attempt in (1, 2):
                    res = t.run(("sh", "-c", read_script(pr, ready[pr.prefill.host])), timeout=3 * READ_TIMEOUT_S + 60)
                    out = parse(res.exit_status, res.stdout_text + res.stderr_text)
                    # A probe killed from outside says nothing of the KV path: probe once more
                    # (twice killed: the error names the signal, and OOM if that was it).
                    if not out.killed or attempt == 2:
                        break
                    note(f"preflight: {host.name}: {out.error} before it read from {pr.prefill.host}; probing again")
                got.append(out)
            return got

        if jobs:
            for r in run_all([hosts[h] for h in jobs], read, connector=connector, forks=forks).outcomes:
                mine = jobs[r.host.name]
                got_all = r.value if isinstance(r, Ok) else [Outcome(error=outcome_reason(r))] * len(mine)
                found.update({(pr.prefill.host, pr.decode.host): verdict(pr, got, inventory)
                              for pr, got in zip(mine, got_all)})  # fmt: skip
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        used: dict[str, list[Unit]] = {}
        for pr in todo:
            used.setdefault(pr.prefill.host, []).append(pr.prefill)
            used.setdefault(pr.decode.host, []).append(pr.decode)
        # A serving container left running would hold the prefill's side-channel port for
        # SERVE_LIFE_S: after a Ctrl-C (it closed the connections) it is removed over new ones.
        with cleanup_connector(connector, interrupted) as via:
            run_all([hosts[h] for h in used], lambda h, t: t.run(("sh", "-c", cleanup_script(used[h.name])),
                                                                  timeout=READ_TIMEOUT_S), connector=via,
                    forks=forks)  # fmt: skip
    keys = [k for pr in todo for k in ((pr.prefill.host, ""), (pr.prefill.host, pr.decode.host))]
    return tuple(found[k] for k in dict.fromkeys(keys) if k in found)
