"""Rolling restart and rollback of a regular (non-PD) deployment, batch by batch.

Per batch (at most ``max_unavailable`` restart groups, see :mod:`launcher.rolling.batches`):
take each group's serving rank out of every router it is registered in, wait until the engine
has no request in flight (bounded by the drain timeout), stop / install / start the group
through the deploy layer (previous generation kept in ``prev/``), gate on group health, put it
back into the routers it was in.  Then the next batch.

On a failed batch: the new generation is stopped there (the deploy layer tears it down), the
previous one is put back from ``prev/`` and started, gated and re-registered; the rollout halts
and the batches not yet reached are never touched.  ``rollback`` swaps every group back to the
generation kept in ``prev/``, rolling the same way.

Ctrl-C puts the interrupted batch back in service before exiting (see :meth:`_Rollout.run`).  A
rollout (re-)started finds groups that run but are in none of its routers -- left out by a
rollout that was interrupted or killed -- and registers them in the routers that serve the
deployment before any batch takes capacity out; groups not running go first, in one batch.

Contract: the deploy lock is held on every host for the whole rollout; the report names what
happened to every group; errors are one line each.  HTTP to engines goes from their own host
(over the SSH transport); routers are reached as their :class:`RouterClient` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Literal, Mapping, Protocol, Sequence

from launcher import stephook
from launcher.deploy import orchestrate
from launcher.deploy.crossing import Crossing
from launcher.deploy.desired import Desired, step_of
from launcher.deploy.health import Verdict
from launcher.deploy.manifest import Manifest
from launcher.deploy.orchestrate import Options
from launcher.deploy.session import Connect, DeploySession, Target, on_interrupt, unsettled
from launcher.deploy.survey import GroupChange, Survey, decide, next_generation
from launcher.errors import ExitCode, FleetError, UsageError
from launcher.execute.transport import Transport
from launcher.model import Runtime
from launcher.output import Event, Progress, QuietProgress, mask
from launcher.render import STOP_TIMEOUT_S
from launcher.rolling import restore
from launcher.rolling.batches import RollGroup, RollPlan, plan_roll
from launcher.hosthttp import HostHttp
from launcher.rolling.router_api import Drained, RouterClient, RouterError, drain, inflight
from launcher.runtimes.base import MISSING

Action = Literal["restart", "rollback"]
GroupOutcome = Literal["restarted", "rolled-back", "unchanged", "failed", "restored", "skipped", "not-reached", "retired",
                       "planned", "unreachable"]  # the last two: --check (would roll; a host did not answer)


class BatchGate(Protocol):
    """A check each batch's new generation must pass before it serves again (the bench gate,
    :mod:`launcher.bench.gate`).  ``before``: each batch about to restart, drained and out of its
    routers, still on the previous generation; a FleetError leaves it as it was and halts.
    ``after``: that batch's groups healthy on the new generation, still out of their routers;
    a reason (one line) sends them back to the previous generation and halts."""

    notes: list[str]

    def before(self, urls: Sequence[str]) -> None: ...

    def after(self, urls: Sequence[str]) -> str | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RollOptions:
    max_unavailable: str | int = 1
    role: str | None = None
    limit: frozenset[str] | None = None  # host names of --limit
    force: bool = False
    drain_timeout_s: float = 120.0
    forks: int = 8
    timeout_s: float | None = None  # health deadline override
    break_lock: bool = False
    only_changed: bool = False  # `fleet up` with rollout rolling: unchanged groups stay as they are
    register_timeout_s: float = 60.0
    # Called after each batch (healthy or not): e.g. rewrite the Prometheus targets so they follow
    # the rollout.  Must not raise.
    after_batch: Callable[[], None] | None = None
    gate: BatchGate | None = None  # restarts only


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupReport:
    group: str
    batch: int  # 1-based
    outcome: GroupOutcome
    hosts: tuple[str, ...]
    generation_before: int | None = None
    generation_after: int | None = None
    drain: str = ""  # drained / no-counter / timeout (N left) / -
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RollReport:
    deployment: str
    action: Action
    batches: tuple[tuple[str, ...], ...]
    groups: tuple[GroupReport, ...]
    notes: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    details: Mapping[str, str] = field(default_factory=dict)  # group -> failing unit's last log lines
    crossing: Crossing | None = None  # a PD cohort switch: the new cohort's canary (launcher/deploy/crossing.py)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.FAILED if self.errors else ExitCode.OK

    @property
    def halted(self) -> bool:
        return any(g.outcome in ("failed", "restored") for g in self.groups)


def plan_for(target: Target, options: RollOptions) -> RollPlan:
    return plan_roll(
        [d.unit for d in target.units],
        max_unavailable=options.max_unavailable,
        role=options.role,
        limit=options.limit,
        force=options.force,
    )


def roll(
    target: Target,
    connect: Connect,
    routers: Sequence[RouterClient],
    options: RollOptions,
    progress: Progress = QuietProgress(),
    *,
    action: Action = "restart",
) -> RollReport:
    """``fleet restart --rolling`` / ``fleet rollback`` / ``fleet up`` with a rolling rollout."""
    plan = plan_for(target, options)
    if plan.mode != "groups":
        raise UsageError(f"deployment {target.deployment} is PD: it rolls by cohort switch (give --surge)")
    with DeploySession(target, connect, forks=options.forks, progress=progress, timeout_s=options.timeout_s) as session:
        session.require_all()
        session.lock(force=options.break_lock)
        report = _Rollout(session, routers, options, plan, action).run()
    return session.reported(report)


class _Rollout:
    def __init__(
        self, session: DeploySession, routers: Sequence[RouterClient], options: RollOptions, plan: RollPlan, action: Action
    ) -> None:
        target = session.target
        self.target = target
        self.session = session
        self.routers = routers
        self.options = options
        self.progress = session.progress
        self.plan = plan
        self.action = action
        self.secrets = session.secrets
        self.desired: dict[str, tuple[Desired, ...]] = {}
        for g in (*plan.groups, *plan.infra):
            keys = {(u.host, u.name) for u in g.units}
            self.desired[g.name] = tuple(d for d in target.units if (d.host, d.name) in keys)
        self.reports: dict[str, GroupReport] = {}
        self.errors: list[str] = []
        self.notes: list[str] = list(plan.notes)
        self.details: dict[str, str] = {}
        self.no_counter: set[str] = set()
        self.restored_gen: dict[str, int] = {}
        # Routers serving the deployment: a home for groups found in none (see _adopt).
        self.serving: tuple[RouterClient, ...] = ()
        # The current batch: each group's routers (taken before any is taken out), the groups
        # whose take-out began, and those back in service (new or restored generation).
        self.homes: dict[str, tuple[RouterClient, ...]] = {}
        self.out: set[str] = set()
        self.back: set[str] = set()
        self.batches = plan.batches

    # -- the loop

    def run(self) -> RollReport:
        """The rollout.  Ctrl-C (KeyboardInterrupt) in a batch puts that batch back in service
        first -- each of its groups on its new generation if that runs healthy, else on the
        previous one (from prev/), and back in its routers -- then re-raises; a second Ctrl-C
        abandons that.  If putting it back fails, that is raised instead (one line, exit 1)."""
        surveys = self.session.survey()
        decision = decide(self.target.units, surveys, self.target.secrets)
        changing = {g.group for g in decision.changing}
        if not self.routers:
            self.notes.append("no router given (--router): groups are not taken out of a load balancer")
        else:
            self._adopt(surveys)
        for name, why in self.plan.skipped:
            self._report(name, 0, "skipped", detail=why, surveys=surveys)
        halted = False
        self.batches = self._down_first(surveys)
        total = len(self.batches)
        for i, batch in enumerate(self.batches, start=1):
            groups = [self.plan.group(n) for n in batch]
            if halted:
                for g in groups:
                    self._report(g.name, i, "not-reached", surveys=surveys)
                continue
            if self.options.only_changed:
                same = [g for g in groups if not any(u.group in changing for u in g.units)]
                for g in same:
                    self._report(g.name, i, "unchanged", surveys=surveys)
                groups = [g for g in groups if g not in same]
            if self.action == "rollback":
                missing = self._without_prev(groups, surveys)
                for g in missing:
                    self._report(g.name, i, "skipped", detail="no previous generation kept in prev/", surveys=surveys)
                groups = [g for g in groups if g not in missing]
            if not groups:
                continue
            # The first survey stays right for every group not restarted yet (each restarts once).
            self.progress.note(f"batch {i}/{total}: {', '.join(g.name for g in groups)}")
            # Before anything of the batch is touched: a hook can hold the rollout between batches
            # (an operator's go/no-go); Ctrl-C there leaves this batch as it was.
            stephook.reached("batch", self._hosts(groups))
            with on_interrupt(lambda: self._interrupted(i, groups, surveys)):
                halted = not self._batch(i, groups, surveys)
            if self.options.after_batch is not None:
                self.options.after_batch()
        if self.options.only_changed and not halted:
            self._infra(decision.changing, surveys)
        if self.options.gate is not None:
            self.notes += self.options.gate.notes
        if self.no_counter:
            self.notes.append(
                f"{', '.join(sorted(self.no_counter))}: the engine has no in-flight counter (/get_load, "
                f"/metrics): requests in flight finished in its SIGTERM drain (stop grace {STOP_TIMEOUT_S}s)"
            )
        ordered = [self.reports[n] for n in (*(g.name for g in self.plan.groups), *(g.name for g in self.plan.infra)) if n in self.reports]
        return RollReport(
            deployment=self.target.deployment, action=self.action, batches=self.batches,
            groups=tuple(ordered), notes=tuple(self.notes), errors=tuple(self.errors), details=self.details,
        )  # fmt: skip

    def _down_first(self, surveys: Mapping[str, Survey]) -> tuple[tuple[str, ...], ...]:
        """The plan's batches, but the groups with a rank not running (out of service already:
        a crash, or an interrupted rollout left them stopped) go first, all in one batch:
        restarting them takes nothing more out of service, while taking running groups out
        before them could leave the routers without a worker."""
        down = [
            n for b in self.plan.batches for n in b
            if any(surveys[d.host].live.get(d.name, MISSING).state != "running" for d in self.desired[n])
        ]  # fmt: skip
        if not down:
            return self.plan.batches
        self.notes.append(f"not running, so restarted first (batch 1): {', '.join(down)}")
        rest = (tuple(n for n in b if n not in down) for b in self.plan.batches)
        return (tuple(down), *(b for b in rest if b))

    def _batch(self, i: int, groups: Sequence[RollGroup], surveys: Mapping[str, Survey]) -> bool:
        """One batch; False when it failed (the rollout halts)."""
        try:
            registered = self._take_out(groups)
        except RouterError as err:
            self.errors.append(f"batch {i}: {err}")
            for g in groups:
                if g.name in self.out:
                    self._put_back(g, self.homes.get(g.name, ()))
                self._report(g.name, i, "skipped", surveys=surveys, detail="router failed; not restarted")
            self.errors.append(f"rollout halted at batch {i}/{len(self.batches)}: later batches not touched")
            return False
        drained = self._drain(groups)
        self._no_restart(groups)
        gate = self.options.gate if self.action == "restart" else None
        if gate is not None:
            try:
                gate.before(self._urls(groups))
            except FleetError as err:
                self.errors.append(f"batch {i}: {err}")
                for g in groups:
                    self._put_back(g, registered.get(g.name, ()))
                    self.back.add(g.name)
                    self._report(g.name, i, "skipped", surveys=surveys, detail="bench gate baseline failed; not restarted")
                self.errors.append(f"rollout halted at batch {i}/{len(self.batches)}: later batches not touched")
                return False
        if self.action == "restart":
            verdicts = self._restart(groups, surveys)
            if gate is not None:
                verdicts = self._bench_gate(gate, groups, verdicts)
        else:
            verdicts = self._swap_back(groups, surveys)
        failed = [g for g in groups if not verdicts[g.name].healthy]
        restored = self._revert(failed, surveys, self._survey(failed)) if failed and self.action == "restart" else {}
        stephook.reached("register", self._hosts([g for g in groups if verdicts[g.name].healthy]))
        ok = True
        for g in groups:
            v = verdicts[g.name]
            how = _drain_text(drained.get(g.name))
            if v.healthy:
                outcome: GroupOutcome = "restarted" if self.action == "restart" else "rolled-back"
                if not self._put_back(g, registered.get(g.name, ())):
                    ok = False  # healthy but not serving: do not take more capacity out
                self.back.add(g.name)
                self._report(g.name, i, outcome, drain=how, surveys=surveys, after=True)
                continue
            ok = False
            back = restored.get(g.name)  # None: a rollback, nothing put back
            if self._failed(g, i, f"batch {i}: ", v, back, surveys, how):
                self._put_back(g, registered.get(g.name, ()))
                self.back.add(g.name)
            elif back is None:
                self._report(g.name, i, "failed", drain=how, surveys=surveys, detail="left stopped")
        if not ok:
            self.errors.append(f"rollout halted at batch {i}/{len(self.batches)}: later batches not touched")
        return ok

    def _bench_gate(self, gate: BatchGate, groups: Sequence[RollGroup], verdicts: dict[str, Verdict]) -> dict[str, Verdict]:
        """The healthy groups fail together when the gate refuses them (they go back)."""
        healthy = [g for g in groups if verdicts[g.name].healthy]
        if not healthy:
            return verdicts
        self.progress.note(f"bench gate: {', '.join(g.name for g in healthy)}")
        try:
            reason = gate.after(self._urls(healthy))
        except FleetError as err:
            reason = f"bench gate: could not measure: {err}"
        if reason is None:
            return verdicts
        return {**verdicts, **{g.name: Verdict(error=FleetError(reason)) for g in healthy}}

    # -- routers

    def _urls(self, groups: Sequence[RollGroup]) -> list[str]:
        return [u for u in (self._url(g) for g in groups) if u is not None]

    def _url(self, g: RollGroup) -> str | None:
        leader = g.leader
        if leader is None or leader.health is None:
            return None
        return leader.health.base

    def _own(self, r: RouterClient) -> bool:
        """``r`` is the deployment's own router unit (whose workers are all its groups)."""
        hosts = {h.name: h for h in self.target.hosts}
        return any(
            d.unit.role == "router" and "router" in d.unit.ports and d.host in hosts
            and r.base == f"http://{hosts[d.host].address}:{d.unit.ports['router']}"
            for d in self.target.units
        )  # fmt: skip

    def _adopt(self, surveys: Mapping[str, Survey]) -> None:
        """Finds the routers serving the deployment (its own router; any other that holds one
        of its groups) and registers there every group that runs but is in none of the routers
        (left out by an interrupted or killed rollout), before a batch takes capacity out."""
        listed = {r.base: {w.url.rstrip("/") for w in r.workers()} for r in self.routers}
        urls = {g.name: self._url(g) for g in self.plan.groups}
        self.serving = tuple(
            r for r in self.routers if self._own(r) or any(u is not None and u in listed[r.base] for u in urls.values())
        )
        for g in self.plan.groups:
            url = urls[g.name]
            if url is None or not self.serving or any(url in listed[r.base] for r in self.routers):
                continue
            live = [surveys[d.host].live.get(d.name, MISSING).state for d in self.desired[g.name]]
            if any(state != "running" for state in live):
                continue  # not running: its batch restarts it into these routers
            self.notes.append(f"group {g.name} ran outside its routers (an interrupted rollout?): registered again in "
                              f"{', '.join(r.base for r in self.serving)}")  # fmt: skip
            self._put_back(g, self.serving)

    def _take_out(self, groups: Sequence[RollGroup]) -> dict[str, tuple[RouterClient, ...]]:
        """Deregisters each group from the routers it is in (a group in none: from nothing; it
        goes back into the routers serving the deployment); returns each group's routers.
        ``homes``/``out`` say what was taken out so far (a router error or Ctrl-C midway)."""
        self.homes, self.out, self.back = {}, set(), set()
        for g in groups:
            url = self._url(g)
            if url is not None:
                self.homes[g.name] = tuple(r for r in self.routers if r.find(url) is not None) or self.serving
        for g in groups:
            url = self._url(g)
            if url is None:
                continue
            self.out.add(g.name)
            found = [r for r in self.homes[g.name] if r.remove(url)]
            for r in found:
                self.progress.update(Event(host=g.hosts[0], unit=g.name, state="out of router", detail=r.base))
            for r in found:
                r.wait(url, present=False, timeout_s=self.options.register_timeout_s)
        return dict(self.homes)

    def _put_back(self, g: RollGroup, routers: Sequence[RouterClient]) -> bool:
        """Registers the group again where it was; False (and an error) if a router refused."""
        fine = True
        for r in routers:
            try:
                self._join(g, r)
            except RouterError as err:
                self.errors.append(f"group {g.name}: not back in its router: {err}")
                fine = False
        return fine

    def _join(self, g: RollGroup, r: RouterClient, *, settle: bool = False) -> None:
        """``g`` registered in ``r`` and healthy there.  ``settle``: after Ctrl-C, a
        deregistration the router queued may still be pending -- it is made to happen first,
        and an add the router refuses because one is already queued is waited for instead."""
        url = self._url(g)
        if url is None:
            return
        if settle:
            r.remove(url)
            r.wait(url, present=False, timeout_s=self.options.register_timeout_s)
        if r.find(url) is None:
            try:
                r.add(url)
            except RouterError:
                if not settle:
                    raise  # after Ctrl-C an add of ours may be queued already: waited for below
        r.wait(url, present=True, timeout_s=self.options.register_timeout_s)
        self.progress.update(Event(host=g.hosts[0], unit=g.name, state="back in router", detail=r.base))

    def _drain(self, groups: Sequence[RollGroup]) -> dict[str, Drained]:
        probes: dict[str, Callable[[], int | None]] = {}
        for g in groups:
            url = self._url(g)
            leader = g.leader
            if url is None or leader is None:
                continue
            http = HostHttp(self.session.transports[leader.host])
            probes[g.name] = lambda http=http, url=url: inflight(http, url)  # type: ignore[misc]
        if not probes:
            return {}
        for g in groups:
            self.progress.update(Event(host=g.hosts[0], unit=g.name, state="draining"))
        result = drain(probes, self.options.drain_timeout_s)
        self.no_counter.update(k for k, d in result.items() if d.how == "no-counter")
        return result

    # -- restart / restore / rollback

    def _no_restart(self, groups: Sequence[RollGroup]) -> None:
        """Stopping rank 0 of a multi-node group kills its other ranks; docker's restart policy
        would bring them back into a rendezvous that may not honor SIGTERM until it times out.
        The new generation's containers get the policy back (``docker run`` makes new ones)."""
        units: dict[str, list[tuple[Runtime, str]]] = {}
        for g in groups:
            for d in self.desired[g.name]:
                if len(g.units) > 1:
                    units.setdefault(d.host, []).append((d.unit.runtime, d.name))
        self.session.hold([(h, rt, n) for h, named in sorted(units.items()) for rt, n in named])

    def _changes(self, groups: Sequence[RollGroup], reason: str) -> list[GroupChange]:
        out = []
        for g in groups:
            by_group: dict[str, list[Desired]] = {}
            for d in self.desired[g.name]:
                by_group.setdefault(d.unit.group, []).append(d)
            for name, units in by_group.items():
                out.append(GroupChange(group=name, step=step_of(units), action="restart", reason=reason, units=tuple(units)))
        return out

    def _restart(self, groups: Sequence[RollGroup], surveys: Mapping[str, Survey]) -> dict[str, Verdict]:
        verdicts = self.session.start(self._changes(groups, "rolling restart"), surveys)
        return {g.name: _merge([verdicts[u] for u in {x.group for x in g.units}]) for g in groups}

    def _without_prev(self, groups: Sequence[RollGroup], surveys: Mapping[str, Survey]) -> list[RollGroup]:
        missing = []
        for g in groups:
            found = self.session.run(
                self._hosts([g]),
                lambda h, t, g=g: [restore.read_prev(t, d.dir) for d in self.desired[g.name] if d.host == h],  # type: ignore[misc]
                "read",
            )
            if any(isinstance(r, FleetError) or not isinstance(r, list) or None in r for r in found.values()):
                missing.append(g)
        return missing

    def _swap_back(self, groups: Sequence[RollGroup], surveys: Mapping[str, Survey]) -> dict[str, Verdict]:
        """Rollback of a batch: every rank of its groups stopped on every host first, then each
        unit's prev/ generation swapped in and started, then all gated together."""
        units = [d for g in groups for d in self.desired[g.name]]

        def back(h: str, t: Transport) -> None:
            for d in units:
                if d.host != h:
                    continue
                current = surveys[h].manifests.get(d.name)
                prev = restore.swap_in_prev(t, h, d.dir, current.files if current else d.owned)
                self.restored_gen[d.unit.group] = prev.generation
                restore.start_kept(t, d, prev, self.progress, self.secrets)

        return self._stop_start_gate(groups, STOP_TIMEOUT_S, back)

    def _stop_start_gate(
        self, groups: Sequence[RollGroup], grace_s: int | None, start: Callable[[str, Transport], None]
    ) -> dict[str, Verdict]:
        """Every rank of ``groups`` held and stopped (``grace_s`` to drain) on every host, then
        ``start(host, transport)`` on every host, then the groups gated together.  A group with a
        rank on a host where a step failed gets that error."""
        hosts = self._hosts(groups)
        stopped = self.session.stop([d for g in groups for d in self.desired[g.name]], grace_s)
        started = self.session.run([h for h in hosts if not isinstance(stopped[h], FleetError)], start, "start")
        verdicts: dict[str, Verdict] = {}
        for g in groups:
            err = next((r for h in self._hosts([g]) for r in (stopped[h], started.get(h)) if isinstance(r, FleetError)), None)
            if err is not None:
                verdicts[g.name] = Verdict(error=err)
        verdicts.update(self._gate([g for g in groups if g.name not in verdicts]))
        return verdicts

    def _infra(self, changing: Sequence[GroupChange], surveys: Mapping[str, Survey]) -> None:
        """`fleet up` (rolling): changed router / Mooncake / gateway groups restart after the
        engines, in start order.  One whose new generation fails is put back on the previous
        one (from prev/) and the rollout halts; Ctrl-C puts the step's groups back first (see
        :meth:`_recover`).  A group that ran nothing before is left stopped."""
        infra_groups = {u.group for g in self.plan.infra for u in g.units}
        todo = [c for c in changing if c.group in infra_groups]
        for step in sorted({c.step for c in todo}):
            batch = [c for c in todo if c.step == step]
            groups = [g for g in self.plan.infra if any(u.group == c.group for c in batch for u in g.units)]
            where = "interrupted while restarting the routers / Mooncake / gateway"
            with on_interrupt(lambda: self._recover(where, groups, surveys)):
                verdicts = self.session.start(batch, surveys)
            merged = {g.name: _merge([verdicts[c.group] for c in batch if any(u.group == c.group for u in g.units)])
                      for g in groups}  # fmt: skip
            failed = [g for g in groups if not merged[g.name].healthy and self._served_before(g, surveys)]
            restored = self._revert(failed, surveys, self._survey(failed)) if failed else {}
            for g in groups:
                v = merged[g.name]
                if v.healthy:
                    self._report(g.name, 0, "restarted", surveys=surveys, after=True)
                    continue
                back = restored.get(g.name)  # None: it ran nothing before
                self._failed(g, 0, "", v, back, surveys)
                if back is None:
                    self._report(g.name, 0, "failed", surveys=surveys, detail="new; left stopped")
            if any(self.reports[g.name].outcome != "restarted" for g in groups):
                return

    def _failed(self, g: RollGroup, i: int, where: str, v: Verdict, back: Verdict | None,
                surveys: Mapping[str, Survey], drain: str = "-") -> bool:
        """Records ``g``'s failed restart (``where`` prefixes its error lines) and, when the
        previous generation was put back (``back``), the outcome of that: ``restored`` (returns
        True: the caller puts it back in service) or ``failed``.  ``back`` None: nothing put
        back, nothing reported (the caller says why)."""
        self.errors.append(mask(f"{where}group {g.name}: {v.error}", self.secrets))
        if v.detail:
            self.details[g.name] = mask(v.detail, self.secrets)
        if back is None:
            return False
        if back.healthy:
            gen = _gen(surveys, self.desired[g.name])
            self._report(g.name, i, "restored", drain=drain, surveys=surveys,
                         detail=f"previous generation {gen if gen is not None else '?'} restored and healthy")  # fmt: skip
            return True
        self.errors.append(mask(f"{where}group {g.name}: restoring the previous generation failed: {back.error}", self.secrets))
        self._report(g.name, i, "failed", drain=drain, surveys=surveys, detail="left stopped")
        return False

    def _served_before(self, g: RollGroup, surveys: Mapping[str, Survey]) -> bool:
        """Every rank of ``g`` had a generation when the rollout began (one to go back to)."""
        return all(surveys[d.host].manifests.get(d.name) is not None for d in self.desired[g.name])

    # -- Ctrl-C

    def _interrupted(self, i: int, groups: Sequence[RollGroup], surveys: Mapping[str, Survey]) -> None:
        """After Ctrl-C in batch ``i``: each of its groups taken out of its routers is put back
        in service.  Raises a one-line :class:`FleetError` if that fails."""
        todo = [g for g in groups if g.name in self.out and g.name not in self.back]
        if not todo:
            return
        self._recover(f"interrupted in batch {i}/{len(self.batches)}", todo, surveys)

    def _recover(self, where: str, groups: Sequence[RollGroup], surveys: Mapping[str, Survey]) -> None:
        """``groups`` back in service, all at once, decided on what their hosts say now (the
        interrupt may have come before or after any step): a group running healthy stays as it
        runs; else it goes back to the generation it ran before this rollout (from prev/ if a
        new one was installed); one that ran nothing before stays stopped (the deploy layer tore
        it down).  Each serving group goes back into its routers.  Says so before and after;
        raises a one-line :class:`FleetError` for a group that could not be put back."""
        self.progress.note(f"{where}: putting {', '.join(g.name for g in groups)} back in service first "
                           f"(Ctrl-C again stops now; the same command run again then finishes it)")  # fmt: skip
        now = self._survey(groups)
        running = [g for g in groups if all(now[d.host].live.get(d.name, MISSING).state == "running" for d in self.desired[g.name])]
        healthy = {n for n, v in self._gate(running).items() if v.healthy}
        revert = [g for g in groups if g.name not in healthy and self._served_before(g, surveys)]
        reverted = self._revert(revert, surveys, now)
        done: list[str] = []
        failed: list[tuple[RollGroup, FleetError]] = []
        for g in groups:
            units = self.desired[g.name]
            if g.name not in healthy and g.name not in reverted:
                done.append(f"{g.name} left stopped (it ran nothing before)")
                continue
            v = reverted.get(g.name, Verdict(healthy=True))
            if not v.healthy:
                failed.append((g, v.error or FleetError(f"group {g.name} did not become healthy")))
                continue
            before = _gen(surveys, units)
            current = before if g.name in reverted else next(
                (m.generation for d in units if (m := now[d.host].manifests.get(d.name)) is not None), None)  # fmt: skip
            try:
                for r in self.homes.get(g.name, ()):
                    self._join(g, r, settle=True)
            except FleetError as err:
                failed.append((g, err))
                continue
            self.back.add(g.name)
            done.append(f"{g.name} on generation {current} ({'as before' if current == before else 'new'})")
        if failed:
            g, why = failed[0]
            raise unsettled(f"putting {g.name} back in service", mask(str(why), self.secrets))
        self.progress.note(f"back in service: {', '.join(done)}")

    def _survey(self, groups: Sequence[RollGroup]) -> dict[str, Survey]:
        return self.session.survey(self._hosts(groups), [d for g in groups for d in self.desired[g.name]])

    def _gate(self, groups: Sequence[RollGroup]) -> dict[str, Verdict]:
        """``groups`` gated together; a verdict per group (its deploy groups' merged)."""
        by_group: dict[str, list[Desired]] = {}
        for g in groups:
            for d in self.desired[g.name]:
                by_group.setdefault(d.unit.group, []).append(d)
        if not by_group:
            return {}
        verdicts = self.session.gate(by_group)
        return {g.name: _merge([verdicts[u] for u in {d.unit.group for d in self.desired[g.name]}]) for g in groups}

    def _revert(self, groups: Sequence[RollGroup], surveys: Mapping[str, Survey], now: Mapping[str, Survey]) -> dict[str, Verdict]:
        """Every rank of ``groups`` stopped at once on every host first (nothing is routed to
        them, and no rank may meet one of another generation), then the generation the rollout
        found put back where another one is installed (from prev/, which must hold it), started,
        all gated together."""
        verdicts: dict[str, Verdict] = {}
        olds = {d.name: surveys[d.host].manifests.get(d.name) for g in groups for d in self.desired[g.name]}
        todo = []
        for g in groups:
            if any(olds[d.name] is None for d in self.desired[g.name]):
                verdicts[g.name] = Verdict(error=FleetError(f"group {g.name} had no previous generation on every rank"))
                continue
            self.progress.note(f"group {g.name}: back to generation {_gen(surveys, self.desired[g.name])}")
            todo.append(g)
        units = [d for g in todo for d in self.desired[g.name]]

        def back(h: str, t: Transport) -> None:
            for d in units:
                if d.host != h:
                    continue
                old, cur = olds[d.name], now[h].manifests.get(d.name)
                assert old is not None
                if cur is None or cur.render_hash != old.render_hash:
                    kept = restore.read_prev(t, d.dir)
                    if kept is None or kept.render_hash != old.render_hash:
                        raise FleetError(f"{h}: {d.dir}/prev does not hold generation {old.generation}")
                    restore.swap(t, d.dir, cur.files if cur is not None else d.owned, kept)
                restore.start_kept(t, d, old, self.progress, self.secrets)

        if todo:
            verdicts.update(self._stop_start_gate(todo, None, back))
        return verdicts

    # -- bookkeeping

    def _hosts(self, groups: Sequence[RollGroup]) -> list[str]:
        return sorted({d.host for g in groups for d in self.desired[g.name]})

    def _report(
        self,
        name: str,
        batch: int,
        outcome: GroupOutcome,
        *,
        surveys: Mapping[str, Survey],
        drain: str = "-",
        detail: str = "",
        after: bool = False,
    ) -> None:
        units = self.desired.get(name, ())
        before = _gen(surveys, units)
        gen_after: int | None = before
        if after and outcome == "restarted":
            gen_after = _next(surveys, units)
        elif outcome == "rolled-back":
            gen_after = next((self.restored_gen[d.unit.group] for d in units if d.unit.group in self.restored_gen), None)
        elif outcome == "restored":
            gen_after = before
        hosts = tuple(dict.fromkeys(d.host for d in units))
        self.reports[name] = GroupReport(
            group=name, batch=batch, outcome=outcome, hosts=hosts, generation_before=before,
            generation_after=gen_after, drain=drain, detail=detail,
        )  # fmt: skip


