"""Group-aware health gating.

A group is healthy when every rank's container/process is alive AND rank 0 (every unit with a
health check) answers its endpoint, probed from its own host over the open connection.  A rank
that has exited, is restarting, or has restarted since it was started fails the whole group at
once; so does the deadline (the unit's ``HealthCheck.timeout_s``, the recipe's measured start-up,
unless overridden).

How it watches: in rounds.  Each round runs one remote wait per host with pending units
(:mod:`launcher.deploy.wait`: the host probes its own endpoints every ``WAIT_STEP_S`` and returns
as soon as all its units are healthy or one is dead, else after at most ``WINDOW_S``, never past
the nearest deadline by more than a second); then every pending group is judged on what the
hosts reported.  So readiness is seen within about a step of happening, at one exec per host per
round.  The waits of a round run on every pending host at once: they are idle while they wait,
and ``forks`` bounds work, not waiting.  A round that comes back in less than a step is padded
to one step, so hosts answering at once cannot spin the gate.

Contract: :func:`gate` returns, per group, None (healthy) or the one-line error; it never stops
or removes anything (the caller tears failed groups down).  A group whose ranks died names one
culprit: the first dead rank, in group order, whose dead run's line names a cause rather than a
lost peer -- whichever rank died first.  A host whose wait fails (unreachable,
timed out, an unreadable answer) fails the groups with units on it, with an error naming the
host.  Transports are only used by the thread handling their host, one wait at a time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from launcher.deploy.desired import Desired
from launcher.execute.fanout import each
from launcher.remote import STEP_TIMEOUT_S, show
from launcher.deploy.steps import peer_lost
from launcher.deploy.wait import Seen, run_wait
from launcher.errors import FleetError
from launcher.runtimes import registry as runtimes
from launcher.runtimes.base import FAILURE_LINES_READ, Liveness
from launcher.execute.transport import Transport
from launcher.output import Event, Progress

DEFAULT_TIMEOUT_S = 600.0  # units without a health check of their own still get a deadline
PROBE_TIMEOUT_S = 5
WAIT_STEP_S = 0.15  # how often a host probes its own endpoints while it waits
WINDOW_S = 3  # longest wait per round: progress, deadlines and other hosts' news are seen by then


class HealthError(FleetError):
    """A unit did not become healthy before its deadline."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    healthy: bool = False
    error: FleetError | None = None
    detail: str = ""  # last log lines of the unit that failed
    culprit: tuple[str, str] | None = None  # (host, unit) the detail belongs to


def dead(live: Liveness) -> bool:
    return live.state in ("exited", "missing", "restarting") or live.restarts > 0


def deadline_s(group: Sequence[Desired], override: float | None) -> float:
    if override is not None:
        return override
    checks = [d.unit.health.timeout_s for d in group if d.unit.health is not None]
    return float(max(checks)) if checks else DEFAULT_TIMEOUT_S


def gate(
    groups: Mapping[str, Sequence[Desired]],
    transports: Mapping[str, Transport],
    *,
    timeout_override: float | None,
    forks: int,
    progress: Progress,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Verdict]:
    """Watches every pending group, in rounds, until each is healthy or failed."""
    start = clock()
    deadlines = {g: start + deadline_s(units, timeout_override) for g, units in groups.items()}
    verdicts: dict[str, Verdict] = {}
    while len(verdicts) < len(groups):
        pending = {g: us for g, us in groups.items() if g not in verdicts}
        by_host: dict[str, list[Desired]] = {}
        for units in pending.values():
            for d in units:
                by_host.setdefault(d.host, []).append(d)
        began = clock()
        window = max(1, min(WINDOW_S, math.ceil(min(deadlines[g] for g in pending) - began)))
        observed = _wait_all(transports, by_host, window, forks)
        now = clock()
        for g, units in pending.items():
            verdict = _judge(units, observed, expired=now >= deadlines[g], waited=now - start)
            if verdict is not None:
                if verdict.error is not None:
                    verdict = _with_logs(verdict, units, observed, transports, forks)
                verdicts[g] = verdict
                for d in units:
                    state = "healthy" if verdict.healthy else "failed"
                    progress.update(Event(host=d.host, unit=d.name, state=state))
            else:
                for d in units:
                    progress.update(Event(host=d.host, unit=d.name, state="waiting", detail=f"{now - start:.0f}s"))
        if len(verdicts) < len(groups) and now - began < WAIT_STEP_S:
            sleep(WAIT_STEP_S - (now - began))
    return verdicts


def _wait_all(
    transports: Mapping[str, Transport], by_host: Mapping[str, Sequence[Desired]], window_s: int, forks: int
) -> dict[str, Seen | FleetError]:
    def wait(h: str) -> Seen:
        return run_wait(transports[h], by_host[h], window_s=window_s, step_s=WAIT_STEP_S, probe_timeout_s=PROBE_TIMEOUT_S)

    return each(sorted(by_host), wait, max(forks, len(by_host)))


