"""The watch loop's bookkeeping without hosts (launcher/watch/loop.py): standing conditions told
once per change (and again after REMIND_S), the pause on another deploy's lock told once and
its end once, a dead holder's lock not pausing; the leader URL of engine and infrastructure
groups."""

from __future__ import annotations

import hashlib
import socket
from dataclasses import replace

import psutil

from launcher.deploy.desired import groups, secrets_file
from launcher.deploy.manifest import Manifest
from launcher.deploy.survey import Survey
from launcher.errors import FleetError
from launcher.model import Host
from launcher.watch.decide import Decision
from launcher.watch.events import WatchEvent
from launcher.watch.look import HostView
from launcher.watch.loop import REMIND_S, Options, Watch, as_deployed, leader_url
from tests.deploy.factory import pp_plan, target


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watch() -> tuple[Watch, list[WatchEvent], Clock]:
    told: list[WatchEvent] = []
    clock = Clock()

    def connect(h: Host) -> object:
        raise FleetError("no hosts here")

    return Watch([], connect, Options(), told.append, clock=clock), told, clock  # type: ignore[arg-type]


def test_a_standing_condition_is_told_once_per_change_and_again_after_the_reminder() -> None:
    w, told, clock = watch()
    drift = Decision(group="d/g", kind="drift", reason="h1/u differ from the playbook (report only)")
    for _ in range(3):
        w._told("d", drift, "drift", drift.reason)
        clock.now += 1
    assert [e.kind for e in told] == ["drift"]
    for left in (9, 8, 7):  # a backoff's countdown is no change
        w._told("d", drift, "backoff", f"x; next attempt in {left}s")
    assert [e.kind for e in told] == ["drift", "backoff"]
    clock.now += REMIND_S
    w._told("d", drift, "backoff", "x; next attempt in 1s")
    assert [e.kind for e in told] == ["drift", "backoff", "backoff"]


def view(owner: str) -> HostView:
    return HostView(survey=Survey(manifests={}, live={}), owner=owner)


def test_another_deploys_lock_pauses_once_and_resumes_once() -> None:
    w, told, _ = watch()
    other = psutil.Process().parent()  # a process of this control host that runs, not this watch
    assert other is not None
    live = f"op@{socket.gethostname()} pid={other.pid} start={other.create_time():.2f} time=T id=a"
    gone = f"op@{socket.gethostname()} pid={other.pid} start={other.create_time() - 100:.2f} time=T id=b"
    assert w._held_by_other("d", {"h1": view(live), "h2": view("")}, 1.0)
    assert w._held_by_other("d", {"h1": view(live)}, 2.0)
    assert not w._held_by_other("d", {"h1": view(gone)}, 3.0)  # its holder is gone: taken over by the action
    assert not w._held_by_other("d", {"h1": view("")}, 4.0)
    assert [(e.kind, e.message) for e in told] == [
        ("paused", f"the deploy lock is held by {live}: the watch waits for it"),
        ("resumed", "the deploy lock was released"),
    ]


def test_the_leader_url_of_an_engine_group_and_none_for_the_router() -> None:
    urls = {g: leader_url(units) for g, units in groups(target(pp_plan()).units).items()}
    assert urls == {"g0": "http://h1:30000", "router": None}


def test_a_lock_of_this_watch_itself_does_not_pause_it() -> None:
    w, told, _ = watch()
    me = psutil.Process()
    mine = f"root@{socket.gethostname()} pid={me.pid} start={me.create_time():.2f} time=T id=ours"
    released: list[str] = []

    class Host:
        host = "h1"

        def run(self, argv: object, **kw: object) -> object:
            released.append(" ".join(str(a) for a in argv))  # type: ignore[attr-defined]
            from launcher.execute.transport import Result

            return Result(host="h1", command="release", exit_status=0, stdout=b"", stderr=b"")

    w.conns["h1"] = Host()  # type: ignore[assignment]
    assert not w._held_by_other("d", {"h1": view(mine)}, 1.0)
    assert told == [] and len(released) == 1 and mine in released[0]


def test_as_deployed_compares_the_secrets_files_digest_with_the_values_resolved_now() -> None:
    d = next(u for u in target(pp_plan(secret=True)).units if u.unit.rank == 1)
    m = Manifest(deployment="demo", unit=d.name, host=d.host, group=d.unit.group, role="rank", rank=1, runtime="docker",
                 render_hash=d.render_hash, recipe="fam/pp", image="engine:1", generation=1, deployed_by="op",
                 deployed_at="2026-12-02T00:00:00Z", files=())  # fmt: skip
    given = secrets_file(d, {"HF_TOKEN": "tok-A"})
    assert given is not None
    on_host = Survey(manifests={d.name: m}, live={}, secret_hashes={d.secrets_path: hashlib.sha256(given.content).hexdigest()})
    same, rotated = as_deployed(d, on_host, {"HF_TOKEN": "tok-A"}), as_deployed(d, on_host, {"HF_TOKEN": "tok-B"})
    assert (same.deployed, same.drifted, same.resecret) == (True, False, False)
    assert (rotated.drifted, rotated.resecret) == (False, True)
    assert not as_deployed(d, on_host, {}).resecret, "a secret not resolved here: nothing to compare"
    assert not as_deployed(d, Survey(manifests={d.name: m}, live={}), {"HF_TOKEN": "tok-B"}).resecret, "not hashed"
    moved = replace(m, render_hash="other")
    assert as_deployed(d, replace(on_host, manifests={d.name: moved}), {"HF_TOKEN": "tok-A"}).drifted
