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

from dataclasses import dataclass, field, replace
from typing import Literal, Mapping, Sequence

from launcher.deploy import crossing, lock
from launcher.deploy.crossing import Crossing
from launcher.deploy.desired import File, secrets_file
from launcher.deploy.diff import file_diff
from launcher.execute.fanout import first_error
from launcher.deploy.manifest import Manifest
from launcher.remote import check
from launcher.deploy.session import Connect, Connections, DeploySession, Target, stop_wave
from launcher.deploy.owner import OwnerConflict
from launcher.deploy.steps import parse_files, read_files_argv
from launcher.runtimes.container import ensure_image
from launcher.deploy.survey import Decision, GroupChange, Survey, decide, next_generation
from launcher.errors import ExitCode, FleetError
from launcher.execute.transport import Transport
from launcher.output import Event, Progress, QuietProgress, mask
from launcher.render import MANIFEST_FILE, SECRETS_FILE

Action = Literal["unchanged", "start", "restart", "remove", "unknown"]
# "unreachable" / "unknown": --check could not read the unit's host / could not judge the unit
# (a host of its group unreachable, a secret this control host cannot read).
Outcome = Literal["unchanged", "healthy", "removed", "failed", "skipped", "planned", "unreachable", "unknown"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    forks: int = 8
    check: bool = False
    diff: bool = False
    timeout_s: float | None = None  # overrides every unit's health deadline
    break_lock: bool = False
    # --check: secrets this control host cannot read (name -> why); their units' change is unknown
    unknown_secrets: Mapping[str, str] = field(default_factory=dict)


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
    crossing: Crossing | None = None  # the PD canary's verdict (see launcher/deploy/crossing.py)

    @property
    def exit_code(self) -> ExitCode:
        if not self.errors:
            return ExitCode.OK
        fine = any(u.outcome in ("healthy", "unchanged", "removed", "planned") for u in self.units)
        return ExitCode.PARTIAL if fine else ExitCode.FAILED


# ---------------------------------------------------------------------------------------------
# up


def up(target: Target, connect: Connect, options: Options, progress: Progress = QuietProgress()) -> Report:
    with DeploySession(target, connect, forks=options.forks, progress=progress, timeout_s=options.timeout_s) as session:
        if options.check:
            return _check(session, options)
        session.require_all()
        report = _apply(session, session.lock_and_survey(force=options.break_lock, images=True))
    return session.reported(report)


def survey_reachable(session: DeploySession) -> tuple[dict[str, Survey], dict[str, str]]:
    """``--check``'s reading: every host that answers is surveyed (no lock, nothing written);
    returns the surveys and, per host that could not be connected or surveyed, its one-line
    error.  Unknown or changed host keys, and a refusal (bad input: the deployment belongs to
    another playbook there), still stop everything."""
    session.refuse_bad_keys()
    results = session.survey_each(sorted(session.transports))
    for err in results.values():
        if isinstance(err, OwnerConflict) or (isinstance(err, FleetError) and err.exit_code == ExitCode.BAD_INPUT):
            raise err
    surveys = {h: s for h, s in results.items() if isinstance(s, Survey)}
    failed = {h: str(e) for h, e in (*session.errors.items(), *results.items()) if isinstance(e, FleetError)}
    return surveys, dict(sorted(failed.items()))


def _check(session: DeploySession, options: Options) -> Report:
    """``--check``: what ``up`` would do on every host that answers, and with ``--diff`` every
    file that would change there.  Read operations only.  A group with a host that does not
    answer is ``unknown`` (its units there ``unreachable``), as is an unchanged group whose
    secrets this control host cannot read; every unreachable host is one error line."""
    target = session.target
    surveys, failed = survey_reachable(session)
    blind = {d.unit.group for d in target.units if d.host in failed}
    decision = decide([d for d in target.units if d.unit.group not in blind], surveys, target.secrets)
    by_key = {(r.host, r.unit): r for g in decision.groups for r in _planned(g, options.unknown_secrets)}
    for d in target.units:
        if d.unit.group in blind:
            why = failed[d.host] if d.host in failed else "its group also runs on a host that did not answer"
            by_key[(d.host, d.name)] = UnitReport(
                host=d.host, unit=d.name, group=d.unit.group, action="unknown",
                outcome="unreachable" if d.host in failed else "unknown", reason=why.removeprefix(d.host + ": "),
            )  # fmt: skip
    flat = [by_key[(d.host, d.name)] for d in target.units]
    flat += [
        UnitReport(host=m.host, unit=m.unit, group=m.group, action="remove", outcome="planned", reason="not in the plan")
        for m in decision.orphans
    ]
    text = ""
    if options.diff:
        text = _diffs(target, session, decision, surveys)
    return Report(units=tuple(flat), errors=tuple(failed.values()), diff=text)


def _planned(g: GroupChange, unknown_secrets: Mapping[str, str] | None = None) -> list[UnitReport]:
    """The group's units as ``decide`` left them; ``unknown_secrets`` (``--check``): an
    unchanged group using one of them might still change (its secrets file cannot be compared)."""
    unreadable = [why for d in g.units for ref in d.unit.secrets if (why := (unknown_secrets or {}).get(ref.name))]
    if g.action == "unchanged" and unreadable:
        return [UnitReport(host=d.host, unit=d.name, group=g.group, action="unknown", outcome="unknown",
                           reason=f"would change: unknown ({unreadable[0]})") for d in g.units]  # fmt: skip
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


def _diffs(target: Target, session: DeploySession, decision: Decision, surveys: Mapping[str, Survey]) -> str:
    wanted: dict[str, list[File]] = {}
    old_paths: dict[str, set[str]] = {}
    unknown: set[tuple[str, str]] = set()  # secrets files whose values this control host cannot read
    for g in decision.changing:
        for d in g.units:
            files = list(d.files)
            if not all(ref.name in target.secrets for ref in d.unit.secrets):
                unknown.add((d.host, d.secrets_path))
            sf = None if (d.host, d.secrets_path) in unknown else secrets_file(d, target.secrets)
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

    current = session.run(hosts, read, "read")
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
            if path.endswith("/" + MANIFEST_FILE) or (h, path) in unknown:
                continue  # fleet's own record, rewritten by every deploy; a secrets file it cannot judge
            is_secret = path.endswith("/" + SECRETS_FILE)
            chunks.append(file_diff(h, path, now.get(path), new.get(path), secrets, secrets_file=is_secret))
    return "".join(chunks)


def _apply(session: DeploySession, surveys: Mapping[str, Survey]) -> Report:
    target, progress = session.target, session.progress
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

    for m, res in _remove_orphans(session, decision.orphans).items():
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
        verdicts = session.start(batch, surveys)
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
    canary = None
    if crossing.applies(target.units):
        # Healthy ranks are not a healthy PD deployment until a request crosses it; a prefill
        # whose decode failed (or the reverse) serves nothing either.  Either way what this run
        # started is torn down.
        started = [g for g in ok_groups if all(reports[(d.host, d.name)].outcome == "healthy" for d in g.units)]
        if not errors:
            progress.note("PD canary: one request through the router, the KV transfer read on the decode")
            canary = crossing.cross(session.transports, target.units)
            progress.note(canary.evidence() if canary.ok else canary.error)
        if errors or (canary is not None and not canary.ok):
            session.tear_down(started)
            if canary is not None and not canary.ok:
                fail([(d.host, d.name) for g in started for d in g.units], canary.error)
            else:
                for g in started:
                    for d in g.units:
                        reports[(d.host, d.name)] = replace(reports[(d.host, d.name)], outcome="failed",
                                                            reason="torn down: the PD deployment failed")  # fmt: skip
    ordered = [reports[(d.host, d.name)] for d in target.units] + [
        r for k, r in reports.items() if r.action == "remove"
    ]
    return Report(units=tuple(ordered), errors=tuple(errors), crossing=canary)


def _gen(surveys: Mapping[str, Survey], host: str, unit: str) -> int | None:
    m = surveys[host].manifests.get(unit)
    return m.generation if m else None


def _next_gen(surveys: Mapping[str, Survey], g: GroupChange, key: tuple[str, str]) -> int:
    d = next(d for d in g.units if (d.host, d.name) == key)
    return next_generation(surveys[d.host].manifests.get(d.name), d)


def _pull(
    session: DeploySession, changing: Sequence[GroupChange], surveys: Mapping[str, Survey], progress: Progress
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

    return session.run(sorted(images), pull, "pull")


def _remove_orphans(session: DeploySession, orphans: Sequence[Manifest]) -> dict[Manifest, object | FleetError]:
    # Reverse start order is not known for orphans; gateway/router names sort after engines'
    # only by accident, so remove them all at once per host: they are not in the plan anyway.
    session.hold([(m.host, m.runtime, m.unit) for m in orphans])
    results = session.retire(orphans)
    return {m: results[m.host] for m in orphans}


# ---------------------------------------------------------------------------------------------
# down / unlock


def down(
    target: Target, connect: Connect, options: Options, progress: Progress = QuietProgress(), *, keep_prev: bool = True
) -> Report:
    """Stops and removes every unit of the deployment on the target's hosts, gateway first,
    engines and Mooncake last.  Keeps images, caches, weights and each unit's last files in
    ``prev/`` (``keep_prev`` false: ``prev/`` keeps what it held -- for removing a generation
    that never served, so a later rollback does not bring it back); removes the current files,
    the manifest and the secrets file.  ``options.check``: what it would remove (see
    :func:`_down_check`)."""
    if options.check:
        return _down_check(target, connect, options)
    with DeploySession(target, connect, forks=options.forks, progress=progress) as session:
        session.require_all()
        surveys = session.lock_and_survey(force=options.break_lock, images=False)
        order = {d.name: d.unit.start_order for d in target.units}
        found = [m for s in surveys.values() for m in s.manifests.values()]
        session.hold([(m.host, m.runtime, m.unit) for m in found])
        reports: list[UnitReport] = []
        errors: list[str] = []
        # Reverse start order; within a step serving ranks first (see stop_wave).
        steps = sorted({(-order.get(m.unit, 99), stop_wave(m.rank)) for m in found})
        for step in steps:
            batch = [m for m in found if (-order.get(m.unit, 99), stop_wave(m.rank)) == step]
            results = session.retire(batch, keep_prev=keep_prev)
            for h in dict.fromkeys(m.host for m in batch):
                res = results[h]
                for m in (m for m in batch if m.host == h):
                    outcome: Outcome = "failed" if isinstance(res, FleetError) else "removed"
                    reports.append(UnitReport(host=h, unit=m.unit, group=m.group, action="remove", outcome=outcome))
                if isinstance(res, FleetError):
                    errors.append(str(res))
    return session.reported(Report(units=tuple(reports), errors=tuple(errors)))


def _down_check(target: Target, connect: Connect, options: Options) -> Report:
    """``down --check``: every unit of the deployment found on the hosts that answer (what
    ``down`` would stop and remove); the planned units of each host that does not answer are
    ``unreachable``, one error line per such host.  Read operations only."""
    with DeploySession(target, connect, forks=options.forks) as session:
        surveys, failed = survey_reachable(session)
    reports = [
        UnitReport(host=h.name, unit=m.unit, group=m.group, action="remove", outcome="planned",
                   reason="would stop and remove", generation=m.generation)
        for h in target.hosts if h.name in surveys
        for m in sorted(surveys[h.name].manifests.values(), key=lambda m: m.unit)
    ]  # fmt: skip
    reports += [
        UnitReport(host=d.host, unit=d.name, group=d.unit.group, action="unknown", outcome="unreachable",
                   reason=failed[d.host].removeprefix(d.host + ": "))
        for d in target.units if d.host in failed
    ]  # fmt: skip
    return Report(units=tuple(reports), errors=tuple(failed.values()))


@dataclass(frozen=True, slots=True)
class Unlocked:
    """What ``unlock`` removed on one host: the owner lines of the deploy lock and of the
    preflight claim it found (None: not there)."""

    lock: str | None = None
    claim: str | None = None

    @property
    def found(self) -> bool:
        return self.lock is not None or self.claim is not None


def unlock(target: Target, connect: Connect, forks: int = 8) -> dict[str, Unlocked]:
    """Breaks the deploy lock and the preflight claim on every host, whoever holds them (the
    operator's word that the run holding them is gone); returns what each host had."""
    def both(t: Transport) -> Unlocked:
        return Unlocked(lock=lock.break_lock(t, target.deployment),
                        claim=lock.break_lock(t, lock.claim_name(target.deployment, "preflight")))  # fmt: skip

    with Connections(target.hosts, connect, forks) as session:
        session.require_all()
        results = session.run(sorted(session.transports), lambda h, t: both(t), "unlock")
        err = first_error(results)
        if err is not None:
            raise err
        return {h: r for h, r in results.items() if isinstance(r, Unlocked)}

