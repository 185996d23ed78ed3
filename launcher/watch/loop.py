"""The watch's loop: every interval, one look per host of each watched deployment (connections
kept open, reopened when a host comes back), a decision per restart group
(:mod:`launcher.watch.decide`), and the actions, each one a short policy on
:class:`~launcher.deploy.session.DeploySession` under the deploy lock of the group's hosts:

- recreate: the lock taken and the group surveyed again under it (still broken?); the attempt
  recorded on its hosts (:mod:`launcher.deploy.watchstate`); its leader out of the routers; then
  ``DeploySession.start`` -- every rank stopped, the playbook's render installed (the same
  generation when nothing drifted), all started together, health-gated, torn down if not
  healthy -- and back into the routers it was in (all that answer, if it was in none);
- register: a healthy leader missing from a router is added again, as the router has it
  (:mod:`launcher.watch.homes`: regular, or a PD router's prefill/decode with its bootstrap port);
- give up: the crash loop's mark written on the group's hosts (``fleet status`` shows it).

A tick acts group after group (:func:`acting_order`): in plan order, a router after the engine
groups its start gate waits for -- unless the router is ready with one healthy worker and one is.

Beside the operator: a deploy lock held by anyone else (an operator's ``up``/``restart``/
``down``) pauses the watch for that deployment -- told once, and once more when it resumes; a
lock of a fleet run of this control host that is gone is taken over by the session.  One watch
per deployment: :meth:`Watch.claim` takes a second lock, ``<deployment>.watch``, on its hosts
and refuses naming a live owner.

Interrupts (SIGINT; SIGTERM as the CLI maps it) end the loop: an action under way is finished
or rolled back first as ``fleet up`` does it -- the session tears down a group that is not
healthy yet, and a group healthy but out of its routers is put back -- then the locks are
released.  The watch keeps no state of its own beyond the probe failures it counts and when it
first saw a group broken: a watch killed mid-action is followed by one that finds what it left
on the hosts (a group down or out of its routers, its deploy lock -- taken over) and finishes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Mapping, Sequence

import psutil

from launcher.deploy import lock
from launcher.deploy.desired import Desired, groups, step_of
from launcher.execute.fanout import each
from launcher.deploy.session import Connect, DeploySession, Target, on_interrupt
from launcher.runtimes.base import MISSING
from launcher.deploy.survey import GroupChange, Survey, secrets_changed
from launcher.errors import FleetError, HostKeyError
from launcher.execute.files import write_files
from launcher.execute.transport import Result, Transport
from launcher.model import Host
from launcher.output import Progress, QuietProgress, mask
from launcher.rolling.router_api import RouterClient, RouterError
from launcher.deploy import watchstate as state
from launcher.deploy.watchstate import History
from launcher.engines import router
from launcher.watch.decide import Decision, Policy, Rank, broken_reason, decide
from launcher.watch.events import Sink, WatchEvent
from launcher.watch.homes import Home, homes, no_adds
from launcher.watch.spares import Spares, placed
from launcher.watch.look import HostView, look

INFRA_ROLES = frozenset({"router", "mooncake-master", "gateway"})
ROUTER_TIMEOUT_S = 60.0  # a worker to leave or join a router
REMIND_S = 300.0  # a standing condition (drift, a group given up) is told again this often


@dataclass(frozen=True, slots=True, kw_only=True)
class Watched:
    """One deployment to watch and the routers its engine groups are registered in
    (:mod:`launcher.watch.homes`)."""

    target: Target
    routers: tuple[Home, ...] = ()
    spares: Spares | None = None  # the playbook's spare hosts (placement.<role>.spares)


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    interval_s: float = 10.0
    forks: int = 8
    dry_run: bool = False
    policy: Policy = field(default_factory=Policy)
    break_lock: bool = False  # take over another watch's claim
    survey_timeout_s: float = 30.0  # a host whose survey takes longer counts as unreachable (a hung host)


class _Kept:
    """A transport the loop keeps open: sessions made for one action use it and leave it open."""

    def __init__(self, t: Transport) -> None:
        self._t = t

    @property
    def host(self) -> str:
        return self._t.host

    def run(self, argv: object, **kw: object) -> Result:
        return self._t.run(argv, **kw)  # type: ignore[arg-type]

    def put(self, path: str, data: bytes, mode: int) -> None:
        self._t.put(path, data, mode)

    def get(self, path: str) -> bytes:
        return self._t.get(path)

    def close(self) -> None:
        pass


def as_deployed(d: Desired, survey: Survey, secrets: Mapping[str, str]) -> Rank:
    """``d`` as its host's survey saw it: deployed or not, its render or its secrets file (against
    ``secrets``, the values resolved now; digests only) differing from the playbook's."""
    m = survey.manifests.get(d.name)
    return Rank(host=d.host, unit=d.name, deployed=m is not None, drifted=m is not None and m.render_hash != d.render_hash,
                resecret=m is not None and secrets_changed(d, survey, secrets))  # fmt: skip