def _judge(
    units: Sequence[Desired], observed: Mapping[str, Seen | FleetError], *, expired: bool, waited: float
) -> Verdict | None:
    for d in units:
        seen = observed[d.host]
        if isinstance(seen, FleetError):
            return Verdict(error=seen)
        if dead(seen.live[d.name]):
            return Verdict(error=_died(d, seen.live[d.name]))
    seen_all = [(d, observed[d.host]) for d in units]
    healthy = all(
        isinstance(s, Seen) and s.live[d.name].state == "running" and s.probes.get(d.name, d.unit.health is None)
        for d, s in seen_all
    )
    if healthy:
        return Verdict(healthy=True)
    if expired:
        waiting = next(
            (d for d, s in seen_all if isinstance(s, Seen) and not s.probes.get(d.name, d.unit.health is None)),
            units[0],
        )
        what = f"not healthy at {waiting.unit.health.gate_url}" if waiting.unit.health else "not running"
        return Verdict(error=_UnitDied(waiting, None, f"{what} after {waited:.0f}s"))
    return None


def _died(d: Desired, live: Liveness) -> _UnitDied:
    """The error of a unit that is :func:`dead`."""
    if live.state == "running":  # restarted by its runtime: the exit status is the new run's
        times = "once" if live.restarts == 1 else f"{live.restarts} times"
        return _UnitDied(d, live, f"restarted {times} by its runtime while its group was starting")
    code = f"exit {live.exit_code}" if live.exit_code is not None else "no exit status"
    return _UnitDied(d, live, f"{live.state} while its group was starting ({code})")


class _UnitDied(HealthError):
    def __init__(self, d: Desired, live: Liveness | None, what: str) -> None:
        self.desired = d
        self.live = live  # None: running, but not healthy by the deadline
        self.what = what
        started_by = show(d.start[-1]) if d.start else d.name
        super().__init__(f"{d.host}: {started_by}: {d.name} {what}")


_Log = tuple[list[str], str]  # failure_lines: (the last lines, the line naming the failure)


def _with_logs(
    verdict: Verdict,
    units: Sequence[Desired],
    observed: Mapping[str, Seen | FleetError],
    transports: Mapping[str, Transport],
    forks: int,
) -> Verdict:
    """Names the group's culprit with its dead run's last log lines and the line naming its
    failure (on failure only).

    Ranks of a group often die together, and which goes first is chance; so every dead unit's
    log is read (per host: liveness once more -- a rank seen alive a moment before its peer
    reported it lost counts as dead -- and one log read per dead unit) and :func:`_culprit`
    picks."""
    err = verdict.error
    if not isinstance(err, _UnitDied):
        return verdict
    if err.live is None:  # the deadline: the unit that never answered
        died, (lines, last) = err, _failure_log(transports[err.desired.host], err, restarted=False)
    else:
        seen = {d.host: s for d in units if isinstance(s := observed[d.host], Seen)}
        found = each(sorted(seen), lambda h: _deaths(transports[h], [d for d in units if d.host == h], seen[h]), forks)
        died, (lines, last) = _culprit(err, units, found)
    message = f"{died}: {last}" if last else str(died)
    return Verdict(error=HealthError(message), detail="\n".join(lines), culprit=(died.desired.host, died.desired.name))


def _culprit(
    err: _UnitDied, units: Sequence[Desired], found: Mapping[str, list[tuple[_UnitDied, _Log]] | FleetError]
) -> tuple[_UnitDied, _Log]:
    """The dead unit (``found`` per host, ``err`` the gate's own when its host failed now) whose
    failure the group's error names: the first in group order by :func:`_weight` -- a rank
    whose line only reports a lost peer (:func:`~launcher.deploy.steps.peer_lost`) died of
    another's failure."""
    deaths: dict[str, tuple[_UnitDied, _Log]] = {err.desired.name: (err, ([], ""))}
    for on_host in found.values():
        if not isinstance(on_host, FleetError):
            deaths.update((died.desired.name, (died, log)) for died, log in on_host)
    ordered = [deaths[d.name] for d in units if d.name in deaths]
    return min(ordered, key=lambda death: _weight(death[1][1]))  # min keeps the first of equals


def _weight(line: str) -> int:
    """How little a dead unit's failure line says about the group's failure: a cause, no line
    (killed without a word, or unread), a lost peer."""
    return 2 if peer_lost(line) else 0 if line else 1


def _deaths(t: Transport, units: Sequence[Desired], seen: Seen) -> list[tuple[_UnitDied, _Log]]:
    """The units on ``t``'s host that were dead when last seen or are now (as last seen, if
    dead then), with their logs."""
    now: dict[str, Liveness] = {}
    for runtime in runtimes.runtimes():
        now.update(runtime.run_liveness(t, [d.name for d in units if d.unit.runtime == runtime.name]))
    out = []
    for d in units:
        then = seen.live[d.name]
        if dead(then) or dead(now[d.name]):
            died = _died(d, then if dead(then) else now[d.name])
            out.append((died, _failure_log(t, died, restarted=then.restarts + now[d.name].restarts > 0)))
    return out


def _failure_log(t: Transport, died: _UnitDied, *, restarted: bool) -> _Log:
    d = died.desired
    runtime = runtimes.get(d.unit.runtime)
    result = t.run(runtime.failure_logs_argv(d.name, FAILURE_LINES_READ), timeout=STEP_TIMEOUT_S)
    return runtime.failure_lines(result.stdout_text, restarted)
