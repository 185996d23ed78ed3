"""``status`` and ``logs``: read-only views of a deployment on its hosts.

Contract: nothing is written and no lock is taken.  Unknown host keys still refuse (nothing is
sent to a host we cannot authenticate); an unreachable host shows as ``unreachable`` rows.
Drift compares the files on the host with what would be rendered now (the secrets file is not
compared: status never resolves secrets).  A multi-node group is only as healthy as its ranks:
when one rank is not running or was restarted by the runtime (a rank cannot rejoin a formed
vLLM/SGLang group; measured with the real vLLM: rank 0 keeps answering /health while the
restarted rank 1 hangs), every rank of it that answers its health check reads ``failing``.  A
unit's own health reads ``failing`` after two failed probes in a row (:func:`health_verdicts`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from launcher.deploy import crossing
from launcher.deploy.desired import Desired, groups
from launcher.deploy.health import PROBE_TIMEOUT_S
from launcher.deploy.manifest import Manifest
from launcher.deploy.session import Connect, Connections, Target
from launcher.deploy.survey import Survey, survey_host
from launcher.remote import STEP_TIMEOUT_S, check
from launcher.deploy.steps import hashes_argv, parse_hashes, probe_argv
from launcher.runtimes import registry as runtimes
from launcher.errors import FleetError, UsageError
from launcher.execute.transport import Transport
from launcher.deploy import watchstate as watch_state


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitStatus:
    host: str
    unit: str
    role: str
    rank: int
    group: str
    state: str  # running / starting / restarting / exited / missing / unreachable
    health: str  # ok / failing / - (no check or not running) / ?
    generation: int | None
    drift: str  # none / files: a, b / render hash / not deployed / not in plan / ?
    restarts: int = 0
    watch: str = ""  # why `fleet watch` gave up on the unit's group (a crash loop), "" : it did not


def status(target: Target, connect: Connect, forks: int = 8) -> tuple[UnitStatus, ...]:
    hosts = [h.name for h in target.hosts]  # inventory order: h9 before h10
    with Connections(target.hosts, connect, forks) as session:
        session.refuse_bad_keys()
        reachable = [h for h in hosts if h in session.transports]
        results = session.run(reachable, lambda h, t: _host_status(t, h, target))
    rows: list[UnitStatus] = []
    records: dict[str, list[watch_state.Record]] = {}
    manifests: dict[tuple[str, str], Manifest] = {}
    for h in hosts:
        res = results.get(h) if h in results else session.errors.get(h)
        mine = [d for d in target.units if d.host == h]
        if isinstance(res, FleetError) or res is None:
            rows += [_row(d, state="unreachable", health="?", generation=None, drift="?") for d in mine]
        else:
            assert isinstance(res, tuple)
            rows += res[0]
            for g, rec in res[1].items():
                records.setdefault(g, []).append(rec)
            manifests.update({(h, u): m for u, m in res[2].items()})
    return _watched(group_verdicts(rows), target, records, manifests)


def _watched(
    rows: tuple[UnitStatus, ...], target: Target, records: dict[str, list[watch_state.Record]],
    manifests: dict[tuple[str, str], Manifest],
) -> tuple[UnitStatus, ...]:  # fmt: skip
    """The rows of groups the watch gave up on (its mark still about what they run) say why."""
    failed = {}
    for g, units in groups(target.units).items():
        history = watch_state.merged(records.get(g, []), watch_state.stamp(manifests.get((d.host, d.name)) for d in units))
        if history.failed:
            failed[g] = history.failed
    return tuple(dataclasses.replace(r, watch=failed[r.group]) if r.group in failed else r for r in rows)


def probe(target: Target, connect: Connect, forks: int = 8) -> crossing.Crossing:
    """``status --probe``: ``up``'s PD canary (:mod:`launcher.deploy.crossing`) on what runs now."""
    if not crossing.applies(target.units):
        raise UsageError(f"--probe sends a request across a prefill/decode deployment whose decode engine counts "
                         f"its KV transfers (vLLM); {target.deployment} is not one")  # fmt: skip
    with Connections(target.hosts, connect, forks) as session:
        session.require_all()
        return crossing.cross(session.transports, target.units)


def group_verdicts(rows: list[UnitStatus]) -> tuple[UnitStatus, ...]:
    """The rows with every answering rank of a broken multi-node group marked ``failing``."""
    members: dict[str, list[UnitStatus]] = {}
    for r in rows:
        members.setdefault(r.group, []).append(r)
    broken = {g for g, rs in members.items() if len(rs) > 1 and any(r.state != "running" or r.restarts for r in rs)}
    return tuple(dataclasses.replace(r, health="failing") if r.group in broken and r.health == "ok" else r for r in rows)


def _row(d: Desired, **kw: object) -> UnitStatus:
    return UnitStatus(host=d.host, unit=d.name, role=d.unit.role, rank=d.unit.rank, group=d.unit.group, **kw)  # type: ignore[arg-type]


