"""PD rolling by cohort switch: generations never pair, no request fails.

A PD router pairs any registered prefill with any registered decode, so a new-generation worker
registered beside old ones would serve requests with an old-generation partner, and replacing a
router's workers one call at a time always passes through a state with either a mixed pair or
no complete pair (see docs/rolling.md).  So a PD deployment rolls as a whole *cohort* (its
prefills, decodes, Mooncake master and its own PD router), behind a *front* router in regular
mode whose workers are cohort routers:

1. the new cohort comes up on the ``--surge`` hosts (the playbook's placement mapped host for
   host onto them) through the deploy layer, and is gated on health and, where the decode
   counts KV transfers, on ``up``'s PD canary through the cohort's own router
   (:mod:`launcher.deploy.crossing`: the KV must cross; a rollback's revived cohort gets the
   same canary); it serves nothing yet;
2. its router is registered in every front router that holds the serving cohort's router, and
   waited for until healthy;
3. the serving cohort's router is deregistered from the front routers: new requests now reach
   only the new cohort; requests in flight finish in the old one;
4. the old cohort drains (engine counters; else the engines' SIGTERM drain), then is retired:
   decodes first (their streams finish), then prefills, then its router and Mooncake master;
   its files stay in ``prev/`` on its hosts.

Afterwards the deployment serves from the surge hosts: the playbook's placement should name
them (the old hosts become the next roll's ``--surge``).  ``rollback`` is the same switch with
step 1 replaced by bringing the cohort kept in ``prev/`` on the ``--surge`` hosts back.

Capacity cost: a second full cohort (as many hosts as the deployment uses) for the length of
the roll.  On a failure before step 2 the new cohort is removed and the old one never stopped
serving.  Ctrl-C settles on one cohort before exiting (:func:`switch`); the same command run
again resumes a switch whose new router is registered already.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

from launcher.config.patterns import select
from launcher.deploy import crossing, orchestrate
from launcher.deploy.crossing import Crossing
from launcher.deploy.desired import Desired, groups as desired_groups, secrets_file, step_of
from launcher.deploy.manifest import Manifest
from launcher.deploy.orchestrate import Options
from launcher.deploy.secrets import resolve
from launcher.deploy.session import Connect, DeploySession, Target, on_interrupt, stop_wave, unsettled
from launcher.runtimes.base import MISSING
from launcher.deploy.survey import Survey, decide, survey_host
from launcher.errors import FleetError, UsageError
from launcher.execute.transport import Transport
from launcher.model import Inventory, Playbook
from launcher.output import Progress, mask
from launcher.pipeline import Inputs, deployment, target_of
from launcher.rolling import restore
from launcher.rolling.batches import plan_roll
from launcher.rolling.roll import Action, GroupOutcome, GroupReport, RollOptions, RollReport
from launcher.hosthttp import HostHttp
from launcher.rolling.router_api import RouterClient, RouterError, drain, unit_inflight

DRAIN_ORDER = {"router": 0, "prefill": 1, "decode": 2}
RETIRE_ORDER = {"decode": 0, "prefill": 1, "single": 1, "rank": 1, "gateway": 2, "router": 3, "mooncake-master": 4}


def surge_playbook(playbook: Playbook, inventory: Inventory, surge: Sequence[str]) -> tuple[Playbook, dict[str, str]]:
    """The playbook with every host its placement patterns match replaced, in inventory order,
    by the surge hosts in inventory order; and that host map."""
    matched: list[str] = []
    for role, pl in playbook.placement.items():
        for h in select(inventory, pl.hosts, pl.source, f"placement/{role}"):
            if h.name not in matched:
                matched.append(h.name)
    order = {h.name: i for i, h in enumerate(inventory.hosts)}
    matched.sort(key=lambda n: order[n])
    spare = sorted(dict.fromkeys(surge), key=lambda n: order[n])
    if len(spare) < len(matched):
        raise UsageError(
            f"--surge: {len(spare)} host(s) given; the playbook's placement matches {len(matched)} "
            f"({', '.join(matched)}), a second cohort needs as many"
        )
    mapping = dict(zip(matched, spare))
    remapped = {
        role: dataclasses.replace(
            p, hosts=":".join(mapping[h.name] for h in select(inventory, p.hosts, p.source, f"placement/{role}"))
        )
        for role, p in playbook.placement.items()
    }
    return dataclasses.replace(playbook, placement=remapped), mapping


def cohort_target(inputs: Inputs, secret_flags: Sequence[str] | None) -> Target:
    """The target of ``inputs`` (a surge playbook already in memory) through the one pipeline:
    planned as `fleet up` plans, claiming what every deployment claims."""
    secrets = resolve(inputs.playbook.secrets, secret_flags) if secret_flags is not None else {}
    return target_of(deployment(inputs), None, secrets)


def router_url(target: Target) -> str:
    r = next((d for d in target.units if d.unit.role == "router" and d.unit.health is not None), None)
    if r is None or r.unit.health is None:
        raise UsageError(f"deployment {target.deployment} has no router unit")
    return r.unit.health.base


def switch(
    inputs: Inputs,
    target: Target,
    surge: Sequence[str],
    connect: Connect,
    fronts: Sequence[RouterClient],
    options: RollOptions,
    progress: Progress,
    *,
    action: Action,
    secret_flags: Sequence[str],
) -> RollReport:
    """``fleet restart`` / ``fleet rollback`` of a PD deployment (see the module docstring).

    Ctrl-C leaves one cohort serving behind the front routers and nothing else of the
    deployment running, then re-raises: before the new cohort's router is registered, the new
    cohort is removed; from then on the switch is finished (old router deregistered, old cohort
    drained and retired).  A second Ctrl-C abandons that; the same command run again finishes a
    switch whose new cohort is registered already (it resumes at step 3)."""
    rp = plan_roll([d.unit for d in target.units], role=options.role, limit=options.limit, surge=surge)
    if not fronts:
        raise UsageError(
            f"PD deployment {target.deployment} rolls behind a front router: give --router URL (a router in "
            f"regular mode whose workers are the cohorts' PD routers; clients send requests there)"
        )
    new_playbook, _ = surge_playbook(inputs.playbook, inputs.inventory, surge)
    new = cohort_target(dataclasses.replace(inputs, playbook=new_playbook), secret_flags)
    old_url, new_url = router_url(target), router_url(new)
    serving = [f for f in fronts if f.find(old_url) is not None]
    moved = [f for f in fronts if f.find(new_url) is not None]
    notes = list(rp.notes)
    secrets = tuple(target.secrets.values())
    done = "restarted" if action == "restart" else "rolled-back"
    if moved:
        _require_running(new, connect, options, moved[0], new_url, old_url, exact=action == "restart", both=bool(serving))
        notes.append(f"cohort router {new_url} was registered in the front router already (an interrupted switch): "
                     f"finishing the switch")  # fmt: skip
        return _move(target, new, fronts, connect, options, progress, rp.batches, notes, action)
    if not serving:
        raise UsageError(
            f"router {fronts[0].base}: the cohort router {old_url} of deployment {target.deployment} is not "
            f"registered there; PD rolling moves traffic between cohort routers behind it"
        )
    errors: list[str] = []
    hosts = ", ".join(sorted({d.host for d in new.units}))

    def remove_new() -> None:
        # Its steps that came up are still running (start tears down only the step it was in).
        progress.note(f"interrupted: removing the cohort on {hosts} (it never served); the serving cohort was never "
                      f"touched")  # fmt: skip
        _settle(f"removing the cohort on {hosts}",
                lambda: _remove(new, connect, options, progress, action, at_once=True))  # fmt: skip

    # 1. the other cohort: new generation (restart) or the one kept in prev/ (rollback)
    with on_interrupt(remove_new):
        if action == "restart":
            up = orchestrate.up(new, connect, Options(forks=options.forks, timeout_s=options.timeout_s,
                                                      break_lock=options.break_lock), progress)  # fmt: skip
            canary = up.crossing
            if up.errors:
                errors += [f"new cohort on {hosts}: {e}" for e in up.errors]
                errors += _remove(new, connect, options, progress, action, at_once=True)
                errors.append("rollout halted: the new cohort was removed; the serving cohort was never touched")
                return _report(target, new, rp.batches, "unchanged", "failed", notes, errors, action, canary)
        else:
            err = _revive(new, connect, options, progress)
            canary = _cross(new, connect, options, progress) if err is None else None
            if err is None and canary is not None and not canary.ok:
                err = FleetError(canary.error)
            if err is not None:
                errors.append(mask(f"previous cohort on {hosts}: {err}", secrets))
                errors += _remove(new, connect, options, progress, action, at_once=True)
                errors.append("rollback halted: the serving cohort was never touched")
                return _report(target, new, rp.batches, "unchanged", "failed", notes, errors, action, canary)
    if canary is not None:
        notes.append(f"new cohort on {hosts}: {canary.evidence()}")

    def finish() -> None:
        progress.note(f"interrupted after traffic began moving to the cohort on {hosts}: finishing the switch first "
                      f"(Ctrl-C again stops now; the same command run again then finishes it)")  # fmt: skip
        _settle("finishing the switch",
                lambda: _move(target, new, fronts, connect, options, progress, rp.batches, notes, action,
                              canary).errors)  # fmt: skip
        progress.note(f"the switch finished: the cohort on {hosts} serves ({done})")

    # 2.-4.
    with on_interrupt(finish):
        return _move(target, new, fronts, connect, options, progress, rp.batches, notes, action, canary)


def _cross(new: Target, connect: Connect, options: RollOptions, progress: Progress) -> Crossing | None:
    """``up``'s PD canary on a cohort that came up by other means (a rollback's revived one);
    None where the decode counts no KV transfers."""
    if not crossing.applies(new.units):
        return None
    with DeploySession(new, connect, forks=options.forks, progress=progress) as session:
        session.require_all()
        progress.note("PD canary: one request through the cohort's router, the KV transfer read on the decode")
        return crossing.cross(session.transports, new.units)


def _settle(what: str, clean_up: Callable[[], Sequence[str]]) -> None:
    """Runs ``clean_up`` after Ctrl-C; if it fails the deployment is not settled, which is then
    the error to report (one line, exit 1) instead of the interrupt."""
    try:
        errors = list(clean_up())
    except FleetError as err:
        errors = [str(err)]
    if errors:
        raise unsettled(what, errors[0])


def _remove(new: Target, connect: Connect, options: RollOptions, progress: Progress, action: Action, *,
            at_once: bool = False) -> tuple[str, ...]:  # fmt: skip
    """Removes a cohort that never served: a new generation goes, ``prev/`` untouched (what the
    surge hosts kept stays a rollback's target); a revived one goes back into ``prev/``.  The
    errors of units that could not be removed.  ``at_once``: its router was never registered,
    so nothing is in flight: every unit is killed first, without the stop grace -- a unit still
    starting may not honor SIGTERM yet (seen: removing a router interrupted while it started waited
    out the whole grace)."""
    if at_once:
        _kill(new, connect, options, progress)
    return orchestrate.down(new, connect, Options(forks=options.forks, break_lock=True), progress,
                            keep_prev=action != "restart").errors  # fmt: skip


def _kill(new: Target, connect: Connect, options: RollOptions, progress: Progress) -> None:
    """Stops every planned unit of ``new`` without a grace; best effort (``down`` after it
    reports what could not be removed)."""
    with DeploySession(new, connect, forks=options.forks, progress=progress) as session:
        session.stop(new.units[::-1], None)


def _require_running(new: Target, connect: Connect, options: RollOptions, front: RouterClient, new_url: str,
                     old_url: str, *, exact: bool, both: bool) -> None:  # fmt: skip
    """Resuming is only for a new cohort that is whole: every unit deployed and running (and
    ``exact``: at this playbook's render); anything else is refused, nothing touched."""
    with DeploySession(new, connect, forks=options.forks) as session:
        session.require_all()
        surveys = session.survey()
    if exact:
        whole = all(g.action == "unchanged" for g in decide(new.units, surveys, new.secrets).groups)
    else:
        whole = all(
            surveys[d.host].manifests.get(d.name) is not None
            and surveys[d.host].live.get(d.name, MISSING).state == "running"
            for d in new.units
        )
    if whole:
        return
    where = ", ".join(sorted({d.host for d in new.units}))
    what = "this playbook's generation" if exact else "a generation"
    if both:
        raise UsageError(
            f"router {front.base}: the cohort router {new_url} is registered there beside {old_url}, but the cohort "
            f"on {where} does not run {what} whole; deregister {new_url} from the router, then run this again"
        )
    raise UsageError(
        f"router {front.base}: the cohort on {where} serves deployment {new.deployment} already ({new_url}; "
        f"{old_url} is not registered): set the playbook's placement to those hosts and give the others as --surge"
    )


def _move(
    target: Target,
    new: Target,
    fronts: Sequence[RouterClient],
    connect: Connect,
    options: RollOptions,
    progress: Progress,
    batches: tuple[tuple[str, ...], ...],
    notes: list[str],
    action: Action,
    canary: Crossing | None = None,
) -> RollReport:
    """Steps 2-4; idempotent (run again after Ctrl-C, or to resume): in the fronts that still
    hold the old cohort's router, registers the new one where missing and then deregisters the
    old one; retires what is left of the old cohort.  Backing out (the new router never became
    healthy) touches only fronts the old router still serves, so it never empties one."""
    old_url, new_url = router_url(target), router_url(new)
    serving = [f for f in fronts if f.find(old_url) is not None]
    errors: list[str] = []
    # 2. traffic to the new cohort; 3. away from the old one
    try:
        for f in serving:
            if f.find(new_url) is None:
                f.add(new_url)
            f.wait(new_url, present=True, timeout_s=options.register_timeout_s)
            progress.note(f"front {f.base}: cohort router {new_url} registered")
    except RouterError as err:
        errors.append(str(err))
        for f in serving:
            try:
                f.remove(new_url)
            except RouterError:
                pass
        errors += _remove(new, connect, options, progress, action)
        errors.append("rollout halted: the new cohort was removed; the serving cohort was never touched")
        return _report(target, new, batches, "unchanged", "failed", list(notes), errors, action, canary)
    for f in serving:
        f.remove(old_url)
        f.wait(old_url, present=False, timeout_s=options.register_timeout_s)
        progress.note(f"front {f.base}: cohort router {old_url} deregistered")

    # 4. drain and retire the old cohort
    secrets = tuple(target.secrets.values())
    left_notes = list(notes)
    errors += [mask(e, secrets) for e in _retire(target, connect, options, progress, left_notes)]
    return _report(target, new, batches, "retired", "restarted" if action == "restart" else "rolled-back",
                   left_notes, errors, action, canary)  # fmt: skip


def _revive(new: Target, connect: Connect, options: RollOptions, progress: Progress) -> FleetError | None:
    """Brings back the generation kept in prev/ on ``new``'s hosts, step by step, health-gated."""
    with DeploySession(new, connect, forks=options.forks, progress=progress, timeout_s=options.timeout_s) as session:
        session.require_all()
        session.lock(force=options.break_lock)
        err = _revive_steps(session)
    return err if err is not None or not session.unreleased else FleetError(session.unreleased[0])


def _revive_steps(session: DeploySession) -> FleetError | None:
    new = session.target
    by_group = desired_groups(new.units)
    for step in sorted({step_of(us) for us in by_group.values()}):
        batch = {g: us for g, us in by_group.items() if step_of(us) == step}

        def back(h: str, t: Transport, batch: Mapping[str, Sequence[Desired]] = batch) -> None:
            for units in batch.values():
                for d in units:
                    if d.host != h:
                        continue
                    prev = restore.swap_in_prev(t, h, d.dir, ())
                    sf = secrets_file(d, new.secrets)  # retiring removed it; prev/ never keeps one
                    if sf is not None:
                        t.put(sf.path, sf.content, sf.mode)
                    restore.start_kept(t, d, prev, session.progress)

        involved = sorted({d.host for us in batch.values() for d in us})
        results = session.run(involved, back)
        err = next((r for r in results.values() if isinstance(r, FleetError)), None)
        if err is not None:
            return err
        bad = next((v for v in session.gate(batch).values() if not v.healthy), None)
        if bad is not None:
            return bad.error
    return None


def _retire(target: Target, connect: Connect, options: RollOptions, progress: Progress, notes: list[str]) -> list[str]:
    """Drains the (deregistered) old cohort and retires it, decodes first."""
    errors: list[str] = []
    with DeploySession(target, connect, forks=options.forks, progress=progress) as session:
        session.require_all()
        session.lock(force=options.break_lock)
        found = session.run(session.hosts, lambda h, t: survey_host(t, h, target.deployment, target.units))
        manifests: list[Manifest] = []
        for h, s in found.items():
            if isinstance(s, FleetError):
                errors.append(str(s))
            elif isinstance(s, Survey):
                manifests += list(s.manifests.values())
        # Only what is still deployed drains (a resumed switch may find some of it retired).
        # Read as a request moves: the cohort's router first (it holds a request from arrival to
        # the last token, and between a prefill and its decode, where no engine counts it), then
        # prefills, then decodes; drained by one round of zeros, since a decode read idle may get
        # a request from its prefill a moment later (the likely cause of a 0-token stream cut in
        # a cohort roll in the official CI of 78feaae).
        left = {(m.host, m.unit) for m in manifests}
        probes: dict[str, Callable[[], int | None]] = {}
        stages = [d for d in target.units if d.unit.role in DRAIN_ORDER and (d.host, d.name) in left]
        for d in sorted(stages, key=lambda d: DRAIN_ORDER[d.unit.role]):
            probe = unit_inflight(HostHttp(session.transports[d.host]), d.unit)
            if probe is not None:  # a router with no in-flight gauges: its engines' counters only
                probes[d.name] = probe
        drained = drain(probes, options.drain_timeout_s, together=True) if probes else {}
        if drained:
            notes.append("old cohort drained together (router, prefills, decodes): "
                         + ", ".join(f"{k} {v.text()}" for k, v in drained.items()))  # fmt: skip
        blind = [k for k, v in drained.items() if v.how == "no-counter"]
        if blind:
            notes.append(
                f"no in-flight counter answered on {', '.join(blind)} (/get_load, /metrics): requests in flight "
                "there finished in their engines' SIGTERM drain, decodes stopped first"
            )
        late = {k: v.left for k, v in drained.items() if v.how == "timeout"}
        if late:
            notes.append(f"drain timeout: still in flight at retire: {late}")
        # A rank whose peer stopped first would die and be restarted by docker (restart
        # policy) into a rendezvous that may not honor SIGTERM: no restarts while retiring.
        session.hold([(m.host, m.runtime, m.unit) for m in manifests])
        # Per role step, serving ranks first (see stop_wave).
        for step in sorted({(RETIRE_ORDER.get(m.role, 5), stop_wave(m.rank)) for m in manifests}):
            batch = [m for m in manifests if (RETIRE_ORDER.get(m.role, 5), stop_wave(m.rank)) == step]
            results = session.retire(batch, states=("retiring", "retired"))
            errors += [str(r) for r in results.values() if isinstance(r, FleetError)]
    return [*errors, *session.unreleased]


def _report(
    old: Target,
    new: Target,
    batches: tuple[tuple[str, ...], ...],
    old_outcome: GroupOutcome,
    new_outcome: GroupOutcome,
    notes: list[str],
    errors: list[str],
    action: Action,
    canary: Crossing | None = None,
) -> RollReport:
    rows = []
    for who, t, outcome in (("old cohort", old, old_outcome), ("new cohort", new, new_outcome)):
        for g, units in desired_groups(t.units).items():
            rows.append(GroupReport(group=g, batch=1, outcome=outcome, hosts=tuple(dict.fromkeys(d.host for d in units)),
                                    detail=who))  # fmt: skip
    if not errors:
        where = ", ".join(sorted({d.host for d in new.units}))
        notes.append(f"deployment {new.deployment} now serves from {where}: set the playbook's placement to these hosts "
                     f"(the old hosts keep the previous generation in prev/ for fleet rollback --surge)")  # fmt: skip
    return RollReport(deployment=old.deployment, action=action, batches=batches, groups=tuple(rows),
                      notes=tuple(notes), errors=tuple(errors), crossing=canary)  # fmt: skip
