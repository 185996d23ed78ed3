"""Preflight: catch before launch what engines otherwise fail on silently.

Pure: :func:`evaluate` takes a plan, the inventory, the recipe, each host's :class:`HostFacts`
and the results of the remote probes (:class:`ProbeResults`), and returns one :class:`Check` per
(unit or host, rule).  The probes themselves are argv lists built here (:func:`probe_argv`) and run
by the executor, so this module never does I/O.

Why each rule exists (operator-pain-points.md): HCAs missing or down make NCCL fall back to TCP
without a word; the RoCE v2 GID index differs per host; NCCL/Gloo bind the wrong NIC when the
data IP is not on the named interface; mismatched MTUs stall RDMA; weights missing on one rank
show up only after rank 0 has loaded for ten minutes.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Literal, Mapping

from launcher.facts import HostFacts
from launcher.model import Host, Inventory, Plan, Recipe, Unit

Status = Literal["pass", "warn", "fail"]

# Free space below which weights/caches are a warning (the recipe's weight size is not known
# for every entry, so this is a floor, not a fit check).
MIN_FREE_BYTES = 50 * 1024**3


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    host: str
    unit: str  # "" for host-wide checks
    name: str
    status: Status
    message: str
    fix: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeResults:
    """What the remote probes found, per host (absent = not probed)."""

    listening_ports: Mapping[str, frozenset[int]] = field(default_factory=dict)
    running_units: Mapping[str, frozenset[str]] = field(default_factory=dict)  # our own units
    path_bytes: Mapping[str, Mapping[str, int | None]] = field(default_factory=dict)  # None = absent
    infiniband_in_image: Mapping[str, bool] = field(default_factory=dict)
    reach: Mapping[tuple[str, str], str | None] = field(default_factory=dict)  # (host, target) -> error
    clock_offset_s: Mapping[str, float] = field(default_factory=dict)


def _data_plane(unit: Unit) -> bool:
    return unit.role in ("rank", "prefill", "decode") and (unit.nnodes > 1 or unit.role != "rank")


def _model_host_path(unit: Unit) -> str | None:
    """Host path of the unit's weights: the argv's model value mapped back through its mounts."""
    argv = list(unit.argv)
    value: str | None = None
    for flag in ("--model-path", "--model"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            value = argv[argv.index(flag) + 1]
    if value is None and "serve" in argv and argv.index("serve") + 1 < len(argv):
        value = argv[argv.index("serve") + 1]
    if value is None or not value.startswith("/") or unit.container is None:
        return value if value and value.startswith("/") else None
    for m in sorted(unit.container.mounts, key=lambda m: -len(m.container)):
        if value == m.container or value.startswith(m.container.rstrip("/") + "/"):
            return m.host + value[len(m.container.rstrip("/")) :]
    return None


def weight_paths(plan: Plan) -> dict[str, tuple[str, ...]]:
    """Per host, the weight directories its units read (for the size probe)."""
    out: dict[str, set[str]] = {}
    for u in plan.units:
        p = _model_host_path(u)
        if p:
            out.setdefault(u.host, set()).add(p)
    return {h: tuple(sorted(ps)) for h, ps in out.items()}


def probe_argv(paths: tuple[str, ...]) -> list[str]:
    """One shell probe: listening TCP ports, running containers, sizes of ``paths``.

    Output sections are ``### ports`` / ``### containers`` / ``### path <p> <bytes|absent>``.
    """
    lines = [
        "echo '### ports'; (ss -Htln 2>/dev/null || netstat -tln 2>/dev/null) | awk '{print $4}'",
        "echo '### containers'; docker ps --format '{{.Names}}' 2>/dev/null",
    ]
    for p in paths:
        q = shlex.quote(p)
        lines.append(
            f"if [ -e {q} ]; then echo \"### path {p} $(du -sb {q} 2>/dev/null | cut -f1)\"; "
            f"else echo '### path {p} absent'; fi"
        )
    return ["sh", "-c", "; ".join(lines)]


def parse_probe(text: str) -> tuple[frozenset[int], frozenset[str], dict[str, int | None]]:
    ports: set[int] = set()
    names: set[str] = set()
    paths: dict[str, int | None] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("### path "):
            rest = line[len("### path ") :]
            p, _, size = rest.rpartition(" ")
            paths[p] = int(size) if size.isdigit() else None
        elif line.startswith("### "):
            section = line[4:].strip()
        elif section == "ports" and ":" in line:
            port = line.rsplit(":", 1)[1]
            if port.isdigit():
                ports.add(int(port))
        elif section == "containers" and line.strip():
            names.add(line.strip())
    return frozenset(ports), frozenset(names), paths


def _check(host: str, unit: str, name: str, ok: bool, good: str, bad: str, fix: str,
           bad_status: Status = "fail") -> Check:
    return Check(host=host, unit=unit, name=name, status="pass" if ok else bad_status,
                 message=good if ok else bad, fix="" if ok else fix)


def _host_checks(host: Host, units: list[Unit], recipe: Recipe, hf: HostFacts | None) -> list[Check]:
    h = host.name
    if hf is None:
        return [Check(host=h, unit="", name="facts", status="fail",
                      message="no facts gathered", fix=f"run: fleet facts -i <inventory> --limit {h}")]
    out: list[Check] = []
    gpu_units = [u for u in units if u.gpus]
    if recipe.engine == "vllm-ascend":
        need = max((max(u.gpus) + 1 for u in gpu_units), default=0)
        out.append(_check(h, "", "npus", len(hf.npus) >= need, f"{len(hf.npus)} NPUs",
                          f"{len(hf.npus)} NPUs found, units need {need}",
                          "check npu-smi info and the Ascend driver"))
    elif gpu_units:
        need = max(max(u.gpus) + 1 for u in gpu_units)
        skus = sorted({g.sku or g.name for g in hf.gpus})
        out.append(_check(h, "", "driver", bool(hf.gpus), f"driver {hf.gpus[0].driver}" if hf.gpus else "",
                          "nvidia-smi found no GPU (driver missing or not loaded)",
                          "install/load the NVIDIA driver; nvidia-smi must list the GPUs"))
        if hf.gpus:
            ok_sku = all(g.sku in recipe.hardware.skus for g in hf.gpus)
            out.append(_check(h, "", "gpu-sku", ok_sku, f"{len(hf.gpus)}× {', '.join(skus)}",
                              f"GPUs are {', '.join(skus)}; recipe {recipe.id} needs "
                              f"{' or '.join(recipe.hardware.skus)}",
                              "place the recipe on matching hosts (fleet recipes fit)"))
            out.append(_check(h, "", "gpu-count", len(hf.gpus) >= need, f"{len(hf.gpus)} GPUs",
                              f"{len(hf.gpus)} GPUs found, units use indices up to {need - 1}",
                              "fix gpu_count in the inventory or the placement"))
            want = recipe.hardware.min_gpu_memory_gib
            if want is not None:
                have = min(g.memory_mib for g in hf.gpus) // 1024
                out.append(_check(h, "", "gpu-memory", have >= want, f"{have} GiB per GPU",
                                  f"{have} GiB per GPU, recipe needs {want} GiB",
                                  "place the recipe on hosts with larger GPUs"))
    if any(u.container is not None for u in units):
        out.append(_check(h, "", "docker", hf.docker_version is not None,
                          f"docker {hf.docker_version}", "docker daemon not answering",
                          "install docker and start the daemon"))
        if gpu_units and recipe.engine != "vllm-ascend" and hf.docker_version is not None:
            out.append(_check(h, "", "nvidia-runtime", "nvidia" in hf.docker_runtimes,
                              "nvidia runtime registered", "docker has no nvidia runtime",
                              "install nvidia-container-toolkit and run nvidia-ctk runtime configure",
                              bad_status="warn"))
    spec = host.spec
    if any(_data_plane(u) for u in units):
        out.extend(_fabric_checks(host, units, hf))
    for d in (spec.models_dir, spec.cache_dir):
        free = next((v for k, v in sorted(hf.disk_free.items(), key=lambda kv: -len(kv[0]))
                     if d == k or d.startswith(k.rstrip("/") + "/")), None)
        if free is not None:
            out.append(_check(h, "", f"disk {d}", free >= MIN_FREE_BYTES, f"{free // 1024**3} GiB free",
                              f"only {free // 1024**3} GiB free", "free space for weights and caches",
                              bad_status="warn"))
    return out


def _fabric_checks(host: Host, units: list[Unit], hf: HostFacts) -> list[Check]:
    h, spec = host.name, host.spec
    out: list[Check] = []
    if spec.nccl_ifname:
        iface = hf.interface(spec.nccl_ifname)
        out.append(_check(h, "", "interface", iface is not None and iface.up,
                          f"{spec.nccl_ifname} up", f"interface {spec.nccl_ifname} missing or down",
                          "set nccl_ifname to the data-plane NIC (ip -br addr)"))
        if iface is not None and spec.data_ip:
            out.append(_check(h, "", "data-ip", spec.data_ip in iface.ipv4,
                              f"{spec.data_ip} on {spec.nccl_ifname}",
                              f"data_ip {spec.data_ip} is not on {spec.nccl_ifname} "
                              f"(has {', '.join(iface.ipv4) or 'no IPv4'})",
                              "fix data_ip or nccl_ifname so NCCL/Gloo bind the right NIC"))
    if spec.fabric == "none":
        return out
    layer = "Ethernet" if spec.fabric == "roce" else "InfiniBand"
    for hca in spec.hcas:
        port = next((p for p in hf.ib_ports if p.hca == hca), None)
        if port is None:
            out.append(Check(host=h, unit="", name=f"hca {hca}", status="fail",
                             message=f"HCA {hca} not found (ibv_devinfo lists "
                             f"{', '.join(sorted({p.hca for p in hf.ib_ports})) or 'none'})",
                             fix="fix hcas in the inventory or the RDMA driver; without it NCCL "
                             "silently falls back to TCP"))
            continue
        ok = port.state == "PORT_ACTIVE" and port.link_layer == layer
        out.append(_check(h, "", f"hca {hca}", ok, f"{hca} port {port.port} ACTIVE ({layer})",
                          f"{hca} port {port.port} is {port.state} ({port.link_layer}), want "
                          f"PORT_ACTIVE ({layer})", "bring the port up / check cabling and fabric"))
        if spec.fabric == "roce":
            found = hf.roce_v2_gid_index(hca, spec.data_ip)
            for u in units:
                if not _data_plane(u):
                    continue
                env_gid = u.env.get("NCCL_IB_GID_INDEX")
                if found is None:
                    out.append(Check(host=h, unit=u.name, name=f"gid {hca}", status="fail",
                                     message=f"{hca} has no RoCE v2 IPv4 GID"
                                     + (f" for {spec.data_ip}" if spec.data_ip else ""),
                                     fix="assign the data IP to the HCA's netdev; check show_gids"))
                else:
                    out.append(_check(h, u.name, f"gid {hca}", env_gid == str(found),
                                      f"NCCL_IB_GID_INDEX={found}",
                                      f"NCCL_IB_GID_INDEX={env_gid} but {hca}'s RoCE v2 IPv4 GID is "
                                      f"at index {found}", f"set gid_index: {found} (or auto) for {h}"))
    if not hf.dev_infiniband:
        out.append(Check(host=h, unit="", name="/dev/infiniband", status="fail",
                         message="/dev/infiniband is missing on the host",
                         fix="load the RDMA drivers (ib_uverbs, rdma_ucm)"))
    return out


def _group_checks(plan: Plan, inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Check]:
    out: list[Check] = []
    groups: dict[str, list[Unit]] = {}
    for u in plan.units:
        if _data_plane(u):
            groups.setdefault(u.group, []).append(u)
    for g, units in sorted(groups.items()):
        mtus: dict[str, int] = {}
        for u in units:
            spec = inventory.host(u.host).spec
            hf = facts.get(u.host)
            iface = hf.interface(spec.nccl_ifname) if hf and spec.nccl_ifname else None
            if iface is not None:
                mtus[u.host] = iface.mtu
        if len(set(mtus.values())) > 1:
            detail = ", ".join(f"{h}={m}" for h, m in sorted(mtus.items()))
            out.append(Check(host=units[0].host, unit=g, name="mtu", status="fail",
                             message=f"MTU differs across the ranks of {g}: {detail}",
                             fix="set the same MTU on every rank's data-plane NIC"))
        elif mtus:
            out.append(Check(host=units[0].host, unit=g, name="mtu", status="pass",
                             message=f"MTU {next(iter(mtus.values()))} on every rank"))
    return out


def _probe_checks(plan: Plan, probes: ProbeResults) -> list[Check]:
    out: list[Check] = []
    sizes: dict[str, dict[str, int | None]] = {}
    for u in plan.units:
        running = u.name in probes.running_units.get(u.host, frozenset())
        busy = probes.listening_ports.get(u.host)
        if busy is not None and not running:
            taken = sorted(p for p in u.ports.values() if p in busy)
            out.append(_check(u.host, u.name, "ports", not taken, "ports free",
                              f"port {', '.join(map(str, taken))} already in use",
                              "stop what listens there (ss -ltnp) or change the playbook's ports"))
        path = _model_host_path(u)
        host_paths = probes.path_bytes.get(u.host)
        if path and host_paths is not None and path in host_paths:
            size = host_paths[path]
            sizes.setdefault(u.group, {})[u.host] = size
            out.append(_check(u.host, u.name, "weights", size is not None, f"{path} ({size} bytes)",
                              f"weights missing: {path}",
                              "stage the weights at the same path on every rank"))
        if u.host in probes.infiniband_in_image and _data_plane(u):
            out.append(_check(u.host, u.name, "rdma-in-container", probes.infiniband_in_image[u.host],
                              "/dev/infiniband visible inside the image",
                              "/dev/infiniband not visible inside the container",
                              "render --device /dev/infiniband and --cap-add IPC_LOCK; "
                              "otherwise NCCL falls back to TCP silently"))
    for (host, target), err in sorted(probes.reach.items()):
        out.append(_check(host, "", f"reach {target}", err is None, f"reaches {target}",
                          f"cannot reach {target}: {err}",
                          "check routes/firewall on the data-plane NIC"))
    for g, per_host in sorted(sizes.items()):
        present = {s for s in per_host.values() if s is not None}
        if len(present) > 1:
            detail = ", ".join(f"{h}={s}" for h, s in sorted(per_host.items()))
            out.append(Check(host=sorted(per_host)[0], unit=g, name="weights-size", status="warn",
                             message=f"weights differ in size across ranks: {detail}",
                             fix="re-sync the weights; a truncated shard loads silently"))
    for host, off in sorted(probes.clock_offset_s.items()):
        out.append(_check(host, "", "clock", abs(off) < 1.0, f"clock offset {off:+.2f}s",
                          f"clock offset {off:+.2f}s", "run chrony/ntp", bad_status="warn"))
    return out


def evaluate(plan: Plan, inventory: Inventory, recipe: Recipe, facts: Mapping[str, HostFacts],
             probes: ProbeResults | None = None) -> tuple[Check, ...]:
    """All checks, host by host in inventory order, then groups, then probes."""
    by_host: dict[str, list[Unit]] = {}
    for u in plan.units:
        by_host.setdefault(u.host, []).append(u)
    out: list[Check] = []
    for host in inventory.hosts:
        if host.name in by_host:
            out.extend(_host_checks(host, by_host[host.name], recipe, facts.get(host.name)))
    out.extend(_group_checks(plan, inventory, facts))
    if probes is not None:
        out.extend(_probe_checks(plan, probes))
    return tuple(out)


def failed(checks: tuple[Check, ...]) -> tuple[Check, ...]:
    return tuple(c for c in checks if c.status == "fail")
