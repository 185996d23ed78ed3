"""Running preflight on the hosts: facts, plan with them, probes, reachability, verdict.

:func:`run_preflight` is ``fleet preflight`` and the gate ``fleet up`` runs by default (the
facts round is :func:`launcher.facts.gather.gather_facts`, ``fleet facts``):

1. facts from every host the playbook's placements match (one round);
2. the plan, made with those facts (``gid_index: auto`` resolves here);
3. one probe round per host with units (ports, running units, weights, /dev/infiniband inside
   the image with the rendered flags);
4. the reachability round: detached listeners on rank-0 hosts, one client run per other rank,
   then the listeners are killed (also on errors and Ctrl-C);
5. the KV-transport round of a PD plan (:mod:`launcher.preflight.kvprobe`: the transfer
   library read across each prefill/decode host pair, inside the deployment's image);
6. :func:`launcher.preflight.checks.evaluate`, with the KV-transport checks after it.

Nothing here starts a unit.  ``level="cheap"`` (what ``fleet up`` runs) does everything but hash
the weights against ``fleet.sha256``; ``level="full"`` hashes them too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from launcher.config.recipes import Catalog
from launcher.errors import ExitCode, FleetError, HostKeyError, PlanError, RemoteError, UnreachableError
from launcher.execute.fanout import DEFAULT_FORKS, Connector, Failed, FanoutResult, Ok, Unreachable, run_all
from launcher.execute.transport import Result, Transport
from launcher.model import Host, Inventory, Plan, Playbook, Recipe, Unit
from launcher.limit import refuse_split
from launcher.pipeline import Inputs, limit_checked, load_inputs, plan_with
from launcher.plan import deployment_name, reshaped
from launcher.facts import cache as facts_cache
from launcher.facts.gather import FactsRound, failure, gather_facts, outcome_reason
from launcher.facts.host import HostFacts
from launcher.preflight import checks, kvprobe
from launcher.deploy.lock import LOCK_ROOT
from launcher.preflight.claim import claimed
from launcher.preflight.rules.base import Check, Level, ProbeResults, Reach, ReachTarget
from launcher.preflight.rules.images import ImagePrograms

PROBE_TIMEOUT_S = 600.0
FULL_PROBE_TIMEOUT_S = 6 * 3600.0  # hashing hundreds of GB of weights
REACH_TIMEOUT_S = 30.0
Note = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Preflight
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PreflightReport:
    deployment: str
    recipe: str
    plan: Plan | None  # planned with the gathered facts; None when planning failed
    facts: Mapping[str, HostFacts]
    checks: tuple[Check, ...]

    @property
    def failed(self) -> tuple[Check, ...]:
        return checks.failed(self.checks)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.FAILED if self.failed else ExitCode.OK

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "warn": 0, "fail": 0}
        for c in self.checks:
            out[c.status] += 1
        return out


def _plan_error_check(err: PlanError, inventory: Inventory) -> Check:
    head = err.key_path.split("/", 1)[0] if err.key_path else ""
    host = head if any(h.name == head for h in inventory.hosts) else "-"
    fix = (f"check show_gids on {host}, or set its gid_index explicitly" if err.key_path.endswith("gid_index")
           else "fix the inventory or playbook (fleet plan shows the same error)")
    return Check(host=host, unit="", name="plan", status="fail", message=str(err), fix=fix)


def _probe_host(host: Host, transport: Transport, paths: tuple[str, ...], images: tuple[Unit, ...],
                level: Level, programs: ImagePrograms, deployment: str) -> checks.HostProbe:
    script = checks.host_probe_script(paths, images, level, programs, deployment)
    timeout = FULL_PROBE_TIMEOUT_S if level == "full" else PROBE_TIMEOUT_S
    result = transport.run(("sh", "-c", script), timeout=timeout)
    if not result.stdout_text.strip():
        raise failure(result, "preflight probe script")
    return checks.parse_host_probe(result.stdout_text, paths, level, programs)


def _reachability(targets: Sequence[ReachTarget], inventory: Inventory, connector: Connector, forks: int,
                  facts: Mapping[str, HostFacts], unreachable: Mapping[str, str],
                  listening: Mapping[str, frozenset[int]],
                  note: Note) -> tuple[tuple[Reach, ...], dict[tuple[str, str], str]]:
    """Listeners up, clients connect, listeners down (in ``finally``).  ``unreachable``: the
    hosts the facts round could not reach, and how that was seen."""
    reach: list[Reach] = []
    listener_errors: dict[tuple[str, str], str] = {}

    def unusable(host: str) -> tuple[str, str] | None:
        """Why no probe can run on ``host``: (error, the host if SSH could not reach it)."""
        hf = facts.get(host)
        if hf is None:
            return unreachable.get(host, "no facts gathered"), host
        if hf.python3 is None:
            return f"python3 is not on PATH on {host}", ""
        return None

    def usable(host: str) -> bool:
        return unusable(host) is None

    runnable: list[ReachTarget] = []
    for t in targets:
        problem = unusable(t.host)
        for client, unit, _ in t.clients:
            why = problem or unusable(client)
            if why is not None:
                reach.append(Reach(target=t, client=client, unit=unit, error=why[0], probed=False, unreachable=why[1]))
        if problem is None and any(usable(c) for c, _, _ in t.clients):
            runnable.append(t)
    if not runnable:
        return tuple(reach), listener_errors

    to_listen: dict[str, list[ReachTarget]] = {}
    for t in runnable:
        if t.port not in listening.get(t.host, frozenset()):
            to_listen.setdefault(t.host, []).append(t)
    pids: dict[str, int] = {}
    hosts = {h.name: h for h in inventory.hosts}
    try:
        if to_listen:
            note(f"preflight: listeners on {', '.join(sorted(to_listen))} for {len(runnable)} port(s)")

            def listen(host: Host, transport: Transport) -> tuple[int | None, dict[str, str]]:
                res = transport.run(checks.listener_argv(to_listen[host.name]), timeout=REACH_TIMEOUT_S)
                try:
                    return checks.parse_listener(res.stdout_text)
                except ValueError:
                    raise failure(res, "reachability listener (python3)") from None
            started = run_all([hosts[h] for h in to_listen], listen, connector=connector, forks=forks)
            for o in started.outcomes:
                if isinstance(o, Ok):
                    pid, errors = o.value
                    if pid is not None:
                        pids[o.host.name] = pid
                    for key, err in errors.items():
                        listener_errors[(o.host.name, key)] = err
                else:
                    for t in to_listen[o.host.name]:
                        listener_errors[(o.host.name, t.key)] = outcome_reason(o)
        jobs: dict[str, list[tuple[ReachTarget, str, str]]] = {}  # client -> (target, unit, src)
        for t in runnable:
            if (t.host, t.key) in listener_errors:
                continue
            for client, unit, src in t.clients:
                if usable(client):
                    jobs.setdefault(client, []).append((t, unit, src))

        def connect(host: Host, transport: Transport) -> dict[str, str | None]:
            mine = jobs[host.name]
            res = transport.run(checks.client_argv([(src, t.ip, t.port) for t, _, src in mine]),
                                timeout=REACH_TIMEOUT_S)
            try:
                return checks.parse_client(res.stdout_text)
            except ValueError:
                raise failure(res, "reachability client (python3)") from None
        if jobs:
            results = run_all([hosts[h] for h in jobs], connect, connector=connector, forks=forks)
            for res in results.outcomes:
                mine = jobs[res.host.name]
                if isinstance(res, Ok):
                    for t, unit, src in mine:
                        got = res.value.get(t.key, "no answer from the probe")
                        shown = f"{got} (from {src})" if got is not None and not got.startswith("cannot bind") else got
                        reach.append(Reach(target=t, client=res.host.name, unit=unit, error=shown))
                else:
                    down = res.host.name if isinstance(res, Unreachable) else ""
                    for t, unit, _ in mine:
                        reach.append(Reach(target=t, client=res.host.name, unit=unit, error=outcome_reason(res),
                                           probed=False, unreachable=down))
    finally:
        if pids:
            def stop(host: Host, transport: Transport) -> None:
                transport.run(checks.cleanup_argv(pids[host.name]), timeout=REACH_TIMEOUT_S)
            run_all([hosts[h] for h in pids], stop, connector=connector, forks=forks)
    order = {(t.host, t.key, c): i for i, t in enumerate(targets) for c, _, _ in t.clients}
    reach.sort(key=lambda r: order.get((r.target.host, r.target.key, r.client), 0))
    return tuple(reach), listener_errors


def run_preflight(
    inventory: Inventory,
    catalog: Catalog,
    playbook: Playbook,
    connector: Connector,
    *,
    level: Level = "cheap",
    forks: int = DEFAULT_FORKS,
    note: Note = _quiet,
    cache: bool = True,
    limit: str | None = None,
    force: bool = False,
) -> PreflightReport:
    """Facts, plan, probes and checks for ``playbook``.  Never starts a unit.  ``connector``
    is an :class:`~launcher.execute.ssh.SshConnector` (or any fan-out connector); its
    connections stay open for the caller (``fleet up`` reuses them).  ``limit``: a ``--limit``
    pattern (see :mod:`launcher.limit`): only its hosts are asked and checked (whole groups);
    the others are planned with their cached facts, and the report's plan is the whole one."""
    recipe: Recipe = catalog.get(playbook.recipe)
    deployment = deployment_name(playbook.name)
    inputs = Inputs(inventory=inventory, catalog=catalog, playbook=playbook)
    hosts = limit_checked(inputs, limit)
    chosen = {h.name for h in hosts}
    note(f"preflight: gathering facts from {len(hosts)} host(s)")
    gathered = gather_facts(inventory, hosts, connector, forks=forks, cache=cache)
    facts = gathered.facts
    if limit is not None:  # the hosts left out are planned as the last gather saw them
        facts = {**{h: f for h, f in facts_cache.load_facts(inventory).items() if h not in chosen}, **facts}
    try:
        whole = plan_with(inputs, facts)
    except PlanError as err:
        found = checks.with_paths((_plan_error_check(err, inventory),
                                   *checks.evaluate_hosts(hosts, recipe, facts, gathered.unreachable, playbook)),
                                  playbook.path, inventory.path)  # fmt: skip
        return PreflightReport(deployment=deployment, recipe=recipe.id, plan=None, facts=facts, checks=found)
    recipe = reshaped(recipe, playbook.overrides)  # the shape the plan placed (it checked the overrides)
    the_plan = whole
    if limit is not None:
        refuse_split(((u.group, u.host) for u in whole.units), chosen)
        the_plan = replace(whole, units=tuple(u for u in whole.units if u.host in chosen))

    unit_hosts = [h for h in inventory.hosts if any(u.host == h.name for u in the_plan.units)]
    probe_hosts = [h for h in unit_hosts if h.name in gathered.entries]
    # One preflight of a deployment at a time (claim.py says why); its claim spans every round
    # that binds ports or names probe containers.
    with claimed(probe_hosts, deployment, connector, forks, force=force) as unclaimed:
        paths = checks.probe_paths(the_plan, inventory, recipe)
        images: dict[str, list[Unit]] = {}
        for u in checks.image_units(the_plan, inventory):
            images.setdefault(u.host, []).append(u)
        programs = checks.image_programs(the_plan)
        note(f"preflight: probing {len(probe_hosts)} host(s)")
        probed: FanoutResult[checks.HostProbe] = run_all(
            probe_hosts,
            lambda h, t: _probe_host(h, t, paths.get(h.name, ()), tuple(images.get(h.name, ())), level,
                                     programs.get(h.name, ()), deployment),
            connector=connector, forks=forks,
        )
        host_probes = probed.values()
        errors = {o.host.name: outcome_reason(o) for o in probed.outcomes if not isinstance(o, Ok)}
        listening = {h: p.listening for h, p in host_probes.items()}
        targets = checks.reach_targets(the_plan, inventory)
        reach: tuple[Reach, ...] = ()
        listener_errors: dict[tuple[str, str], str] = {}
        if targets:
            note(f"preflight: reachability of {len(targets)} port(s)")
            reach, listener_errors = _reachability(targets, inventory, connector, forks, facts, gathered.unreachable,
                                                     listening, note)
        probes = ProbeResults(
            listening_ports=listening,
            running_units={h: p.running for h, p in host_probes.items()},
            paths={h: p.paths for h, p in host_probes.items()},
            images={(h, unit): verdict for h, p in host_probes.items() for unit, verdict in p.images.items()},
            programs={(h, image): verdict for h, p in host_probes.items() for image, verdict in p.programs.items()},
            reach=reach,
            listener_errors=listener_errors,
            clock_offset_s={
                h: (e.clock_offset_s, e.clock_uncertainty_s or 0.0)
                for h, e in gathered.entries.items()
                if e.clock_offset_s is not None and h in {x.name for x in unit_hosts}
            },
            errors=errors,
        )
        transport = kvprobe.probe(the_plan, inventory, recipe, connector, forks,
                                  lambda h: h in host_probes and facts.get(h) is not None, note)  # fmt: skip
    found = checks.with_paths((*checks.evaluate(the_plan, inventory, recipe, facts, probes, gathered.unreachable),
                               *transport, *map(_lock_check, unclaimed.items())), playbook.path, inventory.path)  # fmt: skip
    return PreflightReport(deployment=deployment, recipe=recipe.id, plan=whole, facts=facts, checks=found)


def _lock_check(unclaimed: tuple[str, str]) -> Check:
    """A host where preflight's claim could not be made: the deploy lock cannot be either."""
    host, why = unclaimed
    return Check(host=host, unit="", name="deploy-lock", status="fail", message=why,
                 fix=f"fleet up, down and restart take their lock in {LOCK_ROOT} on every host")


def run_preflight_paths(playbook_path: str | Path, inventory_path: str | Path, connector: Connector,
                        **kwargs: object) -> PreflightReport:
    """:func:`run_preflight` from file paths (:func:`launcher.pipeline.load_inputs`)."""
    inputs = load_inputs(playbook_path, inventory_path)
    return run_preflight(inputs.inventory, inputs.catalog, inputs.playbook, connector, **kwargs)  # type: ignore[arg-type]


class PreflightFailed(FleetError):
    """Raised by callers that gate on preflight (``fleet up``): one line naming the failures."""

    def __init__(self, report: PreflightReport) -> None:
        self.report = report
        bad = report.failed
        hosts = sorted({c.host for c in bad})
        super().__init__(f"preflight failed: {len(bad)} check(s) on {', '.join(hosts)}; nothing was started")
