"""Preflight: catch before launch what engines otherwise fail on silently.

Pure: :func:`evaluate` takes a plan, the inventory, the recipe, each host's :class:`HostFacts`
and the results of the remote probes (:class:`ProbeResults`), runs the rules
(:mod:`launcher.preflight.rules`, one family per module) and returns one :class:`Check` per
(unit or host, rule).  The probes are scripts assembled here from the families' sections
(:func:`host_probe_script`; the reachability probe's :func:`listener_argv`, :func:`client_argv`,
:func:`cleanup_argv`) with parsers for what they print; :mod:`launcher.preflight.run` runs
them, so this module never does I/O.

Why each rule exists (operator-pain-points.md): HCAs missing or down make NCCL fall back to TCP
without a word; the RoCE v2 GID index differs per host; NCCL/Gloo bind the wrong NIC when the
data IP is not on the named interface; mismatched MTUs stall RDMA; weights missing on one rank
show up only after rank 0 has loaded for ten minutes; a rank that cannot reach rank 0's
dist-init port hangs in rendezvous until the engine's own timeout.

Probes and what the hosts need (documented in ``fleet preflight --help`` too):
- ``sh``, ``ss`` (iproute2; ``netstat`` as fallback), ``du``, ``find``, ``docker`` where units
  run in containers, and ``python3`` (standard library only) for the reachability probes.
  A host without python3 gets a warning and no reachability verdict, never a false pass.
- Reachability: nothing listens on rank 0's dist-init / bootstrap / master ports before launch,
  so rank 0's host starts a short-lived listener (``python3``, detached, bound to its data IP,
  killed right after the round; it exits on its own after :data:`LISTENER_LIFE_S` anyway), then
  every other rank connects with its source address bound to its own data IP, with a timeout.
  A port our own running unit already holds is connected to as it is.
- /dev/infiniband inside the image: a real ``docker run --rm --network none --entrypoint ls``
  of the unit's image with the rendered ``--device``/``--cap-add``/``--ulimit`` flags and the
  playbook's raw docker args (nothing is pulled: an image not on the host yet is a warning).
  Verdict: visible → pass; not visible while the plan renders ``--device /dev/infiniband`` →
  fail (driver, device nodes or docker are broken); not visible because the playbook drops
  ``--device`` (``overrides.drop_docker_flags``, as the sandbox playbooks do) → warn, every
  time: RDMA is off by the operator's choice and NCCL/Mooncake run over TCP.
- Programs inside the images: every program a host's units run (``--entrypoint`` ``argv[0]``, or
  the package of ``python3 -m MODULE``) is looked up in its image on that host, one ``docker run
  --rm --network none --entrypoint sh`` per image per host (``hostscripts/image-programs.sh``),
  beside the other probe sections: a router or Mooncake master whose image lacks its program
  (they run from the engine image unless the recipe's or playbook's ``images`` say otherwise)
  fails preflight, naming host, image and program, instead of crash-looping after ``up``.  An
  image not on the host yet is a warning, as above.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

from launcher import hostscripts, network
from launcher.engines.context import BOOTSTRAP, DIST_INIT, MASTER_PORT, NIXL_SIDE_CHANNEL, RAY
from launcher.model import Host, Inventory, Plan, Playbook, Recipe, Unit
from launcher.weights.needs import weight_needs
from launcher.facts.host import HostFacts, sections_script, split_sections
from launcher.preflight import rules
from launcher.preflight.rules.base import (
    Check, HostCase, ImageProbe, Level, PathProbe, PlanCase, ProbeResults, ProgramsProbe, ReachTarget, check_line,
    needs_of, recipe_needs,
)  # fmt: skip
from launcher.preflight.rules import images as image_rules, ports, weights
from launcher.preflight.rules.images import ImagePrograms, device_dropped, programs_of, rdma_container, rdma_probe_flags


CONNECT_TIMEOUT_S = 3.0
LISTENER_LIFE_S = 60.0  # a listener left behind by a killed preflight exits by itself
LISTENER_MARK = "fleet-preflight-listener"
NETWORK_ENV_PREFIXES = ("NCCL_", "GLOO_", "UCX_", "MC_", "MOONCAKE_", "HCCL_", "TP_SOCKET", "SGLANG_HOST_IP")
_PLACEHOLDER = re.compile(r"\b(PLAYBOOK|INVENTORY)\b")


def with_paths(found: Sequence[Check], playbook_path: str, inventory_path: str) -> tuple[Check, ...]:
    """``found`` with its fix hints' ``PLAYBOOK`` and ``INVENTORY`` placeholders replaced by the
    files this run read (shell-quoted), so a hint is a command the operator can paste."""
    paths = {"PLAYBOOK": shlex.quote(playbook_path), "INVENTORY": shlex.quote(inventory_path)}
    return tuple(replace(c, fix=_PLACEHOLDER.sub(lambda m: paths[m.group(1)], c.fix)) if c.fix else c for c in found)


MERGED_SHOWN = 8  # places named in one merged line; the rest are counted


def merged_lines(found: Iterable[Check]) -> list[str]:
    """One line per distinct problem: checks identical but for where they ran (the same status,
    check, message and fix on six hosts) are one line naming every place, in first-seen order
    (past :data:`MERGED_SHOWN`, the rest are counted)."""
    places: dict[tuple[str, str, str, str], list[str]] = {}
    for c in found:
        places.setdefault((c.status, c.name, c.message, c.fix), []).append(f"{c.host}/{c.unit}" if c.unit else c.host)
    out = []
    for (status, name, message, fix), where in places.items():
        shown = ", ".join(where[:MERGED_SHOWN]) + (f" and {len(where) - MERGED_SHOWN} more" if len(where) > MERGED_SHOWN else "")
        out.append(check_line(status, shown, name, message, fix))
    return out


# ---------------------------------------------------------------------------------------------
# What each unit needs probed (pure, from the plan)
# ---------------------------------------------------------------------------------------------


def probe_paths(plan: Plan, inventory: Inventory, recipe: Recipe) -> dict[str, tuple[str, ...]]:
    """Per host, every path the weight checks look at."""
    out: dict[str, set[str]] = {}
    for u in plan.units:
        for need in weight_needs(u, inventory.host(u.host), recipe):
            for p in (need.local, need.staged, need.hf_cache):
                if p:
                    out.setdefault(u.host, set()).add(p)
    return {h: tuple(sorted(ps)) for h, ps in out.items()}


def image_units(plan: Plan, inventory: Inventory) -> tuple[Unit, ...]:
    """Units whose image gets the /dev/infiniband probe (a ``docker run`` on the host):
    containerised data-plane ranks on hosts with an RDMA fabric whose flags pass the device (one
    per host and image/flags)."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    out = []
    for u in plan.units:
        if not rdma_container(u, inventory) or device_dropped(u):
            continue
        key = (u.host, rdma_probe_flags(u))
        if key not in seen:
            seen.add(key)
            out.append(u)
    return tuple(out)


