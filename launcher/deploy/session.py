"""One deploy session: the connections to a deployment's hosts, its deploy lock, what the hosts
run (the survey), and the operations every deploy policy is made of.

``up``/``down`` (:mod:`launcher.deploy.orchestrate`), the rolling batch loop
(:mod:`launcher.rolling.roll`) and the PD cohort switch (:mod:`launcher.rolling.cohort`) are
policies on top of :class:`DeploySession`; none of them takes a lock, numbers a generation or
tears a unit down itself.

Contract:

- Connections are opened when the session is made and closed on exit.  The deploy lock, once
  taken (:meth:`DeploySession.lock`, :meth:`DeploySession.lock_and_survey`), is released on
  every host on exit, whatever ends the session (Ctrl-C included); a lock that could not be
  released is an error line naming the host and the command that clears it
  (:meth:`DeploySession.reported`).  A lock left by a fleet run of this control host that is
  gone (:func:`lock.holder_state`) is taken over, with a note; any other holder refuses.
- :meth:`DeploySession.start` restarts groups whole and tears down whatever of them did not
  come up healthy before it returns or raises; :func:`next_generation` is the one rule for the
  generation a unit runs as.
- Interrupts: the CLI turns SIGTERM and SIGHUP into the ``KeyboardInterrupt`` Ctrl-C raises.  A
  policy that must settle the deployment before an interrupt ends it wraps that part in
  :func:`on_interrupt`; a failed settling ends the command with :func:`unsettled` (one line,
  exit 1) instead of the interrupt.  A second interrupt abandons the settling.
"""

from __future__ import annotations

import contextlib
import datetime
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Mapping, Protocol, Sequence, TypeVar

from launcher import stephook
from launcher.deploy import lock
from launcher.deploy.desired import Desired, secrets_file
from launcher.execute.fanout import Interrupted, each, first_error, precheck
from launcher.deploy.health import Verdict, gate
from launcher.deploy.manifest import Manifest, dumps
from launcher.deploy.owner import OwnerConflict, conflict
from launcher.remote import STEP_TIMEOUT_S, check, failure, show
from launcher.deploy.steps import manifest_path, remove_argv, rotate_argv
from launcher.deploy.survey import GroupChange, Survey, SurveyAsk, deployment_dir, missing, next_generation, survey_host
from launcher.errors import FleetError, HostKeyError, UnreachableError
from launcher.execute.files import DEFAULT_TIMEOUT_S as FILES_TIMEOUT_S
from launcher.execute.files import Put, Step, run_batch, write_files
from launcher.execute.transport import Result, Transport
from launcher.model import Host, Runtime
from launcher.output import Event, Progress, QuietProgress, mask
from launcher.render import STOP_TIMEOUT_S
from launcher.runtimes import registry as runtimes

