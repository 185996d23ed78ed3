"""``fleet facts``, ``fleet preflight``, ``fleet collect``: know each host before launching, and
collect evidence when it fails.

Exit codes: facts/collect 0 every host answered, 3 some did not, 1 none did; preflight 0 no
check failed, 1 some check failed (each failure printed on stderr with its host and fix);
2 bad input everywhere.
"""

from __future__ import annotations

import shlex
import sys
from typing import IO, TYPE_CHECKING, Sequence

import click

from launcher.cli import cli
from launcher.cli.common import connector as _connector, execute_log_to_stderr, limit_option
from launcher.cli.common import ssh_options as _ssh_options
from launcher.config.inventory_sources import load_sources
from launcher.limit import limit_hosts
from launcher.execute.fanout import DEFAULT_FORKS
from launcher.execute.ssh import SshConnector
from launcher.model import Host
from launcher.output import dumps, print_table, table
from launcher.facts import cache as facts_cache
from launcher.preflight import checks
from launcher.facts.host import HostFacts
from launcher.facts.gather import FactsRound, gather_facts
from launcher.preflight.run import PreflightReport, run_preflight, run_preflight_paths

if TYPE_CHECKING:
    from launcher.pipeline import Inputs


def _note(line: str) -> None:
    click.echo(line, err=True)


# ---------------------------------------------------------------------------------------------
# fleet facts
# ---------------------------------------------------------------------------------------------


def _gpus(hf: HostFacts) -> str:
    if hf.gpus:
        names = sorted({g.sku or g.name for g in hf.gpus})
        mig = f" (MIG on {','.join(map(str, hf.mig_enabled))})" if hf.mig_enabled else ""
        return f"{len(hf.gpus)}x {'/'.join(names)} {min(g.memory_mib for g in hf.gpus) // 1024}G{mig}"
    if hf.npus:
        return f"{len(hf.npus)}x {'/'.join(sorted(set(hf.npus)))}"
    return hf.gpu_error or hf.npu_error or "-"


def _rdma(hf: HostFacts, host: Host) -> str:
    cells = []
    for p in hf.ib_ports:
        state = p.state.removeprefix("PORT_")
        layer = "RoCE" if p.link_layer == "Ethernet" else "IB" if p.link_layer == "InfiniBand" else p.link_layer
        gid = hf.roce_v2_gid_index(p.hca, host.spec.data_ip) if layer == "RoCE" else None
        cells.append(f"{p.hca}:{p.port} {state} {layer}" + (f" gid {gid}" if gid is not None else ""))
    return "; ".join(cells) or "-"


def _nic(hf: HostFacts, host: Host) -> str:
    iface = hf.interface(host.spec.nccl_ifname) if host.spec.nccl_ifname else None
    if iface is None:
        iface = hf.interface_with(host.spec.data_ip or host.address)
    if iface is None:
        return "-"
    return f"{iface.name} {','.join(iface.ipv4) or '-'} mtu {iface.mtu}{'' if iface.up else ' DOWN'}"


def _disk(hf: HostFacts, path: str) -> str:
    d = hf.disk(path)
    return f"{d.free / 1024**3:.0f}G free" if d else "-"


