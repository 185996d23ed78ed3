"""``up`` / ``down`` / ``unlock``: bring a deployment's units to the desired state over SSH.

``up``, per host in parallel where it can: connect every host first (an unknown host key stops
everything before anything runs), take the deploy lock and read the manifests, liveness and
image presence of what runs there (one round trip), decide per restart group (unchanged / start
/ restart) and find orphans; with ``check`` stop there (diff only, read operations only).
Otherwise pull missing images, remove orphans, then step by step (``start_order``): hold the
changing groups on every host, stop them and install their files (previous generation kept in
``prev/``; one round trip per host), start every rank of every changing group at once, and gate
on group health.  A failed group is torn down, and later steps do not start.  Locks are
released and connections closed in ``finally`` (Ctrl-C included); a group interrupted half-way
up is torn down first.

Contract: nothing restarts when nothing changed; a group restarts whole (all ranks, all hosts)
when any rank's render hash or secret values changed or any rank is not running.
"""

from __future__ import annotations

import contextlib
import datetime
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Literal, Mapping, Sequence

from launcher.deploy import lock
from launcher.deploy.desired import Desired, File, groups, secrets_file, step_of
from launcher.deploy.diff import file_diff
from launcher.deploy.fan import each, first_error
from launcher.deploy.health import Verdict, gate
from launcher.deploy.manifest import Manifest, dumps, parse, same_secrets, secrets_digest
from launcher.deploy.remote import STEP_TIMEOUT_S, check, failure, show
from launcher.deploy.steps import (
    MISSING,
    Liveness,
    ensure_image,
    hold_argv,
    images_argv,
    liveness_argv,
    liveness_from,
    manifest_path,
    parse_files,
    parse_images,
    read_files_argv,
    read_manifests_argv,
    remove_argv,
    rotate_argv,
    run_liveness,
    stop_argv,
)
from launcher.errors import ExitCode, FleetError, HostKeyError, UnreachableError
from launcher.execute.files import DEFAULT_TIMEOUT_S as FILES_TIMEOUT_S
from launcher.execute.files import Put, Step, run_batch, write_files
from launcher.execute.transport import Result, Transport
from launcher.model import Host, Runtime
from launcher.output import Event, Progress, QuietProgress, mask
from launcher.render import FLEET_ROOT, MANIFEST_FILE, SECRETS_FILE, STOP_TIMEOUT_S


Connect = Callable[[Host], Transport]
Action = Literal["unchanged", "start", "restart", "remove"]
Outcome = Literal["unchanged", "healthy", "removed", "failed", "skipped", "planned"]


def deployment_dir(deployment: str) -> str:
    return f"{FLEET_ROOT}/{deployment}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One deployment on a set of hosts: what ``up``/``down``/``status`` work on."""

    deployment: str
    recipe: str
    hosts: tuple[Host, ...]
    units: tuple[Desired, ...]
    secrets: Mapping[str, str] = field(default_factory=dict)  # resolved on the control node


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    forks: int = 8
    check: bool = False
    diff: bool = False
    timeout_s: float | None = None  # overrides every unit's health deadline
    break_lock: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitReport:
    host: str
    unit: str
    group: str
    action: Action
    outcome: Outcome
    reason: str = ""
    generation: int | None = None
    detail: str = ""  # on failure: the unit's last log lines (masked)


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    units: tuple[UnitReport, ...]
    errors: tuple[str, ...] = ()  # one line each, masked
    diff: str = ""

    @property
    def exit_code(self) -> ExitCode:
        if not self.errors:
            return ExitCode.OK
        fine = any(u.outcome in ("healthy", "unchanged", "removed") for u in self.units)
        return ExitCode.PARTIAL if fine else ExitCode.FAILED


# ---------------------------------------------------------------------------------------------
# survey and decision (pure)