def _merge(verdicts: Sequence[Verdict]) -> Verdict:
    bad = next((v for v in verdicts if not v.healthy), None)
    return bad if bad is not None else Verdict(healthy=True)


def _gen(surveys: Mapping[str, Survey], units: Sequence[Desired]) -> int | None:
    for d in units:
        m: Manifest | None = surveys.get(d.host, Survey(manifests={}, live={})).manifests.get(d.name)
        if m is not None:
            return m.generation
    return None


def _next(surveys: Mapping[str, Survey], units: Sequence[Desired]) -> int | None:
    for d in units:
        return next_generation(surveys.get(d.host, Survey(manifests={}, live={})).manifests.get(d.name), d)
    return None


def _drain_text(d: Drained | None) -> str:
    return "-" if d is None else d.text()


def up_rolling(
    target: Target,
    connect: Connect,
    routers: Sequence[RouterClient],
    options: RollOptions,
    progress: Progress = QuietProgress(),
) -> RollReport:
    """``fleet up`` for a playbook with ``rollout: {strategy: rolling}``: only the groups whose
    files changed (or that are not running) restart, batch by batch as in :func:`roll`; changed
    router / Mooncake / gateway groups restart after the engines.  A deployment with nothing
    running yet comes up at once (there is nothing to keep serving).  A PD deployment with a
    change is refused: it rolls by cohort switch (``fleet restart --surge``)."""
    with DeploySession(target, connect, forks=options.forks) as session:
        session.require_all()
        surveys = session.survey()
    decision = decide(target.units, surveys, target.secrets)
    if all(g.action == "start" for g in decision.groups):
        plain = orchestrate.up(target, connect, Options(forks=options.forks, timeout_s=options.timeout_s,
                                                        break_lock=options.break_lock), progress)  # fmt: skip
        rows = []
        for name, units in _by_restart_group(target).items():
            outs = {u.outcome for u in plain.units if any(u.unit == d.name and u.host == d.host for d in units)}
            gens = [u.generation for u in plain.units if any(u.unit == d.name and u.host == d.host for d in units)]
            rows.append(GroupReport(group=name, batch=1, outcome="restarted" if outs <= {"healthy"} else "failed",
                                    hosts=tuple(dict.fromkeys(d.host for d in units)),
                                    generation_after=gens[0] if gens else None, detail="new"))  # fmt: skip
        return RollReport(deployment=target.deployment, action="restart", batches=(tuple(r.group for r in rows),),
                          groups=tuple(rows), notes=("nothing was running: brought up at once",),
                          errors=plain.errors)  # fmt: skip
    if any(d.unit.role in ("prefill", "decode") for d in target.units) and decision.changing:
        raise UsageError(
            f"PD deployment {target.deployment} changed: a rolling update moves it by cohort switch: "
            f"fleet restart PLAYBOOK -i INVENTORY --surge PATTERN --router FRONT_URL"
        )
    return roll(target, connect, routers, replace(options, only_changed=True), progress)


def _by_restart_group(target: Target) -> dict[str, tuple[Desired, ...]]:
    from launcher.rolling.batches import restart_groups

    keys = {u.name: g.name for g in restart_groups([d.unit for d in target.units]) for u in g.units}
    out: dict[str, list[Desired]] = {}
    for d in target.units:
        out.setdefault(keys[d.name], []).append(d)
    return {k: tuple(v) for k, v in out.items()}