def _host_status(
    t: Transport, host: str, target: Target
) -> tuple[list[UnitStatus], dict[str, watch_state.Record], Mapping[str, Manifest]]:
    """The host's rows, the watch's records there and its manifests."""
    units = [d for d in target.units if d.host == host]
    survey = survey_host(t, host, target.deployment, units)
    records = watch_state.parse(check(t, watch_state.read_argv(target.deployment), label="read the watch's records"))
    paths = [f.path for d in units for f in d.files]
    remote = parse_hashes(check(t, hashes_argv(paths), label="sha256sum unit files")) if paths else {}
    checked = {d.name: d.unit.health.url for d in units if d.unit.health is not None and survey.live[d.name].state == "running"}
    verdicts = health_verdicts(checked, lambda url: t.run(probe_argv(url, PROBE_TIMEOUT_S), timeout=STEP_TIMEOUT_S).ok)
    rows = []
    for d in units:
        live = survey.live[d.name]
        m = survey.manifests.get(d.name)
        rows.append(
            _row(
                d,
                state=live.state,
                health=verdicts.get(d.name, "-"),
                generation=m.generation if m else None,
                drift=_drift(d, survey, remote),
                restarts=live.restarts,
            )
        )
    for name, m in sorted(survey.manifests.items()):
        if all(d.name != name for d in units):
            live = survey.live[name]
            rows.append(
                UnitStatus(
                    host=host, unit=name, role=m.role, rank=m.rank, group=m.group, state=live.state,
                    health="-", generation=m.generation, drift="not in plan", restarts=live.restarts,
                )
            )  # fmt: skip
    return rows, records, survey.manifests


REPROBE_AFTER_S = 1.0


def health_verdicts(
    urls: Mapping[str, str], answers: Callable[[str], bool], sleep: Callable[[float], None] = time.sleep
) -> dict[str, str]:
    """Each unit's ``ok`` or ``failing`` (``urls``: unit -> its health URL; ``answers``: one probe).
    ``failing`` takes two failed probes in a row, :data:`REPROBE_AFTER_S` apart, the failed ones
    probed again together: one probe that ran out of time on a busy host (a CI machine's every
    engine stalled past the 5 s at once) is not a verdict that stops ``bench`` or alarms an
    operator; a dead or hung endpoint still reads ``failing`` within two probes."""
    first = {unit: answers(url) for unit, url in urls.items()}
    again: dict[str, bool] = {}
    if not all(first.values()):
        sleep(REPROBE_AFTER_S)
        again = {unit: answers(urls[unit]) for unit, ok in first.items() if not ok}
    return {unit: "ok" if ok or again[unit] else "failing" for unit, ok in first.items()}


def _drift(d: Desired, survey: Survey, remote: dict[str, str | None]) -> str:
    m = survey.manifests.get(d.name)
    if m is None:
        return "not deployed"
    changed = [f.path.rsplit("/", 1)[-1] for f in d.files if remote.get(f.path) != hashlib.sha256(f.content).hexdigest()]
    if changed:
        return "files: " + ", ".join(changed)
    return "render hash" if m.render_hash != d.render_hash else "none"


# ---------------------------------------------------------------------------------------------
# logs

FOLLOW_POLL_S = 1.0


def pick(units: Sequence[Desired], name: str | None) -> tuple[Desired, ...]:
    if name is None:
        return tuple(units)
    chosen = tuple(d for d in units if d.name == name or f"{d.host}/{d.name}" == name)
    if not chosen:
        known = ", ".join(sorted({d.name for d in units}))
        raise UsageError(f"no unit {name!r} in this deployment (units: {known})")
    return chosen


@dataclass(frozen=True, slots=True, kw_only=True)
class LogLine:
    """One line of a unit's log, or (``unit`` None) a host's error; ``str()`` is how it prints."""

    host: str
    unit: str | None
    text: str

    def __str__(self) -> str:
        return f"{self.host}/{self.unit} | {self.text}" if self.unit is not None else f"{self.host} | {self.text}"


def logs(
    target: Target,
    connect: Connect,
    emit: Callable[[LogLine], None],
    *,
    unit: str | None = None,
    tail: int = 50,
    follow: bool = False,
    forks: int = 8,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Emits the last ``tail`` lines of each unit (a host that fails: one error line); with
    ``follow``, polls for new lines until interrupted.  Lines of one unit stay in order."""
    units = pick(target.units, unit)
    scope = tuple(h for h in target.hosts if any(d.host == h.name for d in units))
    hosts = [h.name for h in scope]  # inventory order
    since: dict[str, str | None] = {d.name: None for d in units}
    with Connections(scope, connect, forks) as session:
        session.require_all()
        while True:
            results = session.run(hosts, lambda h, t: _fetch(t, [d for d in units if d.host == h], since, tail, follow))
            for h in hosts:
                res = results[h]
                if isinstance(res, FleetError):
                    emit(LogLine(host=h, unit=None, text=str(res)))
                    continue
                assert isinstance(res, list)
                for d, lines, pos in res:
                    for text in lines:
                        emit(LogLine(host=d.host, unit=d.name, text=text))
                    if pos is not None:
                        since[d.name] = pos
            if not follow:
                return
            sleep(FOLLOW_POLL_S)


def _fetch(
    t: Transport, units: Sequence[Desired], since: dict[str, str | None], tail: int, follow: bool
) -> list[tuple[Desired, list[str], str | None]]:
    """Per unit: the lines to show and the position to follow from next (None: unchanged).
    Following, the first read takes at least one line even with ``tail`` 0: the position of the
    last line is where the next poll starts, so no later line is missed."""
    out = []
    for d in units:
        last = since[d.name]
        first = last is None
        want = max(tail, 1) if follow and first else tail
        runtime = runtimes.get(d.unit.runtime)
        result = t.run(runtime.logs_argv(d.name, want, since=last), timeout=STEP_TIMEOUT_S)
        lines = runtime.parse_log(result.stdout_text)
        if last is not None:
            lines = runtime.after(lines, last)
        pos = next((p for p, _ in reversed(lines) if p), None)
        if follow and first and not lines and result.ok:
            pos = runtime.log_start
        shown = lines[max(0, len(lines) - tail) :] if first and result.ok else lines
        out.append((d, [x for _, x in shown], pos))
    return out
