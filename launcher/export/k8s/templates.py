"""Fold the planned units of one pod template into that template (pure).

A pod template stands for several planned units: every instance of a role, and for LWS workers
every rank > 0.  fleet's plan names hosts by address; Kubernetes does not know them.  So each
unit's argv, env and files are rewritten, and the units of one template must then agree:

- the instance's leader IP (wherever the argv or env names it) becomes ``$(LWS_LEADER_ADDRESS)``
  and the value of the engine's node-rank flag (``Engine.rank_flags``) ``$(LWS_WORKER_INDEX)``
  (LWS injects both);
- ``IP:PORT`` of a unit that gets a Service (router, Mooncake master) becomes ``<service>:PORT``;
- an env value equal to the unit's own data IP becomes the pod IP (``status.podIP``: the node's IP
  under hostNetwork);
- env keys whose values differ between the hosts (the RoCE GID index, the data NIC) are derived on
  the node by an init container (:mod:`launcher.export.k8s.net_env`), as ``gid_index: auto`` does;
- the engine's device selection (``Engine.visible_devices_env``, set on native units) is dropped:
  the device plugin assigns devices;
- instances fleet put side by side on one host on distinct ports take the first instance's ports
  (:func:`same_ports`).

Anything else that differs, or any inventory address left after the rewrite, is an
:class:`ExportError` naming the unit: a template never silently picks one host's value.
Literal ``$(`` in fleet's values is escaped as ``$$(`` so Kubernetes does not expand it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from launcher.engines import flags
from launcher.engines.base import Engine
from launcher.errors import FleetError, ExitCode
from launcher.export.k8s.pools import GID_KEYS, IFNAME_KEYS, NodeFacts
from launcher.model import Unit

LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
POD_IP = "status.podIP"


class ExportError(FleetError):
    """The plan cannot be expressed as Kubernetes objects (one line: what and why)."""

    exit_code = ExitCode.BAD_INPUT


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvVar:
    """One env entry: a literal ``value``, or ``field`` (a downward-API fieldPath), or ``secret``
    (a key of the deployment's Secret).  Derived keys are not listed here."""

    name: str
    value: str | None = None
    field: str | None = None
    secret: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Template:
    """What one pod template runs: the units it stands for (first = the model for everything that
    is not host-specific), the rewritten argv, env and derived env keys."""

    units: tuple[Unit, ...]
    argv: tuple[str, ...]
    env: tuple[EnvVar, ...]
    derived: tuple[str, ...]  # env keys written by the init container
    hcas: tuple[str, ...]  # RDMA devices the derivation looks at

    @property
    def first(self) -> Unit:
        return self.units[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class Addresses:
    """The plan's host addresses and what replaces them."""

    data_ip: Mapping[str, str]  # host -> its data IP
    known: frozenset[str]  # every inventory address and data IP of the plan's hosts
    services: Mapping[str, str]  # "IP:PORT" -> "SERVICE:PORT"


def _ip(ip: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.]){re.escape(ip)}(?![\w])")


def rewrite(value: str, addresses: Addresses, leader_ip: str | None, *, escape: bool = True) -> str:
    """``value`` with service addresses, then the leader's IP, replaced; ``$(`` escaped first
    unless ``escape`` is false (file content: Kubernetes expands only argv and env)."""
    out = value.replace("$(", "$$(") if escape else value
    for ip_port, service in addresses.services.items():
        out = re.sub(rf"(?<![\w.]){re.escape(ip_port)}(?!\d)", service, out)
    if leader_ip is not None:
        out = _ip(leader_ip).sub(LEADER_ADDRESS, out)
    return out


def _check_no_address(what: str, value: str, addresses: Addresses) -> None:
    for ip in sorted(addresses.known):
        if _ip(ip).search(value):
            raise ExportError(f"{what}: {value!r} names host address {ip}, which has no Kubernetes equivalent here")


def unit_argv(u: Unit, addresses: Addresses, leader_ip: str | None, engine: Engine) -> tuple[str, ...]:
    """The unit's argv with the rank and addresses replaced."""
    out = [rewrite(a, addresses, leader_ip) for a in u.argv]
    if u.nnodes > 1:
        for i, a in enumerate(out[:-1]):
            if a in engine.rank_flags:
                out[i + 1] = WORKER_INDEX
    for a in out:
        _check_no_address(f"unit {u.name} argv", a, addresses)
    return tuple(out)


def fold(
    units: Sequence[Unit], addresses: Addresses, leaders: Mapping[str, str | None], nodes: Mapping[str, NodeFacts],
    secret_keys: Iterable[str], engine: Engine,
) -> Template:  # fmt: skip
    """One template for ``units`` (``leaders``: group -> leader data IP, None for single-node
    groups; ``nodes``: host -> facts; ``engine``: the deployment's, whose device-selection env
    is dropped)."""
    assert units
    argvs = [unit_argv(u, addresses, leaders[u.group], engine) for u in units]
    for u, a in zip(units[1:], argvs[1:]):
        if a != argvs[0]:
            diff = next((x, y) for x, y in zip(argvs[0] + ("",) * len(a), a + ("",) * len(argvs[0])) if x != y)
            raise ExportError(
                f"units {units[0].name} and {u.name} share a pod template but their argv differ "
                f"({diff[0]!r} vs {diff[1]!r})"
            )
    forced = frozenset().union(*(nodes[u.host].derive for u in units))
    env: list[EnvVar] = []
    derived: list[str] = []
    keys = sorted(set().union(*(u.env.keys() for u in units)) - {engine.visible_devices_env})
    for key in keys:
        values = [u.env.get(key) for u in units]
        if key in forced and (key in GID_KEYS or key in IFNAME_KEYS):
            derived.append(key)
            continue
        if all(v is not None and v == addresses.data_ip[u.host] for u, v in zip(units, values)):
            env.append(EnvVar(name=key, field=POD_IP))
            continue
        shown = [rewrite(v, addresses, leaders[u.group]) if v is not None else None for u, v in zip(units, values)]
        if len(set(shown)) == 1 and shown[0] is not None:
            _check_no_address(f"unit {units[0].name} env {key}", shown[0], addresses)
            env.append(EnvVar(name=key, value=shown[0]))
        elif key in GID_KEYS or key in IFNAME_KEYS:
            derived.append(key)
        else:
            odd = next(u for u, v in zip(units, shown) if v != shown[0])
            raise ExportError(
                f"env {key} differs between {units[0].name} ({values[0]!r}) and {odd.name} "
                f"({odd.env.get(key)!r}) on one pod template, and is not a value fleet can derive on the node"
            )
    for name in secret_keys:
        env.append(EnvVar(name=name, secret=name))
    hcas = _hcas(units, engine)
    if derived and any(k in GID_KEYS for k in derived) and not hcas:
        raise ExportError(f"unit {units[0].name}: {derived[0]} must be derived on the node but no HCAs are known")
    return Template(units=tuple(units), argv=argvs[0], env=tuple(env), derived=tuple(derived), hcas=hcas)


def _hcas(units: Sequence[Unit], engine: Engine) -> tuple[str, ...]:
    """The HCAs the units name (NCCL_IB_HCA ``=mlx5_0:1,...``, MOONCAKE_DEVICE, UCX_NET_DEVICES,
    the engine's ``ib_device_flags``), the first unit's (they agree: the env fold checked)."""
    u = units[0]
    for key in ("NCCL_IB_HCA", "UCX_NET_DEVICES", "MOONCAKE_DEVICE"):
        value = u.env.get(key)
        if value:
            return tuple(h.split(":")[0] for h in value.lstrip("=").split(","))
    ib = flags.value(u.argv, engine.ib_device_flags)
    return tuple(ib.split(",")) if ib else ()


def fold_file(name: str, contents: Sequence[tuple[str, str]], addresses: Addresses) -> str:
    """One file's content for a template (``contents``: unit name, content per unit): rewritten,
    and the same for every unit."""
    shown = [(n, rewrite(c, addresses, None, escape=False)) for n, c in contents]
    for n, c in shown[1:]:
        if c != shown[0][1]:
            raise ExportError(f"file {name} differs between {shown[0][0]} and {n} on one pod template")
    _check_no_address(f"file {name}", shown[0][1], addresses)
    return shown[0][1]


def same_ports(group: Sequence[Unit], ports: Mapping[str, int]) -> list[Unit]:
    """The units of one instance moved onto ``ports`` (by port name; the first instance's): fleet
    gives instances that share a host distinct ports, a pod template has one.  A port is replaced
    where it is a flag's value, the port of an ``ADDRESS:PORT`` value, or a whole env value."""
    leader = next(u for u in group if u.rank == 0)
    moved = {str(old): str(ports[name]) for name, old in leader.ports.items() if name in ports and ports[name] != old}
    if not moved:
        return list(group)

    def port(value: str) -> str:
        head, sep, tail = value.rpartition(":")
        return f"{head}:{moved[tail]}" if sep and tail in moved else moved.get(value, value)

    out = []
    for u in group:
        argv = [port(a) if i > 0 and u.argv[i - 1].startswith("-") else a for i, a in enumerate(u.argv)]
        env = {k: moved.get(v, v) for k, v in u.env.items()}
        own = {k: ports[k] if k in ports else v for k, v in u.ports.items()}
        out.append(dataclasses.replace(u, argv=tuple(argv), env=env, ports=own))
    return out