@dataclass(frozen=True, slots=True, kw_only=True)
class Survey:
    """What runs on one host: this deployment's manifests (of this host only), liveness, and
    (when asked for) which of the planned units' images are present."""

    manifests: Mapping[str, Manifest]
    live: Mapping[str, Liveness]
    images: Mapping[str, bool] = field(default_factory=dict)  # image -> present


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupChange:
    group: str
    step: int
    action: Literal["unchanged", "start", "restart"]
    reason: str
    units: tuple[Desired, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    groups: tuple[GroupChange, ...]
    orphans: tuple[Manifest, ...]  # deployed here before, not in the plan any more

    @property
    def changing(self) -> tuple[GroupChange, ...]:
        return tuple(g for g in self.groups if g.action != "unchanged")


def decide(
    units: Sequence[Desired], surveys: Mapping[str, Survey], secrets: Mapping[str, str] | None = None
) -> Decision:
    """Per restart group: ``start`` when no rank is deployed, ``restart`` when a rank is missing,
    its render hash changed, its secret values changed (``secrets``: the resolved values; a
    manifest without a secrets digest -- written before fleet recorded one -- counts as
    unchanged secrets, so upgrading fleet restarts nothing), or a rank is not running."""
    changes = []
    for group, members in groups(units).items():
        olds = {d.name: surveys[d.host].manifests.get(d.name) for d in members}
        missing = [d for d in members if olds[d.name] is None]
        changed = [d for d in members if (m := olds[d.name]) is not None and m.render_hash != d.render_hash]
        resecret = [d for d in members if d not in changed and _secrets_changed(d, olds[d.name], secrets)]
        down = [d for d in members if surveys[d.host].live.get(d.name, Liveness(state="missing")).state != "running"]
        action: Literal["unchanged", "start", "restart"]
        if len(missing) == len(members):
            action, reason = "start", "new"
        elif missing or changed or resecret:
            parts = [f"{d.host}/{d.name}" for d in (*missing, *changed)] + [f"secrets of {d.host}/{d.name}" for d in resecret]
            action, reason = "restart", "changed: " + ", ".join(parts)
        elif down:
            state = surveys[down[0].host].live.get(down[0].name, Liveness(state="missing")).state
            action, reason = "restart", f"{down[0].host}/{down[0].name} is {state}"
        else:
            action, reason = "unchanged", ""
        changes.append(GroupChange(group=group, step=step_of(members), action=action, reason=reason, units=members))
    wanted = {(d.host, d.name) for d in units}
    orphans = tuple(
        m for host, s in sorted(surveys.items()) for name, m in sorted(s.manifests.items()) if (host, name) not in wanted
    )
    return Decision(groups=tuple(changes), orphans=orphans)


def _secrets_changed(d: Desired, old: Manifest | None, values: Mapping[str, str] | None) -> bool:
    if old is None or old.secrets_digest is None or values is None:
        return False
    if any(ref.name not in values for ref in d.unit.secrets):
        return False  # not resolved here: nothing to compare
    sf = secrets_file(d, values)
    return sf is not None and not same_secrets(old.secrets_digest, sf.content)


# ---------------------------------------------------------------------------------------------
# sessions


class Session:
    """Open connections to the target's hosts; closes them on exit."""

    def __init__(self, hosts: Sequence[Host], connect: Connect, forks: int) -> None:
        self.forks = forks
        by_name = {h.name: h for h in hosts}
        results = each(sorted(by_name), lambda n: connect(by_name[n]), forks)
        self.transports: dict[str, Transport] = {
            n: t for n, t in results.items() if not isinstance(t, FleetError)
        }
        self.errors: dict[str, FleetError] = {n: e for n, e in results.items() if isinstance(e, FleetError)}

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
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

    def run(self, hosts: Sequence[str], fn: Callable[[str, Transport], object]) -> dict[str, object | FleetError]:
        return each(list(hosts), lambda h: fn(h, self.transports[h]), self.forks)


def survey_host(t: Transport, host: str, deployment: str, units: Sequence[Desired]) -> Survey:
    """One round trip (two when manifests name units not planned here: their liveness by the
    runtime they were deployed with)."""
    ask = _SurveyAsk.of(host, units, images=False)
    return ask.survey(t, deployment, run_batch(t, ask.steps(deployment), timeout=STEP_TIMEOUT_S))


@dataclass(frozen=True, slots=True, kw_only=True)
class _SurveyAsk:
    """The survey's commands for one host, and how to read their answers."""

    host: str
    names: Mapping[Runtime, tuple[str, ...]]  # planned units by (planned) runtime
    images: tuple[str, ...]

    @classmethod
    def of(cls, host: str, units: Sequence[Desired], images: bool) -> _SurveyAsk:
        mine = [d for d in units if d.host == host]
        names = {rt: tuple(sorted(d.name for d in mine if d.unit.runtime == rt)) for rt in _RUNTIMES}
        wanted = tuple(sorted({d.image for d in mine if d.image is not None})) if images else ()
        return cls(host=host, names=names, images=wanted)

    def steps(self, deployment: str) -> list[Step]:
        ddir = deployment_dir(deployment)
        out = [Step(argv=read_manifests_argv(ddir), label=f"cat {ddir}/*/manifest.json")]
        out += [Step(argv=liveness_argv(rt, self.names[rt]), label=f"{rt} liveness") for rt in _RUNTIMES if self.names[rt]]
        if self.images:
            out.append(Step(argv=images_argv(self.images), label="docker image inspect"))
        return out

    def survey(self, t: Transport, deployment: str, results: Sequence[Result]) -> Survey:
        answers = iter(results)
        read = next(answers)
        if not read.ok:
            raise failure(read, read.command)
        manifests: dict[str, Manifest] = {}
        for line in read.stdout_text.splitlines():
            m = parse(line) if line.strip() else None
            if m is not None and m.host == self.host and m.deployment == deployment:
                manifests[m.unit] = m
        live: dict[str, Liveness] = {}
        for rt in _RUNTIMES:
            if self.names[rt]:
                live.update(liveness_from(next(answers), rt, self.names[rt]))
        images = parse_images(next(answers).stdout_text) if self.images else {}
        for rt in _RUNTIMES:
            live.update(run_liveness(t, rt, sorted(m.unit for m in manifests.values() if m.unit not in live and m.runtime == rt)))
        return Survey(manifests=manifests, live=live, images=images)


_RUNTIMES: tuple[Runtime, ...] = ("docker", "systemd")


# ---------------------------------------------------------------------------------------------
# up


def up(target: Target, connect: Connect, options: Options, progress: Progress = QuietProgress()) -> Report:
    host_names = sorted({h.name for h in target.hosts})
    owner = lock.owner_line()
    with Session(target.hosts, connect, options.forks) as session:
        session.require_all()
        if options.check:
            return _check(target, session, options)
        surveys = lock_and_survey(target, session, host_names, owner, options.break_lock, images=True)
        try:
            return _apply(target, session, options, progress, owner, surveys)
        finally:
            session.run(host_names, lambda h, t: lock.release(t, target.deployment, owner))


def take_locks(session: Session, hosts: Sequence[str], deployment: str, owner: str, force: bool) -> None:
    """The deploy lock on every host (``force``: broken first), or none: on any failure the
    locks taken are released and the first error raised."""
    def take(h: str, t: Transport) -> None:
        if force:
            lock.break_lock(t, deployment)
        lock.acquire(t, deployment, owner)

    with _unlock_on_interrupt(session, hosts, deployment, owner):
        results = session.run(hosts, take)
    err = first_error(results)
    if err is not None:
        taken = [h for h, r in results.items() if not isinstance(r, FleetError)]
        session.run(taken, lambda h, t: lock.release(t, deployment, owner))
        raise err


@contextlib.contextmanager
def _unlock_on_interrupt(session: Session, hosts: Sequence[str], deployment: str, owner: str) -> Iterator[None]:
    """Ctrl-C while locks are being taken: which hosts hold ours is unknown (a lock may be taken
    before its answer arrives), so release everywhere -- release only removes a lock that is ours."""
    try:
        yield
    except KeyboardInterrupt:
        session.run(hosts, lambda h, t: lock.release(t, deployment, owner))
        raise


def stop_wave(rank: int) -> int:
    """When a rank stops within its step: serving ranks (rank 0) first.  A multi-node
    instance's rank 0 finishes its in-flight requests on SIGTERM, but dies at once when a peer
    rank goes first (its process group breaks)."""
    return 0 if rank == 0 else 1


def survey_all(target: Target, session: Session, hosts: Sequence[str]) -> dict[str, Survey]:
    results = session.run(hosts, lambda h, t: survey_host(t, h, target.deployment, target.units))
    err = first_error(results)
    if err is not None:
        raise err
    return {h: s for h, s in results.items() if isinstance(s, Survey)}


def lock_and_survey(
    target: Target, session: Session, hosts: Sequence[str], owner: str, force: bool, *, images: bool
) -> dict[str, Survey]:
    """:func:`take_locks` and :func:`survey_all` in one round trip per host (the survey runs
    only where the lock was taken); ``images``: also which planned images each host has.
    On any failure the locks taken are released; a lock error is raised before a survey error."""
    dep = target.deployment
    taken: set[str] = set()

    def one(h: str, t: Transport) -> Survey:
        ask = _SurveyAsk.of(h, target.units, images)
        steps = [Step(argv=lock.break_argv(dep), label=f"rm -rf {lock.lock_dir(dep)}")] if force else []
        steps.append(Step(argv=lock.acquire_argv(dep, owner), label=f"mkdir {lock.lock_dir(dep)}"))
        results = run_batch(t, [*steps, *ask.steps(dep)], timeout=STEP_TIMEOUT_S)
        if force and not results[0].ok:
            raise failure(results[0], results[0].command)
        lock.acquired(results[len(steps) - 1], dep)
        taken.add(h)
        return ask.survey(t, dep, results[len(steps):])

    with _unlock_on_interrupt(session, hosts, dep, owner):
        results = session.run(hosts, one)
    errors = {h: r for h, r in results.items() if isinstance(r, FleetError)}
    if errors:
        session.run(sorted(taken), lambda h, t: lock.release(t, dep, owner))
        raise next((e for h, e in errors.items() if h not in taken), next(iter(errors.values())))
    return {h: s for h, s in results.items() if isinstance(s, Survey)}


def _check(target: Target, session: Session, options: Options) -> Report:
    """``--check``: what ``up`` would do, and with ``--diff`` every file that would change.
    Read operations only."""
    hosts = sorted({h.name for h in target.hosts})
    surveys = survey_all(target, session, hosts)
    decision = decide(target.units, surveys, target.secrets)
    flat = [r for g in decision.groups for r in _planned(g)]
    flat += [
        UnitReport(host=m.host, unit=m.unit, group=m.group, action="remove", outcome="planned", reason="not in the plan")
        for m in decision.orphans
    ]
    text = ""
    if options.diff:
        text = _diffs(target, session, decision, surveys)
    return Report(units=tuple(flat), diff=text)


def _planned(g: GroupChange) -> list[UnitReport]:
    return [
        UnitReport(
            host=d.host,
            unit=d.name,
            group=g.group,
            action=g.action,
            outcome="unchanged" if g.action == "unchanged" else "planned",
            reason=g.reason,
        )
        for d in g.units
    ]


def _diffs(target: Target, session: Session, decision: Decision, surveys: Mapping[str, Survey]) -> str:
    wanted: dict[str, list[File]] = {}
    old_paths: dict[str, set[str]] = {}
    for g in decision.changing:
        for d in g.units:
            files = list(d.files)
            sf = secrets_file(d, target.secrets)
            if sf is not None:
                files.append(sf)
            wanted.setdefault(d.host, []).extend(files)
            old = surveys[d.host].manifests.get(d.name)
            old_paths.setdefault(d.host, set()).update(old.files if old else ())
    for m in decision.orphans:
        old_paths.setdefault(m.host, set()).update(m.files)
    hosts = sorted(set(wanted) | set(old_paths))

    def read(h: str, t: Transport) -> dict[str, bytes | None]:
        paths = sorted({f.path for f in wanted.get(h, [])} | old_paths.get(h, set()))
        return parse_files(check(t, read_files_argv(paths), label="read current files")) if paths else {}

    current = session.run(hosts, read)
    err = first_error(current)
    if err is not None:
        raise err
    secrets = tuple(target.secrets.values())
    chunks = []
    for h in hosts:
        now = current[h]
        assert isinstance(now, dict)
        new = {f.path: f.content for f in wanted.get(h, [])}
        for path in sorted(set(new) | old_paths.get(h, set())):
            if path.endswith("/" + MANIFEST_FILE):
                continue  # fleet's own record, rewritten by every deploy
            is_secret = path.endswith("/" + SECRETS_FILE)
            chunks.append(file_diff(h, path, now.get(path), new.get(path), secrets, env_values=is_secret))
    return "".join(chunks)


def _apply(
    target: Target, session: Session, options: Options, progress: Progress, owner: str, surveys: Mapping[str, Survey]
) -> Report:
    decision = decide(target.units, surveys, target.secrets)
    secrets = tuple(target.secrets.values())
    reports: dict[tuple[str, str], UnitReport] = {}
    errors: list[str] = []
    for g in decision.groups:
        for r in _planned(g):
            reports[(r.host, r.unit)] = r if g.action != "unchanged" else replace(
                r, generation=_gen(surveys, r.host, r.unit)
            )
            if g.action == "unchanged":
                progress.update(Event(host=r.host, unit=r.unit, state="unchanged"))

    def fail(keys: Sequence[tuple[str, str]], message: str, outcome: Outcome = "failed", detail: str = "") -> None:
        for k in keys:
            reports[k] = replace(reports[k], outcome=outcome, detail=mask(detail, secrets))
            progress.update(Event(host=k[0], unit=k[1], state=outcome))
        if outcome == "failed":
            errors.append(mask(message, secrets))

    # Pull before stopping anything, so a missing image never leaves a group down.
    changing = decision.changing
    pulled = _pull(session, changing, surveys, progress)
    for g in changing:
        bad = [pulled[d.host] for d in g.units if isinstance(pulled.get(d.host), FleetError)]
        if bad:
            fail([(d.host, d.name) for d in g.units], str(bad[0]))
    ok_groups = [g for g in changing if all(reports[(d.host, d.name)].outcome == "planned" for d in g.units)]

    for m, res in _remove_orphans(session, decision.orphans, progress).items():
        outcome: Outcome = "failed" if isinstance(res, FleetError) else "removed"
        reports[(m.host, m.unit)] = UnitReport(
            host=m.host, unit=m.unit, group=m.group, action="remove", outcome=outcome, reason="not in the plan"
        )
        if isinstance(res, FleetError):
            errors.append(mask(str(res), secrets))

    steps = sorted({g.step for g in ok_groups})
    stopped_line = bool(errors)
    for step in steps:
        batch = [g for g in ok_groups if g.step == step]
        if stopped_line:
            fail([(d.host, d.name) for g in batch for d in g.units], "", outcome="skipped")
            continue
        verdicts = start_step(target, session, batch, surveys, options, progress, owner)
        for g in batch:
            v = verdicts[g.group]
            keys = [(d.host, d.name) for d in g.units]
            if v.healthy:
                for k in keys:
                    reports[k] = replace(reports[k], outcome="healthy", generation=_next_gen(surveys, g, k))
            else:
                fail(keys, str(v.error))
                if v.culprit in reports and v.detail:  # the log lines belong to the unit that failed
                    reports[v.culprit] = replace(reports[v.culprit], detail=mask(v.detail, secrets))
        if any(not verdicts[g.group].healthy for g in batch):
            stopped_line = True
    ordered = [reports[(d.host, d.name)] for d in target.units] + [
        r for k, r in reports.items() if r.action == "remove"
    ]
    return Report(units=tuple(ordered), errors=tuple(errors))


def _gen(surveys: Mapping[str, Survey], host: str, unit: str) -> int | None:
    m = surveys[host].manifests.get(unit)
    return m.generation if m else None


def _next_gen(surveys: Mapping[str, Survey], g: GroupChange, key: tuple[str, str]) -> int:
    d = next(d for d in g.units if (d.host, d.name) == key)
    return _generation(surveys[d.host].manifests.get(d.name), d)


def _generation(old: Manifest | None, d: Desired) -> int:
    if old is None:
        return 1
    return old.generation if old.render_hash == d.render_hash else old.generation + 1


def _pull(
    session: Session, changing: Sequence[GroupChange], surveys: Mapping[str, Survey], progress: Progress
) -> dict[str, object | FleetError]:
    """Images of the changing units; what the survey found present costs no round trip."""
    images: dict[str, list[tuple[str, str]]] = {}  # host -> (image, unit)
    for g in changing:
        for d in g.units:
            if d.image is not None:
                images.setdefault(d.host, []).append((d.image, d.name))

    def pull(h: str, t: Transport) -> None:
        done: dict[str, str] = {}
        for image, unit in images[h]:
            if image not in done:
                progress.update(Event(host=h, unit=unit, state="pulling", detail=image))
                done[image] = "present" if surveys[h].images.get(image) else ensure_image(t, image)
            progress.update(Event(host=h, unit=unit, state="image " + done[image]))

    return session.run(sorted(images), pull)


def _remove_orphans(
    session: Session, orphans: Sequence[Manifest], progress: Progress
) -> dict[Manifest, object | FleetError]:
    out: dict[Manifest, object | FleetError] = {}
    # Reverse start order is not known for orphans; gateway/router names sort after engines'
    # only by accident, so remove them all at once per host: they are not in the plan anyway.
    by_host: dict[str, list[Manifest]] = {}
    for m in orphans:
        by_host.setdefault(m.host, []).append(m)

    def remove(h: str, t: Transport) -> None:
        for m in by_host[h]:
            progress.update(Event(host=h, unit=m.unit, state="removing"))
            retire(t, m)
            progress.update(Event(host=h, unit=m.unit, state="removed"))

    session.run(sorted(by_host), lambda h, t: hold(t, [(m.runtime, m.unit) for m in by_host[h]]))
    results = session.run(sorted(by_host), remove)
    for h, res in results.items():
        for m in by_host[h]:
            out[m] = res
    return out


def retire(t: Transport, m: Manifest, keep_prev: bool = True) -> None:
    """Stops and removes a unit; keeps its last files in ``prev/`` (secrets never kept) unless
    ``keep_prev`` is false (what ``prev/`` held stays).  One round trip."""
    unit_dir = _unit_dir(m)
    steps = (
        Step(argv=stop_argv(m.runtime, m.unit, STOP_TIMEOUT_S), label=f"stop {m.unit}"),
        *((Step(argv=rotate_argv(unit_dir, m.files), label=f"keep {unit_dir}/prev"),) if keep_prev else ()),
        Step(argv=remove_argv((*m.files, manifest_path(unit_dir))), label=f"rm {unit_dir}/*"),
    )
    write_files(t, (), steps=steps, timeout=STOP_TIMEOUT_S + 60 + 2 * STEP_TIMEOUT_S)


def hold(t: Transport, units: Sequence[tuple[Runtime, str]]) -> None:
    """No automatic restarts for these units from now on (they are about to stop); best effort."""
    for rt in ("docker", "systemd"):
        argv = hold_argv(rt, [name for r, name in units if r == rt])
        if argv is not None:
            t.run(argv, timeout=STEP_TIMEOUT_S)


def _unit_dir(m: Manifest) -> str:
    return f"{deployment_dir(m.deployment)}/{m.unit}"


def start_step(
    target: Target,
    session: Session,
    batch: Sequence[GroupChange],
    surveys: Mapping[str, Survey],
    options: Options,
    progress: Progress,
    owner: str,
) -> dict[str, Verdict]:
    """Restarts ``batch`` (groups of one start step) whole: hold every rank on every host, then
    per host stop + install (one round trip), then start every rank, then gate.  Groups that do
    not come up healthy are torn down.  Verdicts by group."""
    units = [d for g in batch for d in g.units]
    by_host: dict[str, list[Desired]] = {}
    for d in units:
        by_host.setdefault(d.host, []).append(d)
    hosts = sorted(by_host)
    secrets = tuple(target.secrets.values())
    verdicts: dict[str, Verdict] = {}
    step_id = uuid.uuid4().hex[:12]

    def serial(argv: Sequence[str]) -> tuple[str, ...]:
        return lock.serial_argv(target.deployment, owner, step_id, argv)

    try:
        # Stop every rank of the changing groups first: no old rank may rendezvous with a new one.
        # Hold them all first, on every host, so no rank is restarted by its runtime meanwhile
        # (a unit the survey found missing has nothing to hold).  Every host is held before any
        # stops, and every host is stopped before any starts: those barriers stay round trips.
        held = {h: [(d.unit.runtime, d.name) for d in by_host[h] if not _missing(surveys, d)] for h in hosts}
        session.run([h for h in hosts if held[h]], lambda h, t: hold(t, held[h]))
        # Running leaders of multi-node groups stop, with their grace, before the other ranks
        # (see stop_wave).
        leaders = {h: [d for d in by_host[h] if stop_wave(d.unit.rank) == 0 and not _missing(surveys, d)
                       and sum(1 for u in units if u.unit.group == d.unit.group) > 1] for h in hosts}  # fmt: skip
        drained = session.run([h for h in hosts if leaders[h]],
                              lambda h, t: _stop_units(t, leaders[h], progress, STOP_TIMEOUT_S))  # fmt: skip
        when = _now()
        installed = session.run(
            [h for h in hosts if not isinstance(drained.get(h), FleetError)],
            lambda h, t: _stop_and_install(t, by_host[h], surveys[h], target, owner.split(" ")[0], when, progress,
                                           stopped=frozenset(d.name for d in leaders[h])),
        )
        started = session.run(
            [h for h in installed if not isinstance(installed[h], FleetError)],
            lambda h, t: _start_units(t, by_host[h], secrets, progress, serial),
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
        pending = {g.group: g.units for g in batch if g.group not in verdicts}
        verdicts.update(
            gate(pending, session.transports, timeout_override=options.timeout_s, forks=session.forks, progress=progress)
        )
    finally:
        # Whatever did not come up healthy (failure or Ctrl-C) is torn down: nothing half-up.
        failed = [d for g in batch if not (v := verdicts.get(g.group)) or not v.healthy for d in g.units]
        if failed:
            teardown: dict[str, list[Desired]] = {}
            for d in failed:
                teardown.setdefault(d.host, []).append(d)
            down_hosts = sorted(teardown)

            def fence_and_hold(h: str, t: Transport) -> None:
                # A start Ctrl-C stopped waiting for may still run on the host: wait for it and
                # cancel the rest, so the stop below comes after every start of this step.
                check(t, lock.fence_argv(target.deployment, step_id, STEP_TIMEOUT_S), label="cancel the starts",
                      timeout=STEP_TIMEOUT_S + 30)  # fmt: skip
                hold(t, [(d.unit.runtime, d.name) for d in teardown[h]])

            fenced = session.run(down_hosts, fence_and_hold)
            stopped = session.run(down_hosts, lambda h, t: _stop_units(t, teardown[h], progress, None))
            left = {h: err for h in down_hosts for err in (fenced.get(h), stopped.get(h)) if isinstance(err, FleetError)}
            for h, err in left.items():
                progress.note(mask(f"{h}: tearing down {', '.join(d.name for d in teardown[h])} failed: {err}", secrets))
            for g in batch:
                v = verdicts.get(g.group)
                where = sorted({d.host for d in g.units if d.host in left})
                if v is not None and v.error is not None and where:
                    more = "; ".join(f"tearing it down on {h} failed too: {str(left[h]).removeprefix(h + ': ')}" for h in where)
                    verdicts[g.group] = replace(v, error=FleetError(mask(f"{v.error}; {more}", secrets)))
    return verdicts


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _missing(surveys: Mapping[str, Survey], d: Desired) -> bool:
    s = surveys.get(d.host)
    return s is not None and s.live.get(d.name, MISSING).state == "missing"


def _stop_steps(units: Sequence[Desired], progress: Progress, grace_s: int | None) -> list[Step]:
    """Stops units, last rank first; ``grace_s`` lets a serving engine drain (None: at once)."""
    steps = []
    for d in reversed(units):
        progress.update(Event(host=d.host, unit=d.name, state="stopping"))
        steps.append(Step(argv=stop_argv(d.unit.runtime, d.name, grace_s), label=f"stop {d.name}"))
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
            generation=_generation(old, d),
            deployed_by=who,
            deployed_at=when,
            files=d.owned,
            secrets_digest=secrets_digest(sf.content) if sf is not None else None,
        )
        manifests.append(Put(path=manifest_path(d.dir), data=dumps(manifest).encode(), mode=0o644))
    timeout = len(units) * (STOP_TIMEOUT_S + 60) + FILES_TIMEOUT_S
    write_files(t, (*files, *manifests), steps=steps, remove=stale, timeout=timeout)


def _start_units(
    t: Transport, units: Sequence[Desired], secrets: Sequence[str], progress: Progress,
    serial: Callable[[Sequence[str]], tuple[str, ...]],
) -> None:
    """Every start command of ``units`` in order, in one round trip, each as ``serial`` wraps
    it (see :func:`lock.serial_argv`); the first failure raises."""
    steps = []
    for d in units:
        progress.update(Event(host=d.host, unit=d.name, state="starting"))
        steps += [Step(argv=serial(argv), label=show(argv, secrets)) for argv in d.start]
    for r in run_batch(t, steps, timeout=len(steps) * STEP_TIMEOUT_S):
        if not r.ok:
            raise failure(r, r.command, secrets)


# ---------------------------------------------------------------------------------------------
# down / unlock


def down(
    target: Target, connect: Connect, options: Options, progress: Progress = QuietProgress(), *, keep_prev: bool = True
) -> Report:
    """Stops and removes every unit of the deployment on the target's hosts, gateway first,
    engines and Mooncake last.  Keeps images, caches, weights and each unit's last files in
    ``prev/`` (``keep_prev`` false: ``prev/`` keeps what it held -- for removing a generation
    that never served, so a later rollback does not bring it back); removes the current files,
    the manifest and the secrets file."""
    hosts = sorted({h.name for h in target.hosts})
    owner = lock.owner_line()
    with Session(target.hosts, connect, options.forks) as session:
        session.require_all()
        surveys = lock_and_survey(target, session, hosts, owner, options.break_lock, images=False)
        try:
            order = {d.name: d.unit.start_order for d in target.units}
            found = [m for s in surveys.values() for m in s.manifests.values()]
            by_host_all: dict[str, list[Manifest]] = {}
            for m in found:
                by_host_all.setdefault(m.host, []).append(m)
            session.run(sorted(by_host_all), lambda h, t: hold(t, [(m.runtime, m.unit) for m in by_host_all[h]]))
            reports: list[UnitReport] = []
            errors: list[str] = []
            # Reverse start order; within a step serving ranks first (see stop_wave).
            steps = sorted({(-order.get(m.unit, 99), stop_wave(m.rank)) for m in found})
            for step in steps:
                batch: dict[str, list[Manifest]] = {}
                for m in found:
                    if (-order.get(m.unit, 99), stop_wave(m.rank)) == step:
                        batch.setdefault(m.host, []).append(m)

                def remove(h: str, t: Transport, batch: dict[str, list[Manifest]] = batch) -> None:
                    for m in batch[h]:
                        progress.update(Event(host=h, unit=m.unit, state="removing"))
                        retire(t, m, keep_prev)
                        progress.update(Event(host=h, unit=m.unit, state="removed"))

                results = session.run(sorted(batch), remove)
                for h, ms in batch.items():
                    res = results[h]
                    for m in ms:
                        outcome: Outcome = "failed" if isinstance(res, FleetError) else "removed"
                        reports.append(
                            UnitReport(host=h, unit=m.unit, group=m.group, action="remove", outcome=outcome)
                        )
                    if isinstance(res, FleetError):
                        errors.append(str(res))
            return Report(units=tuple(reports), errors=tuple(errors))
        finally:
            session.run(hosts, lambda h, t: lock.release(t, target.deployment, owner))


def unlock(target: Target, connect: Connect, forks: int = 8) -> dict[str, str | None]:
    """Breaks the deploy lock on every host; returns the previous owner per host (None: none)."""
    with Session(target.hosts, connect, forks) as session:
        session.require_all()
        results = session.run(sorted(session.transports), lambda h, t: lock.break_lock(t, target.deployment))
        err = first_error(results)
        if err is not None:
            raise err
        return {h: r if isinstance(r, str) else None for h, r in results.items()}

