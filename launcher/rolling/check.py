"""``fleet restart --check`` / ``fleet rollback --check``: what the rollout would do, read from
every host that answers -- its batches (the same pure plan and refusals as the real run), each
group's generation now and after, and for a rollback whether ``prev/`` keeps a generation to
go back to.  Nothing is locked, drained, stopped or written; no router is asked.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from launcher.deploy.desired import Desired
from launcher.deploy.orchestrate import survey_reachable
from launcher.deploy.session import Connect, DeploySession, Target
from launcher.deploy.survey import Survey, next_generation
from launcher.errors import FleetError
from launcher.execute.transport import Transport
from launcher.rolling.batches import RollGroup, plan_roll
from launcher.rolling.restore import read_prev
from launcher.rolling.roll import Action, GroupReport, RollOptions, RollReport


def check_roll(target: Target, connect: Connect, options: RollOptions, *, action: Action,
               surge: Sequence[str] = ()) -> RollReport:  # fmt: skip
    """The rollout ``roll`` (or the PD cohort switch, with ``surge``) would run, as a report of
    ``planned`` / ``skipped`` / ``unreachable`` groups; one error line per host that did not
    answer."""
    plan = plan_roll([d.unit for d in target.units], max_unavailable=options.max_unavailable, role=options.role,
                     limit=options.limit, force=options.force, surge=surge)  # fmt: skip
    desired = {(d.host, d.name): d for d in target.units}
    with DeploySession(target, connect, forks=options.forks) as session:
        surveys, failed = survey_reachable(session)
        kept: dict[tuple[str, str], int | None] = {}
        if action == "rollback":
            by_host: dict[str, list[Desired]] = {}
            for d in target.units:
                if d.host in surveys:
                    by_host.setdefault(d.host, []).append(d)

            def prev(h: str, t: Transport) -> dict[str, int | None]:
                return {d.name: (m.generation if (m := read_prev(t, d.dir)) else None) for d in by_host[h]}

            for h, res in session.run(sorted(by_host), prev, "read").items():
                if isinstance(res, FleetError):
                    failed[h] = str(res)
                elif isinstance(res, dict):
                    kept.update({(h, name): gen for name, gen in res.items()})
    reports = [GroupReport(group=name, batch=0, outcome="skipped", hosts=plan.group(name).hosts, detail=why)
               for name, why in plan.skipped]  # fmt: skip
    for i, batch in enumerate(plan.batches, start=1):
        for name in batch:
            g = plan.group(name)
            units = [desired[(u.host, u.name)] for u in g.units]
            reports.append(_judged(g, i, units, surveys, failed, kept, action))
    order = {g.name: i for i, g in enumerate((*plan.groups, *plan.infra))}  # plan order, as roll reports
    return RollReport(deployment=target.deployment, action=action, batches=plan.batches,
                      groups=tuple(sorted(reports, key=lambda g: order.get(g.group, len(order)))), notes=plan.notes,
                      errors=tuple(failed.values()))  # fmt: skip


def _judged(g: RollGroup, batch: int, units: list[Desired], surveys: Mapping[str, Survey],
            failed: Mapping[str, str], kept: Mapping[tuple[str, str], int | None], action: Action) -> GroupReport:  # fmt: skip
    down = [h for h in g.hosts if h in failed]
    if down:
        return GroupReport(group=g.name, batch=batch, outcome="unreachable", hosts=g.hosts,
                           detail=failed[down[0]].removeprefix(down[0] + ": "))  # fmt: skip
    lead = units[0]
    old = surveys[lead.host].manifests.get(lead.name)
    before = old.generation if old else None
    if action == "rollback":
        gens = [kept.get((d.host, d.name)) for d in units]
        if any(gen is None for gen in gens):
            return GroupReport(group=g.name, batch=batch, outcome="skipped", hosts=g.hosts, generation_before=before,
                               detail="no previous generation kept in prev/")  # fmt: skip
        return GroupReport(group=g.name, batch=batch, outcome="planned", hosts=g.hosts, generation_before=before,
                           generation_after=gens[0], detail="would roll back")  # fmt: skip
    return GroupReport(group=g.name, batch=batch, outcome="planned", hosts=g.hosts, generation_before=before,
                       generation_after=next_generation(old, lead), detail="would restart")  # fmt: skip