def image_programs(plan: Plan) -> dict[str, ImagePrograms]:
    """host -> the images its containerised units run and the programs each must provide (one
    probe per image per host)."""
    found: dict[str, dict[str, set[str]]] = {}
    for u in plan.units:
        if u.container is not None and u.argv:
            found.setdefault(u.host, {}).setdefault(u.container.image, set()).update(programs_of(u))
    return {h: tuple((i, tuple(sorted(p))) for i, p in sorted(imgs.items())) for h, imgs in found.items()}


def _leader_ports(unit: Unit) -> list[tuple[str, int]]:
    out = []
    for name, label in ((DIST_INIT, "dist-init"), (MASTER_PORT, "master-port"), (RAY, "ray")):
        if name in unit.ports and unit.nnodes > 1:
            out.append((label, unit.ports[name]))
    return out


def reach_targets(plan: Plan, inventory: Inventory) -> tuple[ReachTarget, ...]:
    """Every (listener, port, clients) the ranks need before launch: each group's rank 0
    dist-init (SGLang) / master port (vLLM mp) / Ray head from its other ranks; every PD prefill
    leader's bootstrap port (and vLLM's NIXL side channel) from the other prefill ranks of its
    instance and every decode rank; the Mooncake master from every engine rank using it."""

    def ip(host: str) -> str:
        return network.data_ip(inventory.host(host))

    by_group: dict[str, list[Unit]] = {}
    for u in plan.units:
        by_group.setdefault(u.group, []).append(u)
    decode = [u for u in plan.units if u.role == "decode"]
    engines = [u for u in plan.units if u.role in ("single", "rank", "prefill", "decode")]
    out: list[ReachTarget] = []

    position = {h.name: i for i, h in enumerate(inventory.hosts)}

    def add(label: str, leader: Unit, port: int, clients: Iterable[Unit]) -> None:
        seen: dict[str, tuple[str, str, str]] = {}
        for c in clients:
            if c.host != leader.host and c.host not in seen:
                seen[c.host] = (c.host, c.name, ip(c.host))
        if seen:
            ordered = tuple(sorted(seen.values(), key=lambda c: position[c[0]]))
            out.append(ReachTarget(label=label, group=leader.group, unit=leader.name, host=leader.host,
                                   ip=ip(leader.host), port=port, clients=ordered))

    for group, members in by_group.items():
        leader = min(members, key=lambda u: u.rank)
        for label, port in _leader_ports(leader):
            add(label, leader, port, [m for m in members if m.rank > 0])
        if leader.role == "prefill":
            for name, label in ((BOOTSTRAP, "bootstrap"), (NIXL_SIDE_CHANNEL, "nixl-side-channel")):
                if name in leader.ports:
                    add(label, leader, leader.ports[name], [m for m in members if m.rank > 0] + decode)
    for master in (u for u in plan.units if u.role == "mooncake-master"):
        for name in ("mooncake_master", "mooncake_metadata"):
            if name in master.ports:
                add(name.replace("_", "-"), master, master.ports[name], engines)
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Probe scripts and parsers
# ---------------------------------------------------------------------------------------------


