"""The watch's records on the hosts (launcher/deploy/watchstate.py) and its event hook
(launcher/watch/events.py): pure parsing and merging; the hook run for real with ``sh``."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.deploy.manifest import Manifest
from launcher.deploy import watchstate as state
from launcher.deploy.watchstate import History
from launcher.watch.events import Fanout, Hook, Log, WatchEvent


def manifest(unit: str, at: str) -> Manifest:
    return Manifest(deployment="d", unit=unit, host="h1", group="d/rank0", role="rank", rank=0, runtime="docker",
                    render_hash="x", recipe="r", image=None, generation=1, deployed_by="me", deployed_at=at, files=())


def test_a_record_written_is_read_back() -> None:
    rec = state.gave_up(History(recreations=(1.0, 2.5)), "d/rank0", "crash loop: x", "u@T")
    put = state.put("d", rec)
    assert (put.path, put.mode) == ("/etc/fleet/d/.watch/d_rank0.json", 0o644)
    assert state.parse(put.data.decode() + "not json\n{}\n") == {"d/rank0": rec}


def test_histories_merge_across_hosts_and_a_mark_holds_only_for_its_deployment() -> None:
    stamp = state.stamp([manifest("u1", "T1"), manifest("u0", "T0"), None])
    assert stamp == "u0@T0 u1@T1"
    a = state.Record(group="g", recreations=(1.0, 3.0))
    b = state.Record(group="g", recreations=(2.0, 3.0), failed="crash loop", failed_for=stamp)
    assert state.merged([a, b], stamp) == History(recreations=(1.0, 2.0, 3.0), failed="crash loop")
    redeployed = state.stamp([manifest("u0", "T9"), manifest("u1", "T9")])
    assert state.merged([a, b], redeployed) == History(recreations=(1.0, 2.0, 3.0))
    assert state.marks({"g": b}, {"g": stamp}) == {"g": "crash loop"}
    assert state.marks({"g": b}, {"g": redeployed}) == {}


def test_only_the_latest_recreations_are_kept() -> None:
    many = state.recreated(History(recreations=tuple(float(i) for i in range(80))), "g", 100.0)
    kept = json.loads(state.put("d", many).data)["recreations"]
    assert len(kept) == state.KEEP and kept[-1] == 100.0


def test_the_hook_gets_the_event_as_json_and_its_failure_is_logged(tmp_path: Path) -> None:
    lines: list[str] = []
    log = Log(lines.append, as_json=False)
    out = tmp_path / "events.jsonl"
    event = WatchEvent(kind="crash-loop", deployment="d", group="d/rank0", message="crash loop: x", at=0.0,
                       data={"attempt": 3})
    Fanout([log, Hook(f"cat >> '{out}'", log), Hook("echo nope >&2; exit 3", log, kinds=("crash-loop",)),
            Hook("exit 1", log, kinds=("recovered",))])(event)
    assert json.loads(out.read_text()) == {"kind": "crash-loop", "deployment": "d", "group": "d/rank0",
                                           "message": "crash loop: x", "at": "1970-01-01T00:00:00.000Z", "attempt": 3}
    assert lines == ["1970-01-01T00:00:00.000Z d/rank0: crash-loop: crash loop: x",
                     "1970-01-01T00:00:00.000Z d/rank0: hook-failed: --on-event for crash-loop: exit 3: nope"]
