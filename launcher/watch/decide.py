"""The watch's decision for one restart group from what one survey saw: pure.

A multi-node group cannot heal one rank at a time (a restarted rank cannot rejoin the old NCCL
world), so the unit of action is the whole group, as LeaderWorkerSet's
``RecreateGroupOnPodRestart`` does it.  Rules, in order (the first that applies wins):

1. the watch gave up on the group (a crash loop) and nobody redeployed it since: ``failed``,
   nothing done;
2. a host of the group did not answer: ``unreachable``, nothing done (no thrash) -- unless a
   spare host is free for it and it stayed away ``spare_after`` surveys in a row: ``place``;
3. no rank deployed: ``not-deployed`` (that is ``fleet up``'s job);
4. broken -- a rank not deployed, not running, restarted by its runtime (multi-rank groups: it
   cannot rejoin its peers; a headless rank whose peers died is caught this way or by its peer's
   state), or failing its own health check ``probe_failures`` surveys in a row:
   a drifted group is left alone unless ``apply_drift`` (recreating it would deploy the
   playbook's new render); else ``give-up`` after ``crash_limit`` recreations within
   ``crash_window_s``, ``wait`` inside the backoff after the last one, else ``recreate``;
5. drifted (a rank's render differs from the playbook's, or its secrets file from the secret
   values resolved now -- digests compared): ``recreate`` with ``apply_drift``
   (backoff as above), else ``drift`` (reported);
6. a health-checked rank not answering yet (fewer failures than the threshold): ``unready``;
7. an engine group whose leader is missing from a router that answered: ``register``;
8. else ``healthy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

from launcher.deploy.watchstate import History
from launcher.runtimes.base import Liveness

Kind = Literal[
    "healthy", "recreate", "register", "wait", "give-up", "failed", "unreachable", "not-deployed", "drift", "unready",
    "place",
]  # fmt: skip
ACTIONS: frozenset[Kind] = frozenset({"recreate", "register", "give-up", "place"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """How patient the watch is.  Backoff after the n-th recreation within the crash window:
    ``min(backoff_cap_s, backoff_base_s * 2**(n-1))``."""

    backoff_base_s: float = 10.0
    backoff_cap_s: float = 300.0
    crash_limit: int = 5
    crash_window_s: float = 900.0
    probe_failures: int = 3  # failed health probes in a row before a running rank counts as broken
    spare_after: int = 3  # surveys in a row a host stays unreachable before its group goes to a spare
    apply_drift: bool = False

    def backoff_s(self, n: int) -> float:
        return 0.0 if n <= 0 else min(self.backoff_cap_s, self.backoff_base_s * 2 ** (n - 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class Rank:
    """One rank as the survey saw it.  ``reachable`` False: its host did not answer (the rest is
    then meaningless)."""

    host: str
    unit: str
    reachable: bool = True
    away: int = 0  # unreachable: surveys in a row its host did not answer, this one included
    deployed: bool = True  # its manifest is on the host
    drifted: bool = False  # deployed with another render than the playbook's
    resecret: bool = False  # its secrets file differs from the values resolved now (digests compared)
    live: Liveness = Liveness(state="running")
    checked: bool = False  # it has a health check
    probe_failures: int = 0  # its health check's failures in a row, up to this survey


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    group: str
    kind: Kind
    reason: str = ""
    routers: tuple[str, ...] = ()  # register: the routers missing the group's leader
    until: float = 0.0  # wait: the earliest time of the next recreation (epoch seconds)


def broken_reason(ranks: Sequence[Rank], policy: Policy) -> str:
    """Why the group must be recreated ("" : it need not), naming the first broken rank."""
    multi = len(ranks) > 1
    for r in ranks:
        where = f"{r.host}/{r.unit}"
        if not r.deployed:
            return f"{where} is not deployed"
        if r.live.state != "running":
            code = f" (exit {r.live.exit_code})" if r.live.exit_code is not None and r.live.state == "exited" else ""
            return f"{where} is {r.live.state}{code}"
        if multi and r.live.restarts > 0:
            return f"{where} was restarted by its runtime ({r.live.restarts}x): it cannot rejoin its group"
        if r.checked and r.probe_failures >= policy.probe_failures:
            return f"{where} failed its health check {r.probe_failures} times in a row"
    return ""


def decide(
    group: str,
    ranks: Sequence[Rank],
    history: History,
    policy: Policy,
    now: float,
    *,
    leader_url: str | None = None,
    routers: Mapping[str, frozenset[str] | None] | None = None,
    spare: bool = False,
) -> Decision:
    """The decision for ``group`` (see the module's rules).  ``routers``: each router's worker
    URLs (None: it did not answer); ``leader_url``: the URL the group is registered under (None:
    an infrastructure group, never registered); ``spare``: a spare host is free for the group."""
    if history.failed:
        return Decision(group=group, kind="failed", reason=history.failed)
    away = sorted({r.host for r in ranks if not r.reachable})
    if away:
        gone = min(r.away for r in ranks if not r.reachable)
        if spare and gone >= policy.spare_after:
            return Decision(group=group, kind="place", reason=f"{', '.join(away)} did not answer {gone} surveys in a row")
        return Decision(group=group, kind="unreachable", reason=f"{', '.join(away)} did not answer")
    if not any(r.deployed for r in ranks):
        return Decision(group=group, kind="not-deployed", reason="no rank is deployed (fleet up deploys it)")
    drifted = [f"{r.host}/{r.unit}" for r in ranks if r.deployed and r.drifted]
    drifted += [f"secrets of {r.host}/{r.unit}" for r in ranks if r.deployed and r.resecret and not r.drifted]
    broken = broken_reason(ranks, policy)
    if broken and drifted and not policy.apply_drift:
        return Decision(group=group, kind="drift", reason=f"{broken}, but {', '.join(drifted)} drifted from the "
                        "playbook: not recreated (fleet up applies the playbook; --apply-drift lets the watch)")  # fmt: skip
    if broken or (drifted and policy.apply_drift):
        return _recreate(group, broken or f"drift: {', '.join(drifted)} differ from the playbook", history, policy, now)
    if drifted:
        return Decision(group=group, kind="drift", reason=f"{', '.join(drifted)} differ from the playbook (report only)")
    waiting = next((r for r in ranks if r.checked and r.probe_failures > 0), None)
    if waiting is not None:
        return Decision(group=group, kind="unready", reason=f"{waiting.host}/{waiting.unit} does not answer its "
                        f"health check yet ({waiting.probe_failures}/{policy.probe_failures})")  # fmt: skip
    if leader_url is not None and routers:
        missing = tuple(sorted(u for u, workers in routers.items()
                               if workers is not None and _url(leader_url) not in {_url(w) for w in workers}))  # fmt: skip
        if missing:
            return Decision(group=group, kind="register", routers=missing,
                            reason=f"healthy, but missing from {', '.join(missing)}")  # fmt: skip
    return Decision(group=group, kind="healthy")


def _url(url: str) -> str:
    return url.rstrip("/")


def recent(history: History, policy: Policy, now: float) -> tuple[float, ...]:
    """The recreations inside the crash window, oldest first."""
    return tuple(sorted(t for t in history.recreations if now - t < policy.crash_window_s))


def _recreate(group: str, reason: str, history: History, policy: Policy, now: float) -> Decision:
    done = recent(history, policy, now)
    if len(done) >= policy.crash_limit:
        why = (f"crash loop: {reason} after {len(done)} recreations within {policy.crash_window_s:g}s; the watch "
               "stops acting on it until it is redeployed (fleet up)")  # fmt: skip
        return Decision(group=group, kind="give-up", reason=why)
    if done:
        until = done[-1] + policy.backoff_s(len(done))
        if now < until:
            return Decision(group=group, kind="wait", reason=f"{reason}; backoff after recreation {len(done)}: next "
                            f"attempt in {until - now:.0f}s", until=until)  # fmt: skip
    return Decision(group=group, kind="recreate", reason=reason)