def host_probe_script(paths: Sequence[str], images: Sequence[Unit] = (), level: Level = "cheap",
                      programs: ImagePrograms = (), deployment: str = "") -> str:
    """One shell script per host, of the sections its rule families read (each family's
    ``probe_sections``, parsed back by its ``parse_probe``): listening ports and our running
    units (:mod:`launcher.preflight.rules.ports`), each path's size, file count, fleet.sha256 and
    fleet-weights.json verdicts (:mod:`launcher.preflight.rules.weights`), the /dev/infiniband probe per image unit
    and the programs each image of ``programs`` lacks (:mod:`launcher.preflight.rules.images`)."""
    return sections_script([*ports.probe_sections(), *weights.probe_sections(paths, level),
                            *image_rules.probe_sections(images, programs, deployment)])


@dataclass(frozen=True, slots=True, kw_only=True)
class HostProbe:
    listening: frozenset[int]
    running: frozenset[str]
    paths: Mapping[str, PathProbe]
    images: Mapping[str, ImageProbe]  # unit name -> verdict
    programs: Mapping[str, ProgramsProbe] = field(default_factory=dict)  # image -> verdict


def parse_host_probe(text: str, paths: Sequence[str], level: Level = "cheap", programs: ImagePrograms = ()) -> HostProbe:
    s = split_sections(text)
    listening, running = ports.parse_probe(s)
    found_images, found_programs = image_rules.parse_probe(s, programs)
    return HostProbe(listening=listening, running=running, paths=weights.parse_probe(s, paths, level),
                     images=found_images, programs=found_programs)


# Reachability: a detached listener on the leader's host and a client per other host.  Both are
# python3 with the standard library only; argv carries the data, the code is fixed.

_LISTENER = hostscripts.text("reach-listener.py")
_CLIENT = hostscripts.text("reach-client.py")


def listener_argv(targets: Sequence[ReachTarget], life_s: float = LISTENER_LIFE_S) -> tuple[str, ...]:
    spec = json.dumps([[t.ip, t.port] for t in targets])
    return ("python3", "-c", _LISTENER, LISTENER_MARK, spec, f"{life_s:g}")


def _last_json(text: str, who: str) -> dict[str, object]:
    """The JSON object on the last line a reachability script printed (ValueError otherwise)."""
    try:
        doc = json.loads(text.strip().splitlines()[-1]) if text.strip() else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise ValueError(f"{who} printed {text.strip()[:200]!r}")
    return doc