Connect = Callable[[Host], Transport]


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One deployment on a set of hosts: what ``up``/``down``/``status`` work on."""

    deployment: str
    recipe: str
    hosts: tuple[Host, ...]
    units: tuple[Desired, ...]
    secrets: Mapping[str, str] = field(default_factory=dict)  # resolved on the control node
    unlock_command: str = "fleet unlock PLAYBOOK -i INVENTORY"  # what clears its lock, as the operator types it
    # The playbook that owns it (launcher/deploy/owner.py); "" checks and records nothing (down,
    # restart, status).  ``take_over``: a deployment another playbook owns becomes this one's.
    owner: str = ""
    take_over: bool = False


class _Reported(Protocol):
    @property
    def errors(self) -> tuple[str, ...]: ...


R = TypeVar("R", bound=_Reported)


# ---------------------------------------------------------------------------------------------
# interrupts


@contextlib.contextmanager
def on_interrupt(settle: Callable[[], None]) -> Iterator[None]:
    """An interrupt (Ctrl-C; SIGTERM/SIGHUP as the CLI maps them) inside the block runs
    ``settle`` first, then goes on; what ``settle`` raises (:func:`unsettled`, or a second
    interrupt) replaces it."""
    try:
        yield
    except KeyboardInterrupt:
        settle()
        raise


def unsettled(what: str, why: object) -> FleetError:
    """The error that ends an interrupted command whose settling (``what``) failed."""
    return FleetError(f"interrupted; {what} failed: {why}; run the same command again to finish")


# ---------------------------------------------------------------------------------------------
# connections


class Connections:
    """Open connections to ``hosts``; closes them on exit."""

    def __init__(self, hosts: Sequence[Host], connect: Connect, forks: int) -> None:
        self.forks = forks
        precheck(connect, hosts)
        by_name = {h.name: h for h in hosts}
        stephook.reached("connect", sorted(by_name))
        results = each(sorted(by_name), lambda n: connect(by_name[n]), forks)
        self.transports: dict[str, Transport] = {
            n: t for n, t in results.items() if not isinstance(t, FleetError)
        }
        self.errors: dict[str, FleetError] = {n: e for n, e in results.items() if isinstance(e, FleetError)}

    def __enter__(self) -> Connections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for t in self.transports.values():
            t.close()

    def refuse_bad_keys(self) -> None:
        """Unknown or changed host keys stop the command before anything runs anywhere."""
        for err in self.errors.values():
            if isinstance(err, HostKeyError):
                raise err

    def require_all(self) -> None:
        self.refuse_bad_keys()
        if self.errors:
            host, err = next(iter(self.errors.items()))
            more = f" (and {len(self.errors) - 1} more hosts)" if len(self.errors) > 1 else ""
            raise UnreachableError(host, f"{err.reason if isinstance(err, UnreachableError) else err}{more}")

    def run(self, hosts: Sequence[str], fn: Callable[[str, Transport], object], step: str = "", *,
            cleanup: bool = False) -> dict[str, object | FleetError]:  # fmt: skip
        """``fn`` on each of ``hosts`` at once; each host's outcome.  ``step`` names the step for
        the operator's step hook (:mod:`launcher.stephook`), run first; ``cleanup``: as
        :func:`~launcher.execute.fanout.each` has it (a first interrupt lets every host finish)."""
        if step:
            stephook.reached(step, hosts)
        return each(list(hosts), lambda h: fn(h, self.transports[h]), self.forks, cleanup=cleanup)


# ---------------------------------------------------------------------------------------------
# per-host operations


def stop_wave(rank: int) -> int:
    """When a rank stops within its step: serving ranks (rank 0) first.  A multi-node
    instance's rank 0 finishes its in-flight requests on SIGTERM, but dies at once when a peer
    rank goes first (its process group breaks)."""
    return 0 if rank == 0 else 1


def hold(t: Transport, units: Sequence[tuple[Runtime, str]]) -> None:
    """No automatic restarts for these units from now on (they are about to stop); best effort."""
    for rt in runtimes.runtimes():
        argv = rt.hold_argv([name for r, name in units if r == rt.name])
        if argv is not None:
            t.run(argv, timeout=STEP_TIMEOUT_S)


def retire(t: Transport, m: Manifest, keep_prev: bool = True) -> None:
    """Stops and removes a unit; keeps its last files in ``prev/`` (secrets never kept) unless
    ``keep_prev`` is false (what ``prev/`` held stays).  One round trip."""
    unit_dir = f"{deployment_dir(m.deployment)}/{m.unit}"
    steps = (
        Step(argv=runtimes.get(m.runtime).commands(m.unit, unit_dir).remove(STOP_TIMEOUT_S), label=f"stop {m.unit}"),
        *((Step(argv=rotate_argv(unit_dir, m.files), label=f"keep {unit_dir}/prev"),) if keep_prev else ()),
        Step(argv=remove_argv((*m.files, manifest_path(unit_dir))), label=f"rm {unit_dir}/*"),
    )
    write_files(t, (), steps=steps, timeout=STOP_TIMEOUT_S + 60 + 2 * STEP_TIMEOUT_S)


# ---------------------------------------------------------------------------------------------
# the session


class DeploySession(Connections):
    """Connections to ``target``'s hosts, the deploy lock on them once taken (released on
    exit), and the operations deploy policies are made of."""

    def __init__(
        self,
        target: Target,
        connect: Connect,
        *,
        forks: int,
        progress: Progress = QuietProgress(),
        timeout_s: float | None = None,
    ) -> None:
        self.target = target
        self.progress = progress
        self.timeout_s = timeout_s  # overrides every unit's health deadline
        self.hosts = sorted({h.name for h in target.hosts})
        self.owner = lock.owner_line()
        self.secrets = tuple(target.secrets.values())
        self._held: Sequence[str] = ()
        self.unreleased: tuple[str, ...] = ()  # after exit: a line per host whose lock stayed
        super().__init__(target.hosts, connect, forks)

    def __enter__(self) -> DeploySession:
        return self

    def __exit__(self, *exc: object) -> None:
        # The release is what an interrupt leads to: a first one arriving while it runs (a watch
        # stopped just as an action ends) lets it finish on every host, then ends the command; after
        # an interrupt, one arriving here is the second, which abandons it.
        interrupted: Interrupted[str, object] | None = None
        first = not (isinstance(exc[0], type) and issubclass(exc[0], KeyboardInterrupt))
        try:
            results = self.run(self._held, self._release, "release", cleanup=first)
        except Interrupted as err:  # a second interrupt leaves the hosts it cut short unreleased
            interrupted, results = err, {h: err.done.get(h, FleetError(f"{h}: interrupted")) for h in self._held}
        finally:
            self.close()
        where = lock.lock_dir(self.target.deployment)
        self.unreleased = tuple(
            mask(f"{h}: the deploy lock {where} was not released ({str(err).removeprefix(h + ': ')}); once {h} "
                 f"answers, clear it with: {self.target.unlock_command}", self.secrets)
            for h, err in sorted(results.items()) if isinstance(err, FleetError)
        )  # fmt: skip
        if exc[0] is not None or interrupted is not None:  # the error that ends the command says nothing about it
            for line in self.unreleased:
                self.progress.note(line)
        if interrupted is not None:
            raise interrupted

    def reported(self, report: R) -> R:
        """``report`` (made in the session) with a line per host whose lock stayed behind."""
        return replace(report, errors=(*report.errors, *self.unreleased))  # type: ignore[type-var]

    # -- lock and survey

    def lock(self, *, force: bool) -> None:
        """The deploy lock on every host (``force``: broken first), or none: on any failure the
        locks taken are released and the first error raised."""
        dep = self.target.deployment

        def take(h: str, t: Transport) -> None:
            if force:
                lock.break_lock(t, dep)
            self._taken(t, t.run(lock.acquire_argv(dep, self.owner), timeout=STEP_TIMEOUT_S))

        with on_interrupt(self._release_everywhere):
            results = self.run(self.hosts, take, "lock")
        err = first_error(results)
        if err is not None:
            self.run([h for h, r in results.items() if not isinstance(r, FleetError)], self._release, "release")
            raise err
        self._held = self.hosts

    def lock_and_survey(self, *, force: bool, images: bool) -> dict[str, Survey]:
        """:meth:`lock` and :meth:`survey` in one round trip per host (the survey runs only
        where the lock was taken); ``images``: also which planned images each host has.  On any
        failure the locks taken are released; a lock error is raised before a survey error."""
        dep = self.target.deployment
        taken: set[str] = set()

        def one(h: str, t: Transport) -> Survey:
            ask = SurveyAsk.of(h, self.target.units, images)
            steps = [Step(argv=lock.break_argv(dep), label=f"rm -rf {lock.lock_dir(dep)}")] if force else []
            steps.append(Step(argv=lock.acquire_argv(dep, self.owner), label=f"mkdir {lock.lock_dir(dep)}"))
            results = run_batch(t, [*steps, *ask.steps(dep)], timeout=STEP_TIMEOUT_S)
            if force and not results[0].ok:
                lock.unsafe(results[0])
                raise failure(results[0], results[0].command)
            if self._taken(t, results[len(steps) - 1]):  # the batch stopped at the refused acquire
                results = (*results, *run_batch(t, ask.steps(dep), timeout=STEP_TIMEOUT_S))
            taken.add(h)
            return self._judged(t, ask.survey(t, dep, results[len(steps):]))

        with on_interrupt(self._release_everywhere):
            results = self.run(self.hosts, one, "lock")
        errors = {h: r for h, r in results.items() if isinstance(r, FleetError)}
        if errors:
            self.run(sorted(taken), self._release, "release")
            raise next((e for h, e in errors.items() if h not in taken), next(iter(errors.values())))
        self._held = self.hosts
        return self._scrubbed({h: s for h, s in results.items() if isinstance(s, Survey)})

    def _taken(self, t: Transport, result: Result) -> bool:
        """Judges the answer to the lock's acquire; a lock whose holder is provably dead (see
        :func:`lock.holder_state`) is released as that holder and taken again (returns True)."""
        dep = self.target.deployment
        try:
            lock.acquired(result, dep)
        except lock.LockedError as err:
            if err.holder != "dead":
                raise
            lock.release(t, dep, err.owner)
            lock.acquire(t, dep, self.owner)
            self.progress.note(f"{err.host}: took over the deploy lock of a fleet run that is gone ({err.owner})")
            return True
        return False

    def _release(self, h: str, t: Transport) -> None:
        lock.release(t, self.target.deployment, self.owner)

    def _release_everywhere(self) -> None:
        """Ctrl-C while locks are being taken: which hosts hold ours is unknown (a lock may be
        taken before its answer arrives), so release everywhere -- release only removes a lock
        that is ours."""
        self.run(self.hosts, self._release, "release")

    def _judged(self, t: Transport, survey: Survey) -> Survey:
        """``survey``, unless another playbook's units on this host would be removed or run
        another recipe (refused unless taking it over: :mod:`launcher.deploy.owner`)."""
        planned = {d.name for d in self.target.units if d.host == t.host}
        refused = None if self.target.take_over else conflict(
            t.host, self.target.deployment, self.target.owner, self.target.recipe, planned, survey.manifests.values())
        if refused is not None:
            raise refused
        return survey

    def _scrubbed(self, surveys: dict[str, Survey]) -> dict[str, Survey]:
        """Once every host's survey passed (so a refusal anywhere changed nothing anywhere), and
        only while this run holds the lock (``--check`` writes nothing): rewrites each manifest
        an older fleet left with a secrets digest in it (0644: any local user could check guesses
        of the secret against it) and, for ``up``, each manifest naming another owner or none,
        naming this playbook (and its recipe).  One round trip per host that has any."""
        owner, ddir = self.target.owner, deployment_dir(self.target.deployment)

        def one(h: str, t: Transport) -> Survey:
            survey = surveys[h]
            claim = {u for u, m in survey.manifests.items() if owner and m.playbook != owner}
            manifests = {u: replace(m, playbook=owner, recipe=self.target.recipe) if u in claim else m
                         for u, m in survey.manifests.items()}  # fmt: skip
            puts = [Put(path=manifest_path(f"{ddir}/{u}"), data=dumps(manifests[u]).encode(), mode=0o644)
                    for u in sorted(set(survey.legacy) | claim)]
            if puts:
                write_files(t, puts)
            return replace(survey, manifests=manifests, legacy=())

        held = set(self._held)
        results = self.run([h for h in surveys if h in held], one, "record")
        err = first_error(results)
        if err is not None:
            raise err
        return {h: s for h, s in results.items() if isinstance(s, Survey)} | {
            h: s for h, s in surveys.items() if h not in held}

    def survey_each(self, hosts: Sequence[str], units: Sequence[Desired] | None = None) -> dict[str, object]:
        """What each of ``hosts`` runs of ``units`` (default: the target's): its
        :class:`Survey`, or the :class:`FleetError` that host ended with.  Manifests are
        rewritten (:meth:`_scrubbed`) only when no host was refused."""
        planned = self.target.units if units is None else units
        dep = self.target.deployment

        def one(h: str, t: Transport) -> Survey:
            return self._judged(t, survey_host(t, h, dep, planned))
        results = self.run(hosts, one, "survey")
        if any(isinstance(r, OwnerConflict) for r in results.values()):
            return results
        return results | self._scrubbed({h: s for h, s in results.items() if isinstance(s, Survey)})

    def survey(self, hosts: Sequence[str] | None = None, units: Sequence[Desired] | None = None) -> dict[str, Survey]:
        """What ``hosts`` (default: all) run of ``units`` (default: the target's); the first
        error raises."""
        results = self.survey_each(self.hosts if hosts is None else hosts, units)
        err = first_error(results)
        if err is not None:
            raise err
        return {h: s for h, s in results.items() if isinstance(s, Survey)}

    # -- operations

    def hold(self, units: Sequence[tuple[str, Runtime, str]]) -> None:
        """``(host, runtime, unit)``: no automatic restarts of those from now on (see :func:`hold`)."""
        by_host: dict[str, list[tuple[Runtime, str]]] = {}
        for h, rt, name in units:
            if runtimes.get(rt).holds:
                by_host.setdefault(h, []).append((rt, name))
        self.run(sorted(by_host), lambda h, t: hold(t, by_host[h]), "hold")

    def gate(self, groups: Mapping[str, Sequence[Desired]]) -> dict[str, Verdict]:
        """Health verdicts of ``groups`` (name -> units), gated together."""
        stephook.reached("health", sorted({d.host for units in groups.values() for d in units}))
        return gate(groups, self.transports, timeout_override=self.timeout_s, forks=self.forks, progress=self.progress)

    def stop(self, units: Sequence[Desired], grace_s: int | None) -> dict[str, object]:
        """``units`` held, then stopped last first (``grace_s`` to drain; None: at once), on
        every reachable host of theirs at once; each host's outcome (a :class:`FleetError` where
        it failed)."""

        def stop(h: str, t: Transport) -> None:
            mine = [d for d in units if d.host == h]
            hold(t, [(d.unit.runtime, d.name) for d in mine])
            for d in reversed(mine):
                self.progress.update(Event(host=h, unit=d.name, state="stopping"))
                wait = STEP_TIMEOUT_S if grace_s is None else grace_s + 60
                check(t, d.commands.remove(grace_s), label=f"stop {d.name}", timeout=wait)

        return self.run(sorted({d.host for d in units if d.host in self.transports}), stop, "stop")

    def retire(self, manifests: Sequence[Manifest], *, keep_prev: bool = True, states: tuple[str, str] = ("removing", "removed")) -> dict[str, object]:
        """Retires (see :func:`retire`) ``manifests``, every host at once; each host's outcome.
        ``states``: the progress states before and after each unit."""
        by_host: dict[str, list[Manifest]] = {}
        for m in manifests:
            by_host.setdefault(m.host, []).append(m)

        def remove(h: str, t: Transport) -> None:
            for m in by_host[h]:
                self.progress.update(Event(host=h, unit=m.unit, state=states[0]))
                retire(t, m, keep_prev)
                self.progress.update(Event(host=h, unit=m.unit, state=states[1]))

        return self.run(sorted(by_host), remove, "remove")

    def start(self, batch: Sequence[GroupChange], surveys: Mapping[str, Survey]) -> dict[str, Verdict]:
        """Restarts ``batch`` (groups of one start step) whole: hold every rank on every host, then
        per host stop + install (one round trip), then start every rank, then gate.  Groups that
        do not come up healthy are torn down (Ctrl-C included).  Verdicts by group."""
        target, progress = self.target, self.progress
        units = [d for g in batch for d in g.units]
        by_host: dict[str, list[Desired]] = {}
        for d in units:
            by_host.setdefault(d.host, []).append(d)
        hosts = sorted(by_host)
        verdicts: dict[str, Verdict] = {}
        step_id = uuid.uuid4().hex[:12]

        def serial(argv: Sequence[str]) -> tuple[str, ...]:
            return lock.serial_argv(target.deployment, self.owner, step_id, argv)

        try:
            # Stop every rank of the changing groups first: no old rank may rendezvous with a new one.
            # Hold them all first, on every host, so no rank is restarted by its runtime meanwhile
            # (a unit the survey found missing has nothing to hold).  Every host is held before any
            # stops, and every host is stopped before any starts: those barriers stay round trips.
            held = {h: [(d.unit.runtime, d.name) for d in by_host[h] if not missing(surveys, d)] for h in hosts}
            self.run([h for h in hosts if held[h]], lambda h, t: hold(t, held[h]), "hold")
            # Running leaders of multi-node groups stop, with their grace, before the other ranks
            # (see stop_wave).
            leaders = {h: [d for d in by_host[h] if stop_wave(d.unit.rank) == 0 and not missing(surveys, d)
                           and sum(1 for u in units if u.unit.group == d.unit.group) > 1] for h in hosts}  # fmt: skip
            drained = self.run([h for h in hosts if leaders[h]],
                               lambda h, t: _stop_units(t, leaders[h], progress, STOP_TIMEOUT_S), "stop")  # fmt: skip
            when = _now()
            installed = self.run(
                [h for h in hosts if not isinstance(drained.get(h), FleetError)],
                lambda h, t: _stop_and_install(t, by_host[h], surveys[h], target, self.owner.split(" ")[0], when,
                                               progress, stopped=frozenset(d.name for d in leaders[h])),
                "install",
            )  # fmt: skip
            started = self.run(
                [h for h in installed if not isinstance(installed[h], FleetError)],
                lambda h, t: _start_units(t, by_host[h], self.secrets, progress, serial),
                "start",
            )
            broken: dict[str, FleetError] = {}
            for h in hosts:
                err = next((r for r in (drained.get(h), installed.get(h), started.get(h)) if isinstance(r, FleetError)), None)
                if err is not None:
                    for d in by_host[h]:
                        broken.setdefault(d.unit.group, err)
            for g in batch:
                if g.group in broken:
                    verdicts[g.group] = Verdict(error=broken[g.group])
            verdicts.update(self.gate({g.group: g.units for g in batch if g.group not in verdicts}))
        finally:
            # Whatever did not come up healthy (failure or Ctrl-C) is torn down: nothing half-up.
            self._tear_down(batch, verdicts, step_id)
        return verdicts

    def tear_down(self, batch: Sequence[GroupChange]) -> None:
        """Tears down ``batch``, which came up healthy but failed a check after its gate (the PD
        canary), as a group that failed its gate is."""
        self._tear_down(batch, {}, uuid.uuid4().hex[:12])

    def _tear_down(self, batch: Sequence[GroupChange], verdicts: dict[str, Verdict], step_id: str) -> None:
        failed = [d for g in batch if not (v := verdicts.get(g.group)) or not v.healthy for d in g.units]
        if not failed:
            return
        teardown: dict[str, list[Desired]] = {}
        for d in failed:
            teardown.setdefault(d.host, []).append(d)
        down_hosts = sorted(teardown)

        def fence_and_hold(h: str, t: Transport) -> None:
            # A start Ctrl-C stopped waiting for may still run on the host: wait for it and
            # cancel the rest, so the stop below comes after every start of this step.
            check(t, lock.fence_argv(self.target.deployment, step_id, STEP_TIMEOUT_S), label="cancel the starts",
                  timeout=STEP_TIMEOUT_S + 30)  # fmt: skip
            hold(t, [(d.unit.runtime, d.name) for d in teardown[h]])

        fenced = self.run(down_hosts, fence_and_hold, "teardown")
        stopped = self.run(down_hosts, lambda h, t: _stop_units(t, teardown[h], self.progress, None), "teardown")
        left = {h: err for h in down_hosts for err in (fenced.get(h), stopped.get(h)) if isinstance(err, FleetError)}
        for h, err in left.items():
            self.progress.note(mask(f"{h}: tearing down {', '.join(d.name for d in teardown[h])} failed: {err}", self.secrets))
        for g in batch:
            v = verdicts.get(g.group)
            where = sorted({d.host for d in g.units if d.host in left})
            if v is not None and v.error is not None and where:
                more = "; ".join(f"tearing it down on {h} failed too: {str(left[h]).removeprefix(h + ': ')}" for h in where)
                verdicts[g.group] = replace(v, error=FleetError(mask(f"{v.error}; {more}", self.secrets)))


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stop_steps(units: Sequence[Desired], progress: Progress, grace_s: int | None) -> list[Step]:
    """Stops units, last rank first; ``grace_s`` lets a serving engine drain (None: at once)."""
    steps = []
    for d in reversed(units):
        progress.update(Event(host=d.host, unit=d.name, state="stopping"))
        steps.append(Step(argv=d.commands.remove(grace_s), label=f"stop {d.name}"))
    return steps


def _stop_units(t: Transport, units: Sequence[Desired], progress: Progress, grace_s: int | None) -> None:
    """Stops units in one round trip (see :func:`_stop_steps`)."""
    write_files(t, (), steps=_stop_steps(units, progress, grace_s), timeout=len(units) * ((grace_s or 0) + 60))


def _stop_and_install(
    t: Transport,
    units: Sequence[Desired],
    survey: Survey,
    target: Target,
    who: str,
    when: str,
    progress: Progress,
    *,
    stopped: frozenset[str] = frozenset(),
) -> None:
    """One round trip: stop the units (but those already ``stopped``), keep the changed ones'
    files in ``prev/``, remove stale files, write every file (secrets file 0600, content on
    stdin only), each manifest last."""
    steps = _stop_steps([d for d in units if d.name not in stopped], progress, STOP_TIMEOUT_S)
    files: list[Put] = []
    manifests: list[Put] = []
    stale: list[str] = []
    for d in units:
        progress.update(Event(host=d.host, unit=d.name, state="installing"))
        old = survey.manifests.get(d.name)
        files += [Put(path=f.path, data=f.content, mode=f.mode) for f in d.files]
        sf = secrets_file(d, target.secrets)
        if sf is not None:
            files.append(Put(path=sf.path, data=sf.content, mode=sf.mode))
        if old is not None and old.render_hash != d.render_hash:
            steps.append(Step(argv=rotate_argv(d.dir, old.files), label=f"keep {d.dir}/prev"))
        stale += [p for p in (old.files if old else ()) if p not in d.owned]
        manifest = Manifest(
            deployment=target.deployment,
            unit=d.name,
            host=d.host,
            group=d.unit.group,
            role=d.unit.role,
            rank=d.unit.rank,
            runtime=d.unit.runtime,
            render_hash=d.render_hash,
            recipe=target.recipe,
            image=d.image,
            generation=next_generation(old, d),
            deployed_by=who,
            playbook=target.owner or (old.playbook if old is not None else ""),
            deployed_at=when,
            files=d.owned,
        )
        manifests.append(Put(path=manifest_path(d.dir), data=dumps(manifest).encode(), mode=0o644))
    timeout = len(units) * (STOP_TIMEOUT_S + 60) + FILES_TIMEOUT_S
    write_files(t, (*files, *manifests), steps=steps, remove=stale, timeout=timeout)


def _start_units(
    t: Transport, units: Sequence[Desired], secrets: Sequence[str], progress: Progress,
    serial: Callable[[Sequence[str]], tuple[str, ...]],
) -> None:  # fmt: skip
    """Every start command of ``units`` in order, in one round trip, each as ``serial`` wraps
    it (see :func:`lock.serial_argv`); the first failure raises."""
    steps = []
    for d in units:
        progress.update(Event(host=d.host, unit=d.name, state="starting"))
        steps += [Step(argv=serial(argv), label=show(argv, secrets)) for argv in d.start]
    for r in run_batch(t, steps, timeout=len(steps) * STEP_TIMEOUT_S):
        if not r.ok:
            raise failure(r, r.command, secrets)