def facts_rows(round_: FactsRound, hosts: Sequence[Host]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for h in hosts:
        entry = round_.entries.get(h.name)
        if entry is None:
            rows.append((h.name, f"unreachable: {round_.unreachable.get(h.name, '?')}", "", "", "", "", "", ""))
            continue
        hf = entry.facts
        docker = hf.docker_version or (hf.docker_error and "error") or "-"
        if hf.docker_version and "nvidia" in hf.docker_runtimes:
            docker += " +nvidia"
        off, unc = entry.clock_offset_s, entry.clock_uncertainty_s
        clock = f"{off:+.2f}s ±{unc or 0:.2f}" if off is not None else "-"
        shm = hf.disk("/dev/shm")
        rows.append((h.name, _gpus(hf), _rdma(hf, h), _nic(hf, h), docker,
                     f"{_disk(hf, h.spec.models_dir)} {h.spec.models_dir}",
                     f"{shm.total / 1024**3:.0f}G" if shm else "-", clock))
    return rows


def facts_json(round_: FactsRound, hosts: Sequence[Host]) -> dict[str, object]:
    from launcher.facts.host import to_json

    out: list[dict[str, object]] = []
    for h in hosts:
        entry = round_.entries.get(h.name)
        if entry is None:
            out.append({"host": h.name, "status": "unreachable", "error": round_.unreachable.get(h.name)})
            continue
        out.append({
            "host": h.name, "status": "ok", "gathered_at": entry.gathered_at,
            "clock_offset_s": entry.clock_offset_s, "clock_uncertainty_s": entry.clock_uncertainty_s,
            "roce_v2_gid_index": {hca: entry.facts.roce_v2_gid_index(hca, h.spec.data_ip) for hca in h.spec.hcas},
            "facts": to_json(entry.facts),
        })  # fmt: skip
    return {"hosts": out}


@cli.command("facts")
@_ssh_options
@limit_option(whole_groups=False)
@click.option("--json", "as_json", is_flag=True, help="Print every host's facts as JSON.")
@click.option("--no-cache", is_flag=True, help="Do not write the facts cache.")
def facts_command(inventory_path: str, known_hosts: tuple[str, ...], trust_new_hosts: bool, forks: int,
                  limit_pattern: str | None, as_json: bool, no_cache: bool) -> None:  # fmt: skip
    """Gather each host's facts in one SSH round (GPUs, RDMA ports and GID tables, NICs and
    MTU, docker and its runtimes, disk, /dev/shm, clock offset) and cache them for planning
    (gid_index: auto) under ~/.cache/fleet/facts/."""
    inventory = load_sources(inventory_path)
    hosts = limit_hosts(inventory, inventory.hosts, limit_pattern, what=f"inventory {inventory.path}")
    with execute_log_to_stderr(), _connector(known_hosts, trust_new_hosts) as connector:
        round_ = gather_facts(inventory, hosts, connector, forks=forks, cache=not no_cache)
    if as_json:
        click.echo(dumps(facts_json(round_, hosts)))
    else:
        print_table(table(("host", "accelerators", "rdma (port state layer gid)", "data nic", "docker", "models disk",
                           "shm", "clock"), facts_rows(round_, hosts)))  # fmt: skip
    if not no_cache:
        _note(f"fleet: facts of {len(round_.entries)} host(s) cached in {facts_cache.inventory_dir(inventory)}")
    sys.exit(int(round_.exit_code))


# ---------------------------------------------------------------------------------------------
# fleet preflight
# ---------------------------------------------------------------------------------------------


def preflight_json(report: PreflightReport) -> dict[str, object]:
    units = []
    if report.plan is not None:
        units = [{"host": u.host, "unit": u.name, "group": u.group, "rank": u.rank,
                  "network_env": checks.network_env(u)} for u in report.plan.units]  # fmt: skip
    return {
        "deployment": report.deployment,
        "recipe": report.recipe,
        "checks": [{"status": c.status, "host": c.host, "unit": c.unit, "check": c.name, "message": c.message,
                    "fix": c.fix} for c in report.checks],  # fmt: skip
        "counts": report.counts(),
        "units": units,
        "exit_code": int(report.exit_code),
    }


_ORDER = {"fail": 0, "warn": 1, "pass": 2}


def print_preflight(report: PreflightReport, *, as_json: bool = False, problems_only: bool = False,
                    stream: IO[str] | None = None) -> None:
    """The table (stdout) or JSON, then every warning and failure as one line on stderr, and a
    summary.  ``problems_only`` (what ``fleet up`` shows): no table, only the lines."""
    if as_json:
        click.echo(dumps(preflight_json(report)), file=stream)
    elif not problems_only:
        rows = [(c.status, c.host, c.unit or "-", c.name, c.message, c.fix) for c in report.checks]
        print_table(table(("status", "host", "unit", "check", "message", "fix"), rows,
                          title=f"preflight {report.deployment} ({report.recipe})"), stream)
    problems = sorted((c for c in report.checks if c.status != "pass"), key=lambda c: _ORDER[c.status])
    for line in checks.merged_lines(problems):  # one line per problem, however many hosts have it
        click.echo(f"fleet: preflight: {line}", err=True)
    n = report.counts()
    click.echo(f"fleet: preflight {report.deployment}: {n['pass']} pass, {n['warn']} warn, {n['fail']} fail", err=True)


def print_gate(report: PreflightReport, inputs: Inputs, *, check: bool = False) -> None:
    """What ``fleet up``'s preflight gate shows: the warnings and failures on stderr and, when a
    check failed, that nothing was started (``check``: that --check goes on)."""
    print_preflight(report, problems_only=True)
    if report.failed and check:
        click.echo("fleet: preflight failed: fleet up would stop here, before starting anything; --check goes on",
                   err=True)  # fmt: skip
    elif report.failed:
        shown = shlex.join(("fleet", "preflight", inputs.playbook.path, "-i", inputs.inventory.path))
        click.echo(f"fleet: preflight failed: nothing was started ({shown} shows every check; --skip-preflight "
                   "overrides)", err=True)  # fmt: skip


def gate(inputs: Inputs, connector: SshConnector, *, forks: int = DEFAULT_FORKS,
         quiet: bool = False, limit: str | None = None, check: bool = False) -> PreflightReport:
    """The preflight gate as ``fleet up`` runs it (:mod:`launcher.flows.up`), for ``fleet demo``:
    the cheap preflight, its warnings and failures on stderr, and exit status 1 before anything
    is touched when a check fails (unless ``check``).  Returns the report (its plan was made with
    fresh facts); the connector's connections stay open for the deploy."""
    report = run_preflight(inputs.inventory, inputs.catalog, inputs.playbook, connector, forks=forks,
                           level="cheap", note=(lambda _: None) if quiet else _note, limit=limit)  # fmt: skip
    print_gate(report, inputs, check=check)
    if report.failed and not check:
        sys.exit(int(report.exit_code))
    return report


@cli.command("preflight")
@click.argument("playbook")
@_ssh_options
@click.option("--checksums", is_flag=True,
              help="Also hash the weights against fleet.sha256 beside them (slow: reads every byte).")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines (the checks are still printed).")
@click.option("--break-lock", is_flag=True,
              help="Take the hosts from another preflight of this deployment (one that is gone).")
@limit_option(whole_groups=True)
def preflight_command(playbook: str, inventory_path: str, known_hosts: tuple[str, ...], trust_new_hosts: bool,
                      forks: int, checksums: bool, as_json: bool, quiet: bool, break_lock: bool,
                      limit_pattern: str | None) -> None:  # fmt: skip
    """Check every host of PLAYBOOK before launching: GPUs vs the recipe, driver, docker and
    its NVIDIA runtime, HCAs ACTIVE, /dev/infiniband inside the image with the rendered flags,
    the RoCE v2 IPv4 GID index vs the planned NCCL_IB_GID_INDEX, MTU equal across ranks, the
    data IP on its NIC, every rank reaching rank 0's dist-init and the PD bootstrap ports, ports
    free, weights (and DSPARK drafts) present with sizes, disk, /dev/shm, clocks.  Starts no unit.

    Hosts need sh, ss, du, find, docker (container units) and python3 (standard library only,
    for the reachability probes: a short-lived listener on rank 0's data IP, connects from the
    other ranks' data IPs).

    /dev/infiniband is checked with a real `docker run --rm --entrypoint ls` of the unit's image
    and its rendered --device/--cap-add/--ulimit flags (nothing is pulled).  Not visible: a
    failure when the plan renders --device /dev/infiniband; a warning when the playbook drops
    --device (overrides.drop_docker_flags, as the sandbox playbooks do), since RDMA is then off
    by choice and NCCL/Mooncake run over TCP.

    A PD deployment's KV transport is tried for real between each prefill and decode host pair,
    inside the deployment's own image with the rendered UCX/Mooncake env: NIXL (or Mooncake's
    transfer engine) registers a 32 MiB buffer on the prefill host, listening on its side
    channel, and the decode host reads it across; the check names the transport the library
    picked and the bandwidth.  It fails with the library's own message (side channel
    unreachable, a UCX_NET_DEVICES the host lacks) and warns when a host's fabric is RDMA but
    the transport is TCP.

    One preflight of a deployment runs at a time (theirs would bind the same ports): the probes
    run under a claim on the hosts, /run/fleet/lock/<deployment>.preflight, and a second
    preflight (or `fleet up`'s gate) is refused, naming the first.
    """
    with execute_log_to_stderr(), _connector(known_hosts, trust_new_hosts) as connector:
        report = run_preflight_paths(playbook, inventory_path, connector, forks=forks,
                                     level="full" if checksums else "cheap",
                                     note=(lambda _: None) if as_json or quiet else _note, limit=limit_pattern,
                                     force=break_lock)  # fmt: skip
    print_preflight(report, as_json=as_json)
    sys.exit(int(report.exit_code))


# ---------------------------------------------------------------------------------------------
# fleet collect
# ---------------------------------------------------------------------------------------------


@cli.command("collect")
@click.argument("playbook")
@_ssh_options
@click.option("-o", "--output", "output", required=True, metavar="FILE.tar.gz", help="Where to write the bundle.")
@click.option("--tail", "tail_n", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Log lines per unit.")
@click.option("--secret", "secrets", multiple=True, metavar="NAME[=@FILE|=env:VAR]",
              help="Secret source override (as for up): its value is masked wherever it occurs in the bundle.")
@limit_option(whole_groups=False)
def collect_command(playbook: str, inventory_path: str, known_hosts: tuple[str, ...], trust_new_hosts: bool,
                    forks: int, output: str, tail_n: int, secrets: tuple[str, ...],
                    limit_pattern: str | None) -> None:  # fmt: skip
    """One evidence bundle from every host of PLAYBOOK: per unit its container logs, NCCL debug
    output, docker inspect and rendered files (never secrets.env); per host facts, GID tables,
    nvidia-smi topo -m, NICs and the kernel log tail; plus the plan and a manifest.  Unreachable
    hosts are recorded in the manifest, not fatal.  Secret values are masked: env entries by name
    and, for the playbook's secrets this control host can read, by value wherever they occur."""
    from launcher.deploy.secrets import resolve_readable
    from launcher.pipeline import load_inputs
    from launcher.preflight.collect import collect

    inputs = load_inputs(playbook, inventory_path)
    values, unreadable = resolve_readable(inputs.playbook.secrets, secrets)
    with execute_log_to_stderr(), _connector(known_hosts, trust_new_hosts) as connector:
        report = collect(inputs.inventory, inputs.catalog, inputs.playbook, connector, output, tail=tail_n,
                         forks=forks, limit=limit_pattern, secret_values=tuple(values.values()))
    # told once a bundle exists (a refused --limit is the only line of its error)
    for name, why in unreadable.items():
        _note(f"fleet: collect: secret {name} is masked by name only: {why}")
    for h in report.hosts:
        detail = f"{len(h.units)} unit(s), {h.files} file(s)" if h.status == "ok" else h.error
        click.echo(f"{h.host} | {h.status} | {detail}")
    if report.plan_error:
        _note(f"fleet: collect: no plan.json: {report.plan_error}")
    ok = sum(1 for h in report.hosts if h.status == "ok")
    _note(f"fleet: collect {report.deployment}: {ok}/{len(report.hosts)} host(s) -> {report.path}")
    sys.exit(int(report.exit_code))