def parse_listener(text: str) -> tuple[int | None, dict[str, str]]:
    """(pid of the detached listener or None, ``ip:port`` -> bind error)."""
    doc = _last_json(text, "listener")
    pid = doc.get("pid")
    errors = doc.get("errors")
    return (pid if isinstance(pid, int) else None), ({str(k): str(v) for k, v in errors.items()}
                                                     if isinstance(errors, dict) else {})  # fmt: skip


def client_argv(jobs: Sequence[tuple[str, str, int]], timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[str, ...]:
    """``jobs``: (source IP, destination IP, port)."""
    return ("python3", "-c", _CLIENT, "fleet-preflight-client",
            json.dumps([[src, dst, port, timeout_s] for src, dst, port in jobs]))


def parse_client(text: str) -> dict[str, str | None]:
    """``dst_ip:port`` -> None (connected) or why not."""
    return {str(k): (None if v is None else str(v)) for k, v in _last_json(text, "client").items()}


def cleanup_argv(pid: int) -> tuple[str, ...]:
    """Ends our listener ``pid`` only while that pid still runs our listener (pids are reused),
    and returns once it is gone: its ports are then free for the units ``up`` starts next (a
    loaded host was seen still running it after a bare ``kill`` returned).  SIGTERM, up to 5 s,
    then SIGKILL, up to 5 s more; a zombie has no command line, so it counts as gone."""
    script = (f"p=$1; ours() {{ tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q {LISTENER_MARK}; }}; "
              "gone() { i=0; while ours && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; ! ours; }; "
              "if ours; then kill \"$p\" 2>/dev/null; gone || { kill -9 \"$p\" 2>/dev/null; gone; }; fi; true")
    return ("sh", "-c", script, "fleet-preflight-cleanup", str(pid))


# ---------------------------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------------------------


def evaluate(plan: Plan, inventory: Inventory, recipe: Recipe, facts: Mapping[str, HostFacts],
             probes: ProbeResults | None = None, unreachable: Mapping[str, str] | None = None) -> tuple[Check, ...]:
    """All checks (:mod:`launcher.preflight.rules`): host by host in inventory order, then
    groups, then probes."""
    by_host: dict[str, list[Unit]] = {}
    for u in plan.units:
        by_host.setdefault(u.host, []).append(u)
    unreachable = unreachable or {}
    out: list[Check] = []
    for host in inventory.hosts:
        if host.name in by_host:
            units = tuple(by_host[host.name])
            case = HostCase(host=host, units=units, needs=needs_of(units), recipe=recipe, facts=facts.get(host.name),
                            unreachable=unreachable.get(host.name))  # fmt: skip
            out.extend(c for rule in rules.HOST for c in rule(case))
    whole = PlanCase(plan=plan, inventory=inventory, recipe=recipe, facts=facts, probes=probes)
    out.extend(c for rule in rules.PLAN for c in rule(whole))
    if probes is not None:
        out.extend(c for rule in rules.PROBE for c in rule(whole))
    return tuple(out)


def evaluate_hosts(hosts: Sequence[Host], recipe: Recipe, facts: Mapping[str, HostFacts],
                   unreachable: Mapping[str, str] | None = None, playbook: Playbook | None = None) -> tuple[Check, ...]:
    """Host checks from the recipe alone, for when the plan itself cannot be made (it names the
    hosts that would have run units, so a missing HCA is still reported as such)."""
    unreachable = unreachable or {}
    out: list[Check] = []
    for host in hosts:
        case = HostCase(host=host, units=(), needs=recipe_needs(recipe, host, playbook), recipe=recipe,
                        facts=facts.get(host.name), unreachable=unreachable.get(host.name))  # fmt: skip
        out.extend(c for rule in rules.HOST for c in rule(case))
    return tuple(out)


def failed(checks: Iterable[Check]) -> tuple[Check, ...]:
    return tuple(c for c in checks if c.status == "fail")


def network_env(unit: Unit) -> dict[str, str]:
    """The unit's per-host network env (what preflight compared with the facts)."""
    return {k: v for k, v in sorted(unit.env.items()) if k.startswith(NETWORK_ENV_PREFIXES)}