def leader_url(units: Sequence[Desired]) -> str | None:
    """The URL an engine group is registered under in a router (its rank 0's HTTP base); None
    for infrastructure groups."""
    lead = next((d for d in units if d.unit.rank == 0), None)
    if lead is None or lead.unit.role in INFRA_ROLES or lead.unit.health is None:
        return None
    return lead.unit.health.base


def acting_order(decisions: Sequence[tuple[Decision, tuple[Desired, ...], History]]
                 ) -> list[tuple[Decision, tuple[Desired, ...], History]]:  # fmt: skip
    """The order a tick acts in: the plan's (a router after the engine groups its start gate
    waits for), except that a regular-mode router whose program is ready with one healthy worker
    (:attr:`~launcher.engines.router.Program.ready_with_one_worker`) goes first while an engine
    group of the deployment is healthy: it serves again through that group while the broken
    ones start, instead of after their cold starts (minutes for a large model)."""
    serving = any(d.kind == "healthy" and leader_url(units) is not None for d, units, _ in decisions)
    return sorted(decisions, key=lambda x: not (serving and _ready_with_one_worker(x[1])))  # stable


def _ready_with_one_worker(units: Sequence[Desired]) -> bool:
    if len(units) != 1 or units[0].unit.role != "router":
        return False
    program = router.of_argv(units[0].unit.argv)
    return program is not None and program.ready_with_one_worker and not program.is_pd(units[0].unit.argv)


_ME = re.compile(rf"[^@\s]*@{re.escape(socket.gethostname())} pid={os.getpid()} start=(?P<start>[0-9.]+) ")


def _ours(owner: str) -> bool:
    """An owner line of this process (a lock a session of this watch took)."""
    m = _ME.match(owner)
    return m is not None and abs(float(m["start"]) - psutil.Process().create_time()) < 1.0


