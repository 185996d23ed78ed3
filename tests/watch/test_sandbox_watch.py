"""``fleet watch`` on the sandbox fleet, through the real CLI: two stand-in PP2 instances of the
Kimi TP8 PP2 recipe (``rank0`` on h1:h2, ``rank1`` on h3:h4) behind the deployment's own router
(the real sglang-router 0.3.2 on h5), one deployment shared by every case, in this order:

1. rank 1 of ``rank0`` killed (``docker kill`` on h2) under a bounded streaming load through the
   router: the watch takes the group out of the router, recreates it whole (every rank stopped,
   started together, health-gated) and registers it again; every request sent after it left
   the router is answered (those in flight on the killed group are counted and printed).
2. a crash loop: h4's image made to exit at start, its rank killed: recreations with backoff
   between them (each one no earlier than the backoff after the last), the watch gives up after
   ``--crash-limit`` (``crash-loop``), ``fleet status`` shows the group failed (exit 1), the
   ``--on-event`` hook got the event naming the group; with the image fixed, ``fleet up``
   redeploys it and the watch puts it back into the router.
3. a hung host (h3's sshd and its sessions SIGSTOPped): reported unreachable every survey,
   nothing done to any group; resumed, it is told reachable and nothing is done either.
4. an operator's deploy lock (held by a live process of this control host): the watch pauses
   and says so, does nothing while a rank is dead, resumes when the lock goes and recreates.
   A second watch on the deployment refuses, naming the first.
5. an operator's ``fleet restart --rolling`` while the watch runs: the watch pauses for its whole
   length (it takes groups out of the router on purpose) and does nothing; resumed after it.
6. the watch SIGKILLed mid-recreation (right after it took the group out of the router): a
   new watch takes over the dead one's claim and deploy lock and brings the group back into
   service.
7. the router killed (``docker kill`` on h5): the watch restarts it (a broken group of one rank,
   no router steps), both leaders are in it again, the event is in the run history and went to
   the ``--on-event`` hook; no engine group is touched.
8. the watch SIGTERMed mid-recreation (held by ``FLEET_STEP_HOOK`` at the health gate, its ranks
   started): it tears the group down as ``fleet up`` does -- no rank left running, no lock, no
   claim -- and exits 143 with one line; the next watch recreates the group.
9. the router and a rank of ``rank0`` killed together while ``rank1`` serves: the watch restarts
   the router first (sglang-router is ready with one healthy worker), so requests through it are
   answered while ``rank0`` is recreated, then puts ``rank0`` back into it.

Each case ends with every unit running, both leaders healthy in the router and no lock left.
Run (root, ~3 min): ``python -m pytest -q tests/watch/test_sandbox_watch.py``
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest

from launcher.rolling.router_api import RouterClient
from launcher.sandbox.client import Sandbox
from tests.cli_process import Cli, until
from tests.rolling.conftest import fleet, free_port, http, ok
from tests.rolling.loadgen import LoadGen
from tests.sandbox_playbooks import standin_playbook

pytestmark = pytest.mark.sandbox

DEP = "sb-watch"
HOSTS = ("h1", "h2", "h3", "h4", "h5")
HTTP, ROUTER = 31650, 8650
UNIT = {h: f"fleet-{DEP}-rank{i // 2}-r{i % 2}" for i, h in enumerate(HOSTS[:4])}
G0, G1, GR = f"{DEP}/rank0", f"{DEP}/rank1", f"{DEP}/router"
CRASH_LIMIT = 2
WAIT_S = 180.0  # safety bound for any one event
# A survey that takes longer names its host unreachable: the default (30 s), not a quick bound, since
# a healthy host's survey at CI's load (~99 on two cores) can take several seconds, and a spurious
# unreachable/reachable pair fails the cases that assert what the watch reported; the hung host's
# case pays it once (its next surveys fail at the reconnect's banner deadline).
SURVEY_TIMEOUT_S = "30"


@pytest.fixture(scope="module")
def deployed(sandbox_fleet: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, Path]]:
    sb = sandbox_fleet
    tmp = tmp_path_factory.mktemp("watch")
    before = os.environ.get("FLEET_STATE_DIR")
    os.environ["FLEET_STATE_DIR"] = str(tmp / "state")  # this module's own run history (fleet history)
    pb = tmp / "watch.yaml"
    pb.write_text(standin_playbook(DEP, "kimi/sglang-tp8pp2-h100", {"rank": "h1:h2:h3:h4", "router": "h5"},
                                   start_timeout_s=60, env={"FLEET_STANDIN_TOKEN_MS": "5"},
                                   ports={"http": HTTP, "router": ROUTER, "router_metrics": 29650}))  # fmt: skip
    try:
        ok(fleet(sb, "up", str(pb), "--skip-preflight", "--quiet"))
        yield sb, pb
    finally:
        fleet(sb, "down", str(pb), "--quiet", "--break-lock")
        if before is None:
            del os.environ["FLEET_STATE_DIR"]
        else:
            os.environ["FLEET_STATE_DIR"] = before


class Watcher(Cli):
    """``fleet watch`` in its own process group, its events read as JSON lines from stdout."""

    def __init__(self, sb: Sandbox, pb: Path, name: str, *extra: str, crash_limit: int = 20) -> None:
        """``crash_limit``: the recreations of the cases before count (they are on the hosts)."""
        self.hook = pb.parent / f"{name}.hook.jsonl"
        super().__init__(sb, sb.inventory, pb.parent, name, "watch", str(pb), "--interval", "1", "--json", "-q",
                         "--backoff", "2", "--crash-limit", str(crash_limit), "--survey-timeout", SURVEY_TIMEOUT_S,
                         "--on-event", f"cat >> {self.hook}", *extra)  # fmt: skip

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.stdout.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def wait(self, kind: str, group: str = "", after: int = 0, timeout: float = WAIT_S) -> dict[str, Any]:
        """The first event of ``kind`` (for ``group``) at index ``after`` or later."""
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.events()[after:] if e["kind"] == kind and (not group or e["group"] == group)]
            if found:
                return found[0]
            assert self.proc.poll() is None, f"watch exited {self.proc.returncode}:\n{self.stdout}\n{self.stderr}"
            assert time.monotonic() < deadline, f"no {kind} {group} event within {timeout:g}s:\n{self.stdout}"
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, as systemd stops it: exit 143, told so, no traceback."""
        self.sigint(signal.SIGTERM)
        self.proc.wait(120)
        assert self.proc.returncode == 143, (self.proc.returncode, self.stderr)
        assert "Traceback" not in self.stderr and self.stderr.splitlines()[-1] == "fleet: terminated by SIGTERM"
        self.close()


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text: str = r.read().decode()
        return text