class Watch:
    def __init__(
        self,
        watched: Sequence[Watched],
        connect: Connect,
        options: Options,
        emit: Sink,
        *,
        progress: Progress = QuietProgress(),
        on_survey: Callable[[str, Mapping[str, int], float], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.watched = tuple(watched)
        self.connect = connect
        self.options = options
        self.emit = emit
        self.progress = progress
        self.on_survey = on_survey
        self.clock = clock
        self.owner = lock.owner_line()  # this watch's claim
        self.hosts: dict[str, Host] = {h.name: h for w in self.watched for h in self._looked(w)}
        self.conns: dict[str, Transport] = {}
        self.claimed: dict[str, set[str]] = {w.target.deployment: set() for w in self.watched}
        self.fails: dict[tuple[str, str], int] = {}  # (deployment, unit) -> failed probes in a row
        self.first_seen: dict[tuple[str, str], float] = {}  # (deployment, group) -> seen broken first
        self.paused: dict[str, str] = {}  # deployment -> the holder it waits for
        self.away: set[tuple[str, str]] = set()  # (deployment, host) told unreachable
        self.gone: dict[tuple[str, str], int] = {}  # (deployment, host) -> surveys in a row it did not answer
        self.subst: dict[str, dict[str, str]] = {}  # deployment -> lost host -> the spare standing in for it
        self.views: dict[str, dict[str, HostView]] = {}  # deployment -> the last survey's views
        self.place_failed: dict[tuple[str, str], float] = {}  # (deployment, group) -> when placing it failed
        self.told: dict[tuple[str, str], tuple[tuple[str, str], float]] = {}  # standing conditions told, and when

    # -- connections and the claim

    def _connect(self) -> dict[str, FleetError]:
        """Opens what is not open; the hosts that could not be reached."""
        todo = sorted(h for h in self.hosts if h not in self.conns)
        got = each(todo, lambda n: self.connect(self.hosts[n]), self.options.forks)
        failed: dict[str, FleetError] = {}
        for n, t in got.items():
            if isinstance(t, FleetError):
                failed[n] = t
            else:
                self.conns[n] = t
        return failed

    def _drop(self, host: str) -> None:
        t = self.conns.pop(host, None)
        if t is not None:
            try:
                t.close()
            except Exception:  # noqa: BLE001 -- a connection that is already gone may fail to close
                pass

    def kept(self, host: Host) -> Transport:
        t = self.conns.get(host.name)
        if t is None:
            raise FleetError(f"{host.name}: not connected")
        return _Kept(t)

    def claim(self) -> None:
        """Takes each deployment's watch claim on its reachable hosts; a live claim of another
        watch refuses (raises), naming it; an unknown host key refuses too."""
        failed = self._connect()
        bad = next((e for e in failed.values() if isinstance(e, HostKeyError)), None)
        if bad is not None:
            raise bad
        for w in self.watched:
            self._claim(w.target.deployment, [h.name for h in w.target.hosts if h.name in self.conns], strict=True)

    def _claim(self, dep: str, hosts: Sequence[str], *, strict: bool) -> None:
        if self.options.dry_run:  # it changes nothing: it may look beside the real watch
            return
        name = lock.claim_name(dep, "watch")

        def take(h: str) -> None:
            try:
                lock.take(self.conns[h], name, self.owner, force=self.options.break_lock, timeout=60)
            except lock.LockedError as err:
                raise FleetError(f"{h}: deployment {dep!r} is watched already by {err.owner}; stop that watch "
                                 "first (a watch that is gone: fleet watch --break-lock)") from None  # fmt: skip

        results = each([h for h in hosts if h not in self.claimed[dep]], take, self.options.forks)
        for h, r in results.items():
            if isinstance(r, FleetError):
                if strict:
                    self.release()
                    raise r
                self._tell(WatchEvent(kind="note", deployment=dep, message=str(r), at=self.clock()))
            else:
                self.claimed[dep].add(h)

    def release(self) -> None:
        """Gives up the claims and closes the connections (best effort: a claim left on a host
        that does not answer is taken over by the next watch of this control host).  A clean-up
        fan-out: a first interrupt while it runs (a watch stopped twice in a row) lets every
        host's release finish, then raises; a second abandons it."""
        live = [(dep, h) for dep, hosts in self.claimed.items() for h in sorted(hosts) if h in self.conns]
        try:
            each(live, lambda k: lock.release(self.conns[k[1]], lock.claim_name(k[0], "watch"), self.owner),
                 self.options.forks, cleanup=True)  # fmt: skip
        finally:
            for hosts in self.claimed.values():
                hosts.clear()
            for h in list(self.conns):
                self._drop(h)

    # -- the loop

    def run(self, stop: threading.Event, *, once: bool = False) -> None:
        """Ticks every interval until ``stop`` is set (or after one tick with ``once``)."""
        while not stop.is_set():
            began = self.clock()
            self.tick()
            if once:
                return
            stop.wait(max(0.0, self.options.interval_s - (self.clock() - began)))

    def tick(self) -> None:
        failed = self._connect()
        for w in self.watched:
            self._tick(w, failed)

    @staticmethod
    def _looked(w: Watched) -> tuple[Host, ...]:
        """The deployment's hosts and its spares."""
        return tuple({h.name: h for h in (*w.target.hosts, *(w.spares.hosts if w.spares else ()))}.values())

    def target(self, w: Watched) -> Target:
        """Where the deployment lives now: the playbook's plan, with the spares standing in for
        lost hosts as the last survey found them."""
        subst = self.subst.get(w.target.deployment)
        return w.target if not subst or w.spares is None else w.spares.target(subst)

    def _tick(self, w: Watched, failed: Mapping[str, FleetError]) -> None:
        before = self.target(w)
        dep = before.deployment
        looked = {x.name for x in self._looked(w)}
        reachable = [h for h in sorted(looked) if h in self.conns]
        self._claim(dep, reachable, strict=False)
        timeout = self.options.survey_timeout_s
        seen = each(reachable, lambda h: look(self.conns[h], dep, h, before.units, timeout), self.options.forks)
        views: dict[str, HostView] = {}
        away: dict[str, str] = {h: str(e) for h, e in failed.items() if h in looked}
        for h, v in seen.items():
            if isinstance(v, FleetError):
                away[h] = str(v)
                self._drop(h)
            else:
                views[h] = v
        now = self.clock()
        target = self._where(w, views)
        if target is not before:  # the hosts whose planned units changed are looked at again with them
            def names(t: Target, h: str) -> set[str]:
                return {d.name for d in t.units if d.host == h}

            redo = sorted(h for h in views if names(target, h) != names(before, h))
            again = each(redo, lambda h: look(self.conns[h], dep, h, target.units, timeout), self.options.forks)
            views.update({h: v for h, v in again.items() if isinstance(v, HostView)})
        self.views[dep] = views
        for h in looked:
            self.gone[(dep, h)] = self.gone.get((dep, h), 0) + 1 if h in away else 0
        for h, why in sorted(away.items()):
            self.away.add((dep, h))
            self._tell(WatchEvent(kind="unreachable", deployment=dep, message=mask(why, target.secrets.values()), at=now,
                                  data={"host": h}))  # fmt: skip
        for h in sorted(views):
            if (dep, h) in self.away:
                self.away.discard((dep, h))
                self._tell(WatchEvent(kind="reachable", deployment=dep, message=f"{h} answers again", at=now,
                                      data={"host": h}))  # fmt: skip
        if self._held_by_other(dep, views, now):
            return
        self._retire_stale(w, target, views)
        listed = self._routers(w)
        home = {h.url: h for h in self._homes(w)}
        decisions: list[tuple[Decision, tuple[Desired, ...], History]] = []
        counts: dict[str, int] = {}
        for g, units in groups(target.units).items():
            hist = self._history(dep, g, units, views)
            url = leader_url(units)
            mine = {u: workers for u, workers in listed.items() if url is not None and home[u].entry(url) is not None}
            d = decide(g, [self._rank(dep, u, views, target.secrets) for u in units], hist, self.options.policy, now,
                       leader_url=url, routers=mine, spare=self._spare_for(w, units, views, now))  # fmt: skip
            counts[d.kind] = counts.get(d.kind, 0) + 1
            decisions.append((d, units, hist))
        if self.on_survey is not None:
            self.on_survey(dep, counts, now)
        for d, units, hist in acting_order(decisions):
            self._act(w, d, units, hist)

    # -- where the deployment lives (spares)

    def _where(self, w: Watched, views: Mapping[str, HostView]) -> Target:
        """The target as the hosts show it: a unit found on a spare stands there for its planned
        host (:func:`launcher.watch.spares.placed`).  A substitution the planner refuses (a spare
        changed since) is told and the last good one kept."""
        dep = w.target.deployment
        if w.spares is None:
            return w.target
        spare_names = {h.name for h in w.spares.hosts}
        planned = {d.name: d.host for d in w.target.units}
        on_spares = {h: v.survey.manifests for h, v in views.items() if h in spare_names}
        home = {h.name: (views[h.name].survey.manifests if h.name in views else None) for h in w.target.hosts}
        subst = placed(planned, on_spares, home)
        if subst != self.subst.get(dep, {}):
            try:
                w.spares.target(subst)
                self.subst[dep] = subst
            except FleetError as err:
                self._tell(WatchEvent(kind="note", deployment=dep, at=self.clock(),
                                      message=f"the units on spares ({subst}) do not plan: {err}"))  # fmt: skip
        return self.target(w)

    def _homes(self, w: Watched) -> tuple[Home, ...]:
        """The routers, PD ones as the deployment is placed now (a group on a spare has its new
        URL in the PD router's planned command line)."""
        if not self.subst.get(w.target.deployment):
            return w.routers
        return (*(h for h in w.routers if h.pd is None), *homes(self.target(w), ()))

    def _spare_for(self, w: Watched, units: Sequence[Desired], views: Mapping[str, HostView], now: float) -> bool:
        """Whether spares of the group's role could take its lost hosts now (free: reachable and
        holding nothing of the deployment), and no placement of it failed in the last backoff cap."""
        if w.spares is None or not units:
            return False
        failed = self.place_failed.get((w.target.deployment, units[0].unit.group))
        if failed is not None and now - failed < self.options.policy.backoff_cap_s:
            return False
        lost = {d.host for d in units if d.host not in views}
        return len(self._free(w, units[0].unit.role, views)) >= len(lost)

    def _free(self, w: Watched, role: str, views: Mapping[str, HostView]) -> list[str]:
        used = set(self.subst.get(w.target.deployment, {}).values())
        spares = w.spares.by_role.get(role, ()) if w.spares is not None else ()
        return [h.name for h in spares if h.name in views and h.name not in used and not views[h.name].survey.manifests]

    def _retire_stale(self, w: Watched, target: Target, views: Mapping[str, HostView]) -> None:
        """Units left on a host the deployment moved away from (a lost host that answers again,
        or a spare whose copy is older than the operator's redeploy): stopped and removed, under
        the deploy lock of that host.  Only hosts a spare stood or stands in for are looked at."""
        if w.spares is None:
            return
        dep = target.deployment
        now_at = {d.name: d.host for d in target.units}
        spare_names = {h.name for h in w.spares.hosts}
        lost = {d.host for d in w.target.units if d.host != now_at.get(d.name)}
        for h in sorted((lost | spare_names) & set(views)):
            stale = [m for name, m in sorted(views[h].survey.manifests.items()) if name in now_at and now_at[name] != h]
            if not stale:
                continue
            names = ", ".join(f"{m.unit} (now on {now_at[m.unit]})" for m in stale)
            if self.options.dry_run:
                self._tell(WatchEvent(kind="would-retire", deployment=dep, at=self.clock(), data={"host": h},
                                      message=f"{h}: {names}"))  # fmt: skip
                continue
            try:
                session = self._session(w, (), (h,))
                with self._locked(session, "") as surveys:
                    if surveys is None:
                        continue
                    err = next((r for r in session.retire(stale).values() if isinstance(r, FleetError)), None)
                    if err is not None:
                        raise err
                self._tell(WatchEvent(kind="retired", deployment=dep, at=self.clock(), data={"host": h},
                                      message=f"{h}: {names} stopped and removed: the deployment lives elsewhere now"))  # fmt: skip
            except FleetError as err:
                self._tell(WatchEvent(kind="note", deployment=dep, at=self.clock(), data={"host": h},
                                      message=mask(f"{h}: removing {names} failed: {err}", target.secrets.values())))  # fmt: skip

    # -- what the look says

    def _held_by_other(self, dep: str, views: Mapping[str, HostView], now: float) -> bool:
        """Whether another deploy holds the deployment's lock on a host (the watch pauses).  A
        lock of this watch's own (an action's release that failed while the host was away) is
        released here: nobody else would."""
        for h, v in views.items():
            if v.owner and _ours(v.owner):
                try:
                    lock.release(self.conns[h], dep, v.owner)
                except FleetError:
                    pass  # told as unreachable next time, or released then
        holders = sorted({v.owner for v in views.values()
                          if v.owner and not _ours(v.owner) and lock.holder_state(v.owner) != "dead"})  # fmt: skip
        if holders:
            if self.paused.get(dep) != holders[0]:
                self.paused[dep] = holders[0]
                self._tell(WatchEvent(kind="paused", deployment=dep, at=now,
                                      message=f"the deploy lock is held by {holders[0]}: the watch waits for it"))  # fmt: skip
            return True
        if dep in self.paused:
            del self.paused[dep]
            self._tell(WatchEvent(kind="resumed", deployment=dep, at=now, message="the deploy lock was released"))
        return False

    def _rank(self, dep: str, d: Desired, views: Mapping[str, HostView], secrets: Mapping[str, str]) -> Rank:
        v = views.get(d.host)
        if v is None:
            return Rank(host=d.host, unit=d.name, reachable=False, away=self.gone.get((dep, d.host), 0))
        live = v.survey.live.get(d.name, MISSING)
        key = (dep, d.name)
        answered = v.probes.get(d.name)
        if answered is False and live.state == "running":
            self.fails[key] = self.fails.get(key, 0) + 1
        else:
            self.fails[key] = 0
        return replace(as_deployed(d, v.survey, secrets), live=live, checked=d.unit.health is not None,
                       probe_failures=self.fails[key])

    def _history(self, dep: str, group: str, units: Sequence[Desired], views: Mapping[str, HostView]) -> History:
        found = [r for d in units if (v := views.get(d.host)) is not None and (r := v.records.get(group)) is not None]
        return state.merged(found, self._stamp(units, views))

    @staticmethod
    def _stamp(units: Sequence[Desired], views: Mapping[str, HostView] | Mapping[str, Survey]) -> str:
        def manifests(h: str) -> Mapping[str, object]:
            v = views.get(h)
            return {} if v is None else (v.survey.manifests if isinstance(v, HostView) else v.manifests)

        return state.stamp(manifests(d.host).get(d.name) for d in units)  # type: ignore[misc]

    def _routers(self, w: Watched) -> dict[str, frozenset[str] | None]:
        out: dict[str, frozenset[str] | None] = {}
        for home in self._homes(w):
            try:
                out[home.url] = frozenset(x.url for x in RouterClient(home.url, timeout=5.0).workers())
            except RouterError:
                out[home.url] = None
        return out

    # -- telling

    def _tell(self, event: WatchEvent) -> None:
        self.emit(event)

    def _told(self, dep: str, d: Decision, kind: str, message: str) -> None:
        """Reports a standing condition (a backoff, drift, a group given up): when it begins or
        changes, and every :data:`REMIND_S` while it stands."""
        key, now = (dep, d.group), self.clock()
        what = (kind, "" if kind == "backoff" else message)  # a backoff's countdown is no change
        told = self.told.get(key)
        if told is not None and told[0] == what and now - told[1] < REMIND_S:
            return
        self.told[key] = (what, now)
        self._tell(WatchEvent(kind=kind, deployment=dep, group=d.group, message=message, at=self.clock()))

    # -- acting

    def _act(self, w: Watched, d: Decision, units: tuple[Desired, ...], hist: History) -> None:
        dep = w.target.deployment
        key = (dep, d.group)
        if d.kind in ("recreate", "wait", "give-up"):
            self.first_seen.setdefault(key, self.clock())
        elif d.kind == "healthy":
            self.first_seen.pop(key, None)
        if d.kind in ("healthy", "unready", "unreachable"):  # unreachable hosts are told per host, above
            self.told.pop(key, None)
            return
        if d.kind in ("drift", "not-deployed", "failed", "wait"):
            self._told(dep, d, "backoff" if d.kind == "wait" else d.kind, d.reason)
            return
        if self.options.dry_run:
            self._told(dep, d, f"would-{d.kind}", d.reason)
            return
        if d.kind == "recreate":
            self._recreate(w, d, units, hist)
        elif d.kind == "register":
            self._register_action(w, d, units)
        elif d.kind == "give-up":
            self._give_up(w, d, units, hist)
        elif d.kind == "place":
            self._place(w, d, units)

    def _session(self, w: Watched, units: Sequence[Desired], hosts: Sequence[str] = ()) -> DeploySession:
        """A session over ``units`` (and ``hosts``), on the connections kept open."""
        where = {d.host for d in units} | set(hosts)
        sub = replace(self.target(w), hosts=tuple(self.hosts[n] for n in sorted(where)), units=tuple(units))
        return DeploySession(sub, self.kept, forks=self.options.forks, progress=self.progress)

    @contextlib.contextmanager
    def _locked(self, session: DeploySession, group: str) -> Iterator[dict[str, Survey] | None]:
        """``session`` entered, every host of it connected (else raises), its deploy lock taken and
        its hosts surveyed under it: yields the surveys, or None (the watch paused, told) when
        another holds the lock -- the action does nothing then.  On exit the lock is released
        and the session closed (``session.unreleased`` says where a release failed)."""
        dep = session.target.deployment
        with session:
            session.require_all()
            try:
                surveys = session.lock_and_survey(force=False, images=False)
            except lock.LockedError as err:
                self.paused[dep] = err.owner
                self._tell(WatchEvent(kind="paused", deployment=dep, group=group, at=self.clock(),
                                      message=f"the deploy lock is held by {err.owner}: the watch waits for it"))  # fmt: skip
                surveys = None
            yield surveys

    def _write(self, session: DeploySession, units: Sequence[Desired], record: state.Record) -> None:
        put = state.put(session.target.deployment, record)
        results = session.run(sorted({d.host for d in units}), lambda h, t: write_files(t, [put]))
        err = next((r for r in results.values() if isinstance(r, FleetError)), None)
        if err is not None:
            raise err

    def _recreate(self, w: Watched, d: Decision, units: tuple[Desired, ...], hist: History) -> None:
        dep = w.target.deployment

        hosts = sorted({u.host for u in units})

        def tell(kind: str, msg: str, **data: object) -> None:
            self._tell(WatchEvent(kind=kind, deployment=dep, group=d.group, message=msg, at=self.clock(),
                                  data={"hosts": hosts, **data}))  # fmt: skip

        detected = self.first_seen.get((dep, d.group), self.clock())
        url = leader_url(units)
        session = self._session(w, units)
        try:
            with self._locked(session, d.group) as surveys:
                if surveys is None:
                    return
                # Judged again under the lock: the operator (or the group itself) may have fixed it.
                ranks = [replace(as_deployed(u, surveys[u.host], w.target.secrets), live=surveys[u.host].live.get(u.name, MISSING),
                                 checked=u.unit.health is not None, probe_failures=self.fails.get((dep, u.name), 0))
                         for u in units]  # fmt: skip
                broken = broken_reason(ranks, self.options.policy)
                if not broken and not (self.options.policy.apply_drift and any(r.drifted or r.resecret for r in ranks)):
                    tell("note", "no longer broken under the deploy lock: nothing done")
                    return
                started = self.clock()
                self._write(session, units, state.recreated(hist, d.group, started))
                attempt = len([t for t in hist.recreations if started - t < self.options.policy.crash_window_s]) + 1
                tell("recreating", f"{d.reason} (attempt {attempt})", attempt=attempt)
                homes = self._take_out(w, url)
                if homes:
                    tell("out-of-router", f"{url} deregistered from {', '.join(h.url for h in homes)}",
                         out_s=round(self.clock() - started, 3))
                out_at = self.clock()
                healthy = False

                def settle() -> None:
                    if healthy:  # Ctrl-C after the gate passed: it serves again before the watch exits
                        self._join(url, homes or self._answering(w, url))

                with on_interrupt(settle):
                    if broken:
                        # Nothing is routed to it and its world is broken: no grace to wait out (a
                        # rank waiting for a dead peer may ignore SIGTERM for the whole stop timeout).
                        session.stop(units, None)
                    change = GroupChange(group=d.group, step=step_of(units), action="restart", reason=d.reason, units=units)
                    verdict = session.start([change], surveys)[d.group]
                    healthy = verdict.healthy
                    # The backoff runs from the attempt's end (the start was recorded in case the watch dies).
                    self._write(session, units, state.recreated(hist, d.group, self.clock()))
                    if not healthy:
                        tell("recreate-failed", mask(str(verdict.error), session.secrets), attempt=attempt,
                             took_s=round(self.clock() - started, 3))  # fmt: skip
                        return
                    healthy_at = self.clock()
                    back = self._join(url, homes or self._answering(w, url))
                done = self.clock()
                self.fails.update({(dep, u.name): 0 for u in units})
                self.first_seen.pop((dep, d.group), None)
                tell("recovered", f"healthy again{' and back in ' + ', '.join(back) if back else ''}", attempt=attempt,
                     took_s=round(done - started, 3),
                     time_to_recover_s=round(done - detected, 3), detect_to_action_s=round(started - detected, 3),
                     out_of_router_s=round(out_at - started, 3), restart_s=round(healthy_at - out_at, 3),
                     register_s=round(done - healthy_at, 3))  # fmt: skip
        except FleetError as err:
            tell("recreate-failed", mask(str(err), w.target.secrets.values()))
        for line in session.unreleased:
            tell("note", line)

    def _answering(self, w: Watched, url: str | None) -> tuple[Home, ...]:
        """The homes of ``url`` that answer and take workers over their API."""
        up = {u for u, workers in self._routers(w).items() if workers is not None}
        return tuple(h for h in self._homes(w) if h.url in up and h.adds and url is not None and h.entry(url) is not None)

    def _take_out(self, w: Watched, url: str | None) -> tuple[Home, ...]:
        """The leader deregistered from every router listing it that could take it back; those
        routers."""
        if url is None:
            return ()
        homes = []
        for home in self._homes(w):
            if not home.adds or home.entry(url) is None:
                continue
            r = RouterClient(home.url)
            try:
                if r.remove(url):
                    homes.append(home)
                    r.wait(url, present=False, timeout_s=ROUTER_TIMEOUT_S)
            except RouterError as err:
                self._tell(WatchEvent(kind="note", deployment=w.target.deployment, message=str(err), at=self.clock()))
        return tuple(homes)

    def _join(self, url: str | None, homes: Sequence[Home]) -> tuple[str, ...]:
        """``url`` registered (as its home's command line has it: PD type, bootstrap port) and
        healthy in each of ``homes``; raises the first refusal."""
        if url is None:
            return ()
        for home in homes:
            entry, r = home.entry(url), RouterClient(home.url)
            if entry is None:
                continue
            if r.find(url) is None:
                if not home.adds:
                    raise RouterError(f"router {home.url}: {url} is missing, and this router ({no_adds([home])}) "
                                      "takes no worker over its API: restart the router to register it again")  # fmt: skip
                r.add(url, entry.worker_type, entry.bootstrap_port)
            r.wait(url, present=True, timeout_s=ROUTER_TIMEOUT_S)
        return tuple(h.url for h in homes)

    def _register_action(self, w: Watched, d: Decision, units: tuple[Desired, ...]) -> None:
        dep = w.target.deployment
        where = {"hosts": sorted({u.host for u in units})}
        homes = [h for h in self._homes(w) if h.url in d.routers]
        if not any(h.adds for h in homes):  # nothing the watch can do: reported, as drift is
            self._told(dep, d, "not-registered", f"{leader_url(units)} is missing from {', '.join(d.routers)}, which "
                       f"takes no worker over its API ({no_adds(homes)}): restart the router to register it again")  # fmt: skip
            return
        try:
            with self._locked(self._session(w, units), d.group) as surveys:
                if surveys is None:
                    return
                back = self._join(leader_url(units), [h for h in homes if h.adds])
            self._tell(WatchEvent(kind="registered", deployment=dep, group=d.group, at=self.clock(), data=where,
                                  message=f"{leader_url(units)} registered again in {', '.join(back)}"))  # fmt: skip
        except FleetError as err:
            self._tell(WatchEvent(kind="register-failed", deployment=dep, group=d.group, message=str(err), at=self.clock(),
                                  data=where))  # fmt: skip

    def _place(self, w: Watched, d: Decision, units: tuple[Desired, ...]) -> None:
        """The group planned with free spares standing in for its lost hosts (as ``up`` plans:
        the planner decides whether a spare can hold its ranks), its leader out of the routers,
        the ranks that survive stopped, every rank started on the new hosts together,
        health-gated, and back into the routers.  Nothing else of the deployment moves: a plan
        that would move another group is refused."""
        dep = w.target.deployment
        views = self.views.get(dep, {})
        now = self.clock()
        before = self.target(w)
        subst = dict(self.subst.get(dep, {}))
        standing = {spare: host for host, spare in subst.items()}
        lost = sorted({u.host for u in units if u.host not in views})
        free = self._free(w, units[0].unit.role, views)
        subst.update({standing.get(h, h): spare for h, spare in zip(lost, free)})
        moves = ", ".join(f"{h} -> {spare}" for h, spare in zip(lost, free))

        def tell(kind: str, msg: str, **data: object) -> None:
            self._tell(WatchEvent(kind=kind, deployment=dep, group=d.group, message=msg, at=self.clock(),
                                  data={"hosts": sorted({u.host for u in units} | set(free[: len(lost)])), **data}))  # fmt: skip

        def failed(why: str) -> None:
            self.place_failed[(dep, d.group)] = self.clock()
            tell("place-failed", mask(f"{moves}: {why}", w.target.secrets.values()))

        try:
            assert w.spares is not None
            after = w.spares.target(subst)
        except FleetError as err:
            return failed(f"the spares do not plan: {err}")
        new = groups(after.units).get(d.group, ())
        def others(t: Target) -> set[tuple[str, str]]:
            return {(x.name, x.host) for x in t.units if x.unit.group != d.group and x.unit.role not in INFRA_ROLES}

        if not new or others(before) != others(after):
            return failed("planned with the spares, other groups would move too; not placed")
        url, new_url = leader_url(units), leader_url(new)
        survivors = [u for u in units if u.host in views]
        session = self._session(w, new)
        try:
            with self._locked(session, d.group) as surveys:
                if surveys is None:
                    return
                tell("placing", f"{d.reason}: {moves}")
                out = self._take_out(w, url)
                out_at = self.clock()
                if survivors:  # their world is broken: no grace
                    session.stop(survivors, None)
                change = GroupChange(group=d.group, step=step_of(new), action="restart", reason=f"placed: {moves}", units=new)
                verdict = session.start([change], surveys)[d.group]
                if not verdict.healthy:
                    return failed(str(verdict.error))
                healthy_at = self.clock()
                self.subst[dep] = subst
                back = self._join(new_url, self._answering(w, new_url))
            done = self.clock()
            self.first_seen.pop((dep, d.group), None)
            tell("placed", f"{moves}; healthy" + (f" and in {', '.join(back)}" if back else "")
                 + (f" (out of {', '.join(h.url for h in out)}: {url})" if out and url != new_url else ""),
                 took_s=round(done - now, 3), restart_s=round(healthy_at - out_at, 3), register_s=round(done - healthy_at, 3))  # fmt: skip
        except FleetError as err:
            failed(str(err))
        for line in session.unreleased:
            tell("note", line)

    def _give_up(self, w: Watched, d: Decision, units: tuple[Desired, ...], hist: History) -> None:
        dep = w.target.deployment
        try:
            session = self._session(w, units)
            with self._locked(session, d.group) as surveys:
                if surveys is None:
                    return
                self._write(session, units, state.gave_up(hist, d.group, d.reason, self._stamp(units, surveys)))
        except FleetError as err:
            self._tell(WatchEvent(kind="note", deployment=dep, group=d.group, at=self.clock(),
                                  message=f"marking the group failed on its hosts failed: {err}"))  # fmt: skip
        self._tell(WatchEvent(kind="crash-loop", deployment=dep, group=d.group, message=d.reason, at=self.clock(),
                              data={"hosts": sorted({u.host for u in units})}))  # fmt: skip