def epoch(event: dict[str, Any]) -> float:
    return datetime.datetime.strptime(event["at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def router(sb: Sandbox) -> RouterClient:
    return RouterClient(f"http://{sb.host('h5').address}:{ROUTER}")


def leader(sb: Sandbox, h: str) -> str:
    return f"http://{sb.host(h).data_ip}:{HTTP}"


def serving(sb: Sandbox, pb: Path) -> None:
    """Every unit runs, fleet status is clean, both leaders are healthy in the router, no lock."""
    proc = fleet(sb, "status", str(pb), "--json")
    rows = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {(r["host"], r["state"], r["watch"]) for r in rows} == {(h, "running", "") for h in HOSTS}
    workers = {w.url: w.healthy for w in router(sb).workers()}
    assert workers == {leader(sb, "h1"): True, leader(sb, "h3"): True}, workers
    for h in HOSTS:
        assert sb.ssh(h, f"test -e /run/fleet/lock/{DEP}").rc != 0, f"{h}: deploy lock left"


def runs() -> list[dict[str, Any]]:
    """The run history (``fleet history --json``): the operator's runs and the watch's actions."""
    proc = subprocess.run(["fleet", "history", "--json", "-n", "1000"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    found: list[dict[str, Any]] = json.loads(proc.stdout)
    return found


def kill(sb: Sandbox, h: str) -> None:
    res = sb.ssh(h, f"docker kill {UNIT[h]}")
    assert res.rc == 0, res.err


def test_a_killed_rank_is_recreated_with_its_group_and_no_request_after_it_left_the_router_fails(
    deployed: tuple[Sandbox, Path],
) -> None:
    sb, pb = deployed
    port, targets = free_port(), pb.parent / "targets.json"
    w = Watcher(sb, pb, "kill", "--metrics-port", str(port), "--targets-file", str(targets))
    try:
        w.wait("note")
        watch_target = [g for g in json.loads(targets.read_text()) if g["labels"]["kind"] == "fleet-watch"]
        assert [(g["targets"], g["labels"]["deployment"]) for g in watch_target] == [([f"127.0.0.1:{port}"], DEP)]
        load = LoadGen(f"http://{sb.host('h5').address}:{ROUTER}", workers=6, stream_every=3, stream_tokens=100,
                       max_seconds=120).start()  # fmt: skip
        time.sleep(2)
        kill(sb, "h2")
        recreating = w.wait("recreating", G0)
        out = w.wait("out-of-router", G0)
        recovered = w.wait("recovered", G0)
        results = load.stop(at_least=200)
        kinds = [e["kind"] for e in w.events() if e["group"] == G0]
        assert kinds == ["recreating", "out-of-router", "recovered"], w.stdout
        assert recovered["attempt"] == 1 and recovered["time_to_recover_s"] > 0, recovered
        assert not [e for e in w.events() if e["group"] == G1], w.stdout
        left = epoch(out)
        after = [r for r in results if r.started > left]
        lost = [r for r in results if not r.ok]
        print(f"kill: {len(results)} requests, {len(lost)} failed (all sent before {out['at']}, in flight on or "
              f"routed to the killed group); {len(after)} sent after it left the router; recreating "
              f"{recreating['message']!r}; recovered {recovered}")  # fmt: skip
        assert after and all(r.ok for r in after), [(r.error, r.status) for r in after if not r.ok][:5]
        assert all(r.started <= left for r in lost)
        want = {f'fleet_watch_recreations_total{{deployment="{DEP}",group="{G0}",outcome="recovered"}} 1.0',
                f'fleet_watch_groups{{deployment="{DEP}",state="healthy"}} 3.0',  # the next survey's
                f'fleet_watch_time_to_recover_seconds_count{{deployment="{DEP}"}} 1.0'}
        until("the watch's metrics after the recovery", lambda: want <= set(scrape(port).splitlines()), timeout=WAIT_S)
        (mine,) = [r for r in runs() if r["command"][1] == "watch"]
        assert (mine["deployment"], mine["exit_code"], mine["outcomes"]) == (DEP, 0, [
            {"host": "h1", "unit": G0, "outcome": "recreated"}, {"host": "h2", "unit": G0, "outcome": "recreated"}])
    finally:
        w.stop()
    serving(sb, pb)


def _poison(sb: Sandbox, h: str) -> str:
    """``h``'s stand-in image replaced by one that exits at start; returns the original's id."""
    res = sb.ssh(h, 'docker image inspect -f "{{.Id}}" fleet-standin:latest && docker rm -f mk >/dev/null 2>&1; '
                    'docker create --name mk fleet-standin:latest >/dev/null && docker commit --change '
                    '"ENV FLEET_STANDIN_FAIL=crash-at-start" mk fleet-standin:latest >/dev/null && docker rm mk >/dev/null')
    assert res.rc == 0, res.err
    return res.out.split()[0]


def test_a_crash_loop_backs_off_then_gives_up_and_shows_failed(deployed: tuple[Sandbox, Path]) -> None:
    sb, pb = deployed
    original = _poison(sb, "h4")
    w = Watcher(sb, pb, "crash", crash_limit=CRASH_LIMIT)  # rank1 was not recreated before
    try:
        w.wait("note")
        kill(sb, "h4")
        gave_up = w.wait("crash-loop", G1)
        events = [e for e in w.events() if e["group"] == G1]
        tries = [e for e in events if e["kind"] == "recreating"]
        assert [e["attempt"] for e in tries] == list(range(1, CRASH_LIMIT + 1)), w.stdout
        assert sum(e["kind"] == "recreate-failed" for e in events) == CRASH_LIMIT
        assert all("injected failure: crash-at-start" in e["message"] for e in events if e["kind"] == "recreate-failed")
        assert any(e["kind"] == "backoff" for e in events), w.stdout
        for n, (a, b) in enumerate(zip(tries, tries[1:]), start=1):  # n-th backoff: 2 s * 2**(n-1) after n-th try
            assert epoch(b) - epoch(a) >= 2 * 2 ** (n - 1), (n, a, b)
        assert gave_up["message"].startswith("crash loop: ") and f"after {CRASH_LIMIT} recreations" in gave_up["message"]
        w.wait("failed", G1)
        hooked = [json.loads(line) for line in w.hook.read_text().splitlines()]
        assert any(e["kind"] == "crash-loop" and e["group"] == G1 for e in hooked), hooked
        assert not [e for e in w.events() if e["group"] == G0], w.stdout
        status = fleet(sb, "status", str(pb))
        assert status.returncode == 1
        assert f"fleet: group {G1} failed: fleet watch gave up on it: crash loop: " in status.stderr, status.stderr
        # Fixed and redeployed by the operator: the mark no longer holds; the watch registers it.
        res = sb.ssh("h4", f"docker tag {original} fleet-standin:latest")
        assert res.rc == 0, res.err
        mark = len(w.events())
        ok(fleet(sb, "up", str(pb), "--skip-preflight", "--quiet"))
        w.wait("registered", G1, after=mark)
    finally:
        sb.ssh("h4", f"docker tag {original} fleet-standin:latest")
        w.stop()
    serving(sb, pb)


def _sshd_tree(sb: Sandbox, h: str) -> list[psutil.Process]:
    """``h``'s sshd listener and its session processes: stopped, the host is hung for SSH."""
    host = sb.host(h)
    assert host.sshd is not None
    top = psutil.Process(host.sshd.pid)
    return [top, *(p for p in top.children(recursive=True) if _named_sshd(p))]


def _named_sshd(p: psutil.Process) -> bool:
    """Whether ``p`` is an sshd; a session process that ended since the listing (the watch's
    surveys open and close them) is not one to stop (ci23 met one gone between the two reads)."""
    try:
        return p.name().startswith("sshd")
    except psutil.NoSuchProcess:
        return False


def test_a_hung_host_is_reported_and_nothing_thrashes(deployed: tuple[Sandbox, Path]) -> None:
    sb, pb = deployed
    w = Watcher(sb, pb, "hung")
    stopped: list[psutil.Process] = []
    try:
        w.wait("note")
        stopped = _sshd_tree(sb, "h3")
        for p in stopped:
            p.suspend()
        first = w.wait("unreachable")
        n = w.events().index(first)
        w.wait("unreachable", after=n + 1)  # every survey
        for p in stopped:
            p.resume()
        stopped = []
        back = w.wait("reachable")
        mark = w.events().index(back)
        time.sleep(3)  # three more surveys of a converged deployment
        away = [e for e in w.events() if e["kind"] == "unreachable"]
        assert away and all(e["host"] == "h3" for e in away), w.stdout
        acted = [e for e in w.events() if e["group"]]
        assert acted == [], w.stdout
        assert [e["kind"] for e in w.events()[mark + 1:]] == [], w.stdout
    finally:
        for p in stopped:
            p.resume()
        w.stop()
    serving(sb, pb)


def _hold_lock(sb: Sandbox, hosts: tuple[str, ...]) -> str:
    """The deploy lock on ``hosts`` as a fleet run of this control host that still runs (this
    test's own process) holds it; its owner line."""
    me = psutil.Process()
    owner = (f"root@{socket.gethostname()} pid={me.pid} start={me.create_time():.2f} time=2026-01-01T00:00:00Z "
             "id=operator0000")  # fmt: skip
    for h in hosts:
        res = sb.ssh(h, f"mkdir -p /run/fleet/lock/{DEP} && printf '%s\\n' '{owner}' > /run/fleet/lock/{DEP}/owner")
        assert res.rc == 0, res.err
    return owner


def test_an_operators_lock_pauses_the_watch_and_a_second_watch_refuses(deployed: tuple[Sandbox, Path]) -> None:
    sb, pb = deployed
    w = Watcher(sb, pb, "paused")
    try:
        w.wait("note")
        second = fleet(sb, "watch", str(pb), "--once")
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"deployment '{DEP}' is watched already by root@" in second.stderr
        assert f"pid={w.proc.pid} " in second.stderr, second.stderr
        owner = _hold_lock(sb, HOSTS)
        paused = w.wait("paused")
        assert paused["message"] == f"the deploy lock is held by {owner}: the watch waits for it"
        kill(sb, "h2")
        time.sleep(3)  # three surveys while paused
        assert not [e for e in w.events() if e["group"]], w.stdout
        for h in HOSTS:
            sb.ssh(h, f"rm -rf /run/fleet/lock/{DEP}")
        w.wait("resumed")
        w.wait("recovered", G0)
    finally:
        for h in HOSTS:
            sb.ssh(h, f"rm -rf /run/fleet/lock/{DEP}")
        w.stop()
    serving(sb, pb)


def test_an_operators_rolling_restart_runs_beside_the_watch_untouched(deployed: tuple[Sandbox, Path]) -> None:
    sb, pb = deployed
    w = Watcher(sb, pb, "rolling")
    try:
        w.wait("note")
        known = len(runs())
        ok(fleet(sb, "restart", str(pb), "--rolling", "--max-unavailable", "1", "--quiet"))
        w.wait("resumed")
        time.sleep(2)  # two surveys after it
        kinds = [e["kind"] for e in w.events()]
        assert kinds == ["note", "paused", "resumed"], w.stdout  # nothing done, nothing else reported
        # The run history: the operator's restart, each group restarted once; nothing of the watch.
        (restart,) = runs()[known:]
        assert restart["command"][1] == "restart" and restart["exit_code"] == 0, restart
        assert {o["unit"] for o in restart["outcomes"] if o["outcome"] == "restarted"} == {G0, G1}, restart
    finally:
        w.stop()
    serving(sb, pb)


def test_a_watch_killed_mid_recreation_is_finished_by_the_next(deployed: tuple[Sandbox, Path]) -> None:
    sb, pb = deployed
    first = Watcher(sb, pb, "killed")
    try:
        first.wait("note")
        kill(sb, "h2")
        first.wait("out-of-router", G0)
        first.kill()  # SIGKILL: its claim and the deploy lock stay on the hosts
    finally:
        first.close()
    assert sb.ssh("h1", f"test -e /run/fleet/lock/{DEP}.watch").rc == 0
    assert leader(sb, "h1") not in {w.url for w in router(sb).workers()}
    # A dry run says what it would do and changes nothing (it takes no claim: the dead one stays).
    dry = fleet(sb, "watch", str(pb), "--once", "--dry-run", "--json", "--backoff", "0")
    assert dry.returncode == 0, dry.stderr
    said = [json.loads(line) for line in dry.stdout.splitlines()]
    assert [e["group"] for e in said if e["kind"].startswith("would-")] == [G0], dry.stdout
    assert leader(sb, "h1") not in {w.url for w in router(sb).workers()}
    nxt = Watcher(sb, pb, "next")
    try:
        done = nxt.wait("recovered", G0) if _broken_now(nxt) else nxt.wait("registered", G0)
        assert done["group"] == G0
    finally:
        nxt.stop()
    serving(sb, pb)
    assert sb.ssh("h1", f"test -e /run/fleet/lock/{DEP}.watch").rc != 0, "the watch's claim was left"


def test_a_dead_router_is_restarted_and_the_leaders_are_in_it_again(deployed: tuple[Sandbox, Path]) -> None:
    sb, pb = deployed
    w = Watcher(sb, pb, "router")
    try:
        w.wait("note")
        known = len(runs())
        res = sb.ssh("h5", f"docker kill $(docker ps -q --filter label=fleet.deployment={DEP})")
        assert res.rc == 0, res.err
        recreating = w.wait("recreating", GR)
        recovered = w.wait("recovered", GR)
        assert recreating["message"].startswith("h5/") and " is exited (exit 137) (attempt " in recreating["message"], recreating
        assert recovered["message"] == "healthy again", recovered  # no router steps: it is the router
        until("both leaders in the restarted router", lambda: {x.url for x in router(sb).workers()} == {
            leader(sb, "h1"), leader(sb, "h3")}, timeout=WAIT_S)  # fmt: skip

        def hooked() -> list[str]:  # the hook runs after the log line is written
            return [e["kind"] for line in w.hook.read_text().splitlines() if (e := json.loads(line))["group"] == GR]

        until("the --on-event hook's recovered", lambda: hooked() == ["recreating", "recovered"], timeout=WAIT_S)
        # The engine groups: untouched (registered again only if the restarted router lacked them).
        assert not [e for e in w.events() if e["group"] in (G0, G1) and e["kind"] != "registered"], w.stdout
        print(f"router: {recreating['message']!r}, recovered {recovered}; engine groups: "
              f"{[(e['kind'], e['group']) for e in w.events() if e['group'] in (G0, G1)]}")  # fmt: skip
        (mine,) = [r for r in runs()[known:] if r["outcomes"][0]["unit"] == GR]
        assert (mine["command"][1], mine["exit_code"], mine["outcomes"]) == (
            "watch", 0, [{"host": "h5", "unit": GR, "outcome": "recreated"}]), mine
    finally:
        w.stop()
    serving(sb, pb)


# Holds the watch before its health gate on h1 (rank0's leader; only a recreation of rank0 gates there).
HOLD = """[ "$FLEET_STEP" = health ] || exit 0
case " $FLEET_STEP_HOSTS " in *" h1 "*) ;; *) exit 0 ;; esac
touch "$HOLD_DIR/at"
while [ ! -e "$HOLD_DIR/go" ]; do sleep 0.1; done
"""


def running(sb: Sandbox, h: str) -> list[str]:
    res = sb.ssh(h, f"docker ps -q --filter label=fleet.deployment={DEP}")
    assert res.rc == 0, res.err
    return res.out.split()


def test_a_watch_terminated_mid_recreation_tears_the_group_down_and_the_next_recreates_it(
    deployed: tuple[Sandbox, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    sb, pb = deployed
    hold = pb.parent / "hold"
    hold.mkdir()
    (hold / "hook.sh").write_text(HOLD)
    with monkeypatch.context() as env:  # the held watch's environment only
        env.setenv("FLEET_STEP_HOOK", f"sh {hold / 'hook.sh'}")
        env.setenv("HOLD_DIR", str(hold))
        w = Watcher(sb, pb, "term")
    try:
        w.wait("note")
        kill(sb, "h2")
        w.wait("out-of-router", G0)
        until("the watch held at rank0's health gate", lambda: (hold / "at").exists(), timeout=WAIT_S)
        assert running(sb, "h1") and running(sb, "h2"), "both ranks started before the gate"
        w.sigint(signal.SIGTERM)
        w.proc.wait(120)
        assert w.proc.returncode == 143, (w.proc.returncode, w.stderr)
        assert "Traceback" not in w.stderr and w.stderr.splitlines()[-1] == "fleet: terminated by SIGTERM", w.stderr
        assert not [e for e in w.events() if e["kind"] in ("recovered", "recreate-failed")], w.stdout
    finally:
        (hold / "go").touch()
        w.close()
    # Rolled back as up does it: no rank of the group runs, nothing of the watch is left on the hosts.
    assert running(sb, "h1") == [] and running(sb, "h2") == [], "a rank of the torn-down group runs"
    for h in HOSTS:
        assert sb.ssh(h, f"test -e /run/fleet/lock/{DEP}").rc != 0, f"{h}: deploy lock left"
        assert sb.ssh(h, f"test -e /run/fleet/lock/{DEP}.watch").rc != 0, f"{h}: the watch's claim left"
    assert leader(sb, "h1") not in {x.url for x in router(sb).workers()}
    print(f"terminated: {[(e['kind'], e['message']) for e in w.events() if e['group'] == G0]}; {w.stderr.splitlines()[-3:]}")
    nxt = Watcher(sb, pb, "after-term")
    try:
        print(f"next watch: {nxt.wait('recovered', G0)}")
    finally:
        nxt.stop()
    serving(sb, pb)


def _broken_now(w: Watcher) -> bool:
    """Whether the next watch found the group broken (it recreates) rather than healthy and out
    of its router (it registers): which one depends on where the kill landed."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        kinds = {e["kind"] for e in w.events() if e["group"] == G0}
        if kinds & {"recreating", "registered"}:
            return "recreating" in kinds
        time.sleep(0.1)
    raise AssertionError(f"the next watch did nothing about {G0}:\n{w.stdout}")


def test_a_dead_router_beside_a_broken_group_is_restarted_first(deployed: tuple[Sandbox, Path],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    sb, pb = deployed
    hold = pb.parent / "hold-order"
    hold.mkdir()
    (hold / "hook.sh").write_text(HOLD)
    kill(sb, "h2")
    res = sb.ssh("h5", f"docker kill $(docker ps -q --filter label=fleet.deployment={DEP})")
    assert res.rc == 0, res.err
    with monkeypatch.context() as env:  # the held watch's environment only
        env.setenv("FLEET_STEP_HOOK", f"sh {hold / 'hook.sh'}")
        env.setenv("HOLD_DIR", str(hold))
        w = Watcher(sb, pb, "order")
    try:
        until("the watch held at rank0's health gate", lambda: (hold / "at").exists(), timeout=WAIT_S)
        acted = [(e["kind"], e["group"]) for e in w.events() if e["kind"] in ("recreating", "recovered")]
        assert acted == [("recreating", GR), ("recovered", GR), ("recreating", G0)], w.stdout
        # While rank0 starts, the restarted router answers through rank1.
        code, doc = http(f"http://{sb.host('h5').address}:{ROUTER}/generate",
                         {"text": "while rank0 starts", "sampling_params": {"max_new_tokens": 2}}, timeout=60)  # fmt: skip
        assert code == 200 and doc["fleet_standin"]["host"] == "h3", (code, doc)
        (hold / "go").touch()
        w.wait("recovered", G0)
        print(f"router first: {[(e['kind'], e['group'], e['message']) for e in w.events() if e['kind'] != 'note']}")
    finally:
        (hold / "go").touch()
        w.stop()
    serving(sb, pb)
