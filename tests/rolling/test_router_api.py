"""The router client against a fake HTTP, engine in-flight counters, the drain loop, and the
prev/ swap script run by a real ``sh`` on a temporary directory."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from launcher.deploy.manifest import Manifest
from launcher.rolling import restore
from launcher.rolling.roll import _drain_text
from launcher.engines import router
from launcher.rolling.router_api import (Drained, RouterClient, RouterError, drain, inflight, parse_get_load,
                                         parse_metrics, metrics_inflight)


class FakeHttp:
    def __init__(self, answers: dict[tuple[str, str], tuple[int, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str, object | None]] = []

    def request(self, method: str, url: str, body: object | None = None, timeout: float = 10.0) -> tuple[int, str]:
        self.calls.append((method, url, body))
        return self.answers.get((method, url), (404, '{"detail":"Not Found"}'))


WORKERS = json.dumps({"workers": [
    {"id": "u-1", "url": "http://10.0.0.1:30000", "worker_type": "regular", "is_healthy": True, "load": 2},
    {"id": "u-2", "url": "http://10.0.0.2:30000", "worker_type": "regular", "is_healthy": False, "load": 0},
], "total": 2})  # fmt: skip


def test_router_worker_management_calls() -> None:
    http = FakeHttp({
        ("GET", "http://r:8000/workers"): (200, WORKERS),
        ("POST", "http://r:8000/workers"): (202, '{"status":"accepted"}'),
        ("DELETE", "http://r:8000/workers/u-1"): (202, '{"status":"accepted"}'),
    })  # fmt: skip
    r = RouterClient("http://r:8000/", http)
    assert [(w.url, w.healthy, w.load) for w in r.workers()] == [
        ("http://10.0.0.1:30000", True, 2), ("http://10.0.0.2:30000", False, 0)
    ]  # fmt: skip
    assert r.remove("http://10.0.0.1:30000/") is True
    assert r.remove("http://10.0.0.9:30000") is False
    r.add("http://10.0.0.3:30000", "prefill", 8998)
    assert ("DELETE", "http://r:8000/workers/u-1", None) in http.calls
    assert ("POST", "http://r:8000/workers", {"url": "http://10.0.0.3:30000", "worker_type": "prefill", "bootstrap_port": 8998}) in http.calls


def test_vllm_router_workers_are_deleted_by_url() -> None:
    """vllm-router 0.1.17 (seen live in the real-engine sandbox) lists workers without an id and
    removes one with ``DELETE /workers/<url-encoded URL>``."""
    listed = json.dumps({"workers": [{"url": "http://10.0.0.1:8100", "model_id": "unknown", "worker_type": "regular",
                                      "is_healthy": True, "load": 0}], "total": 1})  # fmt: skip
    gone = "http://r:8300/workers/http%3A%2F%2F10.0.0.1%3A8100"
    http = FakeHttp({("GET", "http://r:8300/workers"): (200, listed), ("DELETE", gone): (200, '{"success":true}')})
    assert RouterClient("http://r:8300", http).remove("http://10.0.0.1:8100") is True
    assert ("DELETE", gone, None) in http.calls


def test_router_errors_are_one_line() -> None:
    r = RouterClient("http://r:8000", FakeHttp({("GET", "http://r:8000/workers"): (500, "boom\nmore")}))
    with pytest.raises(RouterError) as err:
        r.workers()
    assert str(err.value) == "router http://r:8000: GET /workers: HTTP 500: boom more"
    gone = RouterClient("http://r:8000", FakeHttp({("GET", "http://r:8000/workers"): (0, "connection refused")}))
    with pytest.raises(RouterError) as err:
        gone.workers()
    assert str(err.value) == "router http://r:8000: GET /workers: no answer: connection refused"
    assert len(gone.http.calls) == 1, "a refusal is final"  # type: ignore[attr-defined]


class SlowHttp(FakeHttp):
    """Times out ``slow`` times, then answers as :class:`FakeHttp`."""

    def __init__(self, slow: int, answers: dict[tuple[str, str], tuple[int, str]]) -> None:
        super().__init__(answers)
        self.slow = slow

    def request(self, method: str, url: str, body: object | None = None, timeout: float = 10.0) -> tuple[int, str]:
        if len(self.calls) < self.slow:
            self.calls.append((method, url, body))
            return 0, "timed out"
        return super().request(method, url, body, timeout)


def test_a_get_that_timed_out_is_asked_again() -> None:
    answers = {("GET", "http://r:8000/workers"): (200, WORKERS), ("POST", "http://r:8000/workers"): (202, "{}")}
    busy = RouterClient("http://r:8000", SlowHttp(2, answers))
    assert [w.id for w in busy.workers()] == ["u-1", "u-2"]
    assert len(busy.http.calls) == 3  # type: ignore[attr-defined]
    with pytest.raises(RouterError) as err:
        RouterClient("http://r:8000", SlowHttp(3, answers)).workers()
    assert str(err.value) == "router http://r:8000: GET /workers: no answer in 3 tries: timed out"


class ScriptedHttp:
    """Answers each (method, URL) from its own list in turn (the last one repeats)."""

    def __init__(self, answers: dict[tuple[str, str], list[tuple[int, str]]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str]] = []

    def request(self, method: str, url: str, body: object | None = None, timeout: float = 10.0) -> tuple[int, str]:
        self.calls.append((method, url.removeprefix("http://r:8000")))
        got = self.answers[(method, url)]
        return got.pop(0) if len(got) > 1 else got[0]


def listed(*urls: str) -> tuple[int, str]:
    return 200, json.dumps({"workers": [{"id": f"u-{u[-7]}", "url": u, "worker_type": "regular", "is_healthy": True}
                                        for u in urls]})  # fmt: skip


NEW, OLD = "http://10.0.0.3:30000", "http://10.0.0.1:30000"
LATE = (0, "timed out")


def test_a_post_without_an_answer_is_sent_again_only_while_the_worker_is_not_listed() -> None:
    # Not listed after the silent POST: sent again.
    http = ScriptedHttp({("POST", "http://r:8000/workers"): [LATE, (202, "{}")],
                         ("GET", "http://r:8000/workers"): [listed(OLD)]})  # fmt: skip
    RouterClient("http://r:8000", http).add(NEW)
    assert http.calls == [("POST", "/workers"), ("GET", "/workers"), ("POST", "/workers")]
    # Listed by then (the router had taken it): not sent again.
    http = ScriptedHttp({("POST", "http://r:8000/workers"): [LATE],
                         ("GET", "http://r:8000/workers"): [listed(OLD, NEW)]})  # fmt: skip
    RouterClient("http://r:8000", http).add(NEW)
    assert http.calls == [("POST", "/workers"), ("GET", "/workers")]
    # Sent again and refused as a URL it has (vllm-router 0.1.17's 400), listed: done.
    http = ScriptedHttp({("POST", "http://r:8000/workers"): [LATE, (400, '{"error":"already exists"}')],
                         ("GET", "http://r:8000/workers"): [listed(OLD), listed(OLD, NEW)]})  # fmt: skip
    RouterClient("http://r:8000", http).add(NEW)
    assert http.calls == [("POST", "/workers"), ("GET", "/workers"), ("POST", "/workers"), ("GET", "/workers")]
    # Sent again, refused and still not listed: the second answer is the error.
    http = ScriptedHttp({("POST", "http://r:8000/workers"): [LATE, (500, "full")],
                         ("GET", "http://r:8000/workers"): [listed(OLD)]})  # fmt: skip
    with pytest.raises(RouterError) as err:
        RouterClient("http://r:8000", http).add(NEW)
    assert str(err.value) == "router http://r:8000: POST /workers: HTTP 500: full"
    # A refusal is final: not sent again, the list not read.
    http = ScriptedHttp({("POST", "http://r:8000/workers"): [(500, "full")]})
    with pytest.raises(RouterError):
        RouterClient("http://r:8000", http).add(NEW)
    assert http.calls == [("POST", "/workers")]


def test_a_delete_without_an_answer_is_sent_again_only_while_the_worker_is_listed() -> None:
    http = ScriptedHttp({("DELETE", "http://r:8000/workers/u-1"): [LATE, (404, "{}")],
                         ("GET", "http://r:8000/workers"): [listed(OLD), listed(OLD)]})  # fmt: skip
    assert RouterClient("http://r:8000", http).remove(OLD) is True
    assert http.calls == [("GET", "/workers"), ("DELETE", "/workers/u-1"), ("GET", "/workers"),
                          ("DELETE", "/workers/u-1")]  # fmt: skip
    http = ScriptedHttp({("DELETE", "http://r:8000/workers/u-1"): [LATE],
                         ("GET", "http://r:8000/workers"): [listed(OLD), listed()]})  # fmt: skip
    assert RouterClient("http://r:8000", http).remove(OLD) is True
    assert http.calls == [("GET", "/workers"), ("DELETE", "/workers/u-1"), ("GET", "/workers")]
    http = ScriptedHttp({("DELETE", "http://r:8000/workers/u-1"): [(500, "busy")],
                         ("GET", "http://r:8000/workers"): [listed(OLD)]})  # fmt: skip
    with pytest.raises(RouterError) as err:
        RouterClient("http://r:8000", http).remove(OLD)
    assert str(err.value) == "router http://r:8000: DELETE /workers/u-1: HTTP 500: busy"
    assert http.calls == [("GET", "/workers"), ("DELETE", "/workers/u-1")]


def test_wait_for_registration_times_out_with_the_state() -> None:
    r = RouterClient("http://r:8000", FakeHttp({("GET", "http://r:8000/workers"): (200, WORKERS)}))
    now = [0.0]
    with pytest.raises(RouterError) as err:
        r.wait("http://10.0.0.2:30000", present=True, timeout_s=3, clock=lambda: now[0],
               sleep=lambda s: now.__setitem__(0, now[0] + 1))  # fmt: skip
    assert str(err.value) == "router http://r:8000: http://10.0.0.2:30000 not registered and healthy after 3s (unhealthy)"
    r.wait("http://10.0.0.1:30000", present=True, timeout_s=3)
    r.wait("http://10.0.0.7:30000", present=False, timeout_s=3)


def test_engine_counters() -> None:
    # SGLang /get_load: one entry per DP rank.
    assert parse_get_load('[{"dp_rank":0,"num_reqs":3,"num_waiting_reqs":1,"num_tokens":90},{"dp_rank":1,"num_reqs":2}]') == 6
    assert parse_get_load('{"num_reqs":0,"num_waiting_reqs":0}') == 0
    assert parse_get_load('{"load": 3}') is None and parse_get_load("not json") is None
    metrics = (
        "# HELP sglang:num_running_reqs The number of running requests.\n"
        'sglang:num_running_reqs{model_name="m",engine_type="unified"} 2.0\n'
        'sglang:num_queue_reqs{model_name="m"} 1.0\n'
        'sglang:num_used_tokens{model_name="m"} 4096.0\n'
    )
    assert parse_metrics(metrics) == 3
    assert parse_metrics('vllm:num_requests_running{model_name="m"} 4.0\nvllm:num_requests_waiting{model_name="m"} 0.0\n') == 4
    assert parse_metrics("fleet_standin_requests_total 12\n") is None
    base = "http://10.0.0.1:30000"
    assert inflight(FakeHttp({("GET", base + "/get_load"): (200, '[{"num_reqs":1}]')}), base) == 1
    assert inflight(FakeHttp({("GET", base + "/metrics"): (200, metrics)}), base) == 3
    assert inflight(FakeHttp({("GET", base + "/metrics"): (200, "fleet_standin_requests_total 1\n")}), base) is None


def test_drain_waits_for_zero_or_the_deadline() -> None:
    now = [0.0]
    counts = {"a": iter([3, 1, 0]), "b": iter([5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5])}
    result = drain(
        {"a": lambda: next(counts["a"]), "b": lambda: next(counts["b"]), "c": lambda: None},
        1.0, settle_s=0.5, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s),
    )  # fmt: skip
    assert (result["a"].how, result["a"].first) == ("drained", 3)
    assert result["b"].how == "timeout" and (result["b"].first, result["b"].left) == (5, 5)
    assert result["c"].how == "no-counter"


def test_drain_report_shows_what_the_counter_saw() -> None:
    """The report's drain column: in flight at the first read -> 0, so a drain that waited out
    requests is told from one that found the engine idle."""
    assert _drain_text(Drained(how="drained", first=3, waited_s=2.34)) == "drained 3->0 2.3s"
    assert _drain_text(Drained(how="drained", first=0, waited_s=0.5)) == "drained 0->0 0.5s"
    assert _drain_text(Drained(how="timeout", first=5, left=2, waited_s=60.0)) == "timeout (2 left)"
    assert _drain_text(Drained(how="no-counter", waited_s=0.5)) == "no-counter 0.5s"
    assert _drain_text(None) == "-"


def _manifest(unit_dir: str, files: list[str], generation: int) -> Manifest:
    return Manifest(
        deployment="d", unit="u", host="h1", group="d/single0", role="single", rank=0, runtime="docker",
        render_hash=f"hash{generation}", recipe="r", image="img", generation=generation, deployed_by="t",
        deployed_at="2026-01-01T00:00:00Z", files=tuple([*files, f"{unit_dir}/manifest.json", f"{unit_dir}/secrets.env"]),
    )  # fmt: skip


def test_swap_puts_the_previous_generation_back_and_keeps_the_replaced_one(tmp_path: Path) -> None:
    d = tmp_path / "etc" / "u"
    (d / "prev" / str(d).lstrip("/")).mkdir(parents=True)
    env, run, extra = str(d / "env"), str(d / "run.sh"), str(d / "extra.conf")
    old = _manifest(str(d), [env, run], 1)
    new = _manifest(str(d), [env, run, extra], 2)
    for path, text in ((env, "GEN=2\n"), (run, "run 2\n"), (extra, "only in 2\n"), (str(d / "secrets.env"), "S=x\n")):
        Path(path).write_text(text)
    (d / "manifest.json").write_text("manifest 2\n")
    (d / "prev" / "manifest.json").write_text("manifest 1\n")
    for path, text in ((env, "GEN=1\n"), (run, "run 1\n")):
        Path(f"{d}/prev{path}").write_text(text)

    argv = restore.swap_argv(str(d), new.files, old.files)
    subprocess.run(argv, check=True)
    assert Path(env).read_text() == "GEN=1\n" and Path(run).read_text() == "run 1\n"
    assert not Path(extra).exists()
    assert (d / "manifest.json").read_text() == "manifest 1\n"
    assert (d / "secrets.env").read_text() == "S=x\n"  # secrets stay where they are
    assert Path(f"{d}/prev{env}").read_text() == "GEN=2\n" and Path(f"{d}/prev{extra}").read_text() == "only in 2\n"
    assert (d / "prev" / "manifest.json").read_text() == "manifest 2\n"
    assert not (d / "next").exists()
    # Twice: forward again.
    subprocess.run(restore.swap_argv(str(d), old.files, new.files), check=True)
    assert Path(env).read_text() == "GEN=2\n" and Path(extra).read_text() == "only in 2\n"
    assert (d / "manifest.json").read_text() == "manifest 2\n"


def test_swap_without_a_previous_generation_fails_cleanly(tmp_path: Path) -> None:
    d = tmp_path / "u"
    d.mkdir()
    proc = subprocess.run(restore.swap_argv(str(d), [], []), capture_output=True, text=True)
    assert proc.returncode == 3
    assert proc.stderr.strip() == f"no previous generation kept in {d}/prev"


def test_start_commands_follow_render() -> None:
    m = _manifest("/etc/fleet/d/u", [], 1)
    assert restore.start_argvs(m, "/etc/fleet/d/u") == (("sh", "/etc/fleet/d/u/run.sh"),)
    import dataclasses

    s = dataclasses.replace(m, runtime="systemd")
    assert restore.start_argvs(s, "/x") == (("systemctl", "daemon-reload"), ("systemctl", "enable", "--now", "u.service"))


def test_a_pd_cohort_drains_by_one_round_of_zeros_not_each_stage_by_its_own() -> None:
    """A request moves router -> prefill -> decode: the decode read idle while its request is
    still at the prefill gets it later.  Each key by its own first 0 (the regular roll's rule)
    would let it be stopped with a request coming; together, it waits for a round of zeros."""
    def run(together: bool) -> dict[str, Drained]:
        now = [0.0]
        reads = {"router": iter([1, 1, 1, 0]), "prefill": iter([1, 0, 0, 0]), "decode": iter([0, 1, 1, 0])}
        return drain({k: (lambda k=k: next(reads[k])) for k in reads}, 60.0, together=together, settle_s=0.5,  # type: ignore[misc]
                     clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))  # fmt: skip

    apart = run(False)
    assert (apart["decode"].how, apart["decode"].waited_s) == ("drained", 0.5), "the old rule: decode let go at once"
    together = run(True)
    assert {k: (d.how, d.first) for k, d in together.items()} == {
        "router": ("drained", 1), "prefill": ("drained", 1), "decode": ("drained", 0)}
    assert [d.text() for d in together.values()] == ["drained 1->0 1.1s", "drained 1->0 1.1s", "drained 0->0 1.1s"]


def test_a_pd_cohort_drain_that_times_out_names_what_is_left() -> None:
    now = [0.0]
    result = drain({"prefill": lambda: None, "router": lambda: 2, "decode": lambda: 0}, 1.0, together=True,
                   settle_s=0.5, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))  # fmt: skip
    assert {k: d.text() for k, d in result.items()} == {
        "prefill": "no-counter 0.5s", "router": "timeout (2 left)", "decode": "drained 0->0 1.1s"}


# vllm-router 0.1.17's /metrics in PD mode (NIXL) with three requests in flight over real vLLM
# (CPU build) on the sandbox: two at the prefill, two prefilled awaiting their decode, one
# decoding (a request may be counted in two stages at once; the sum is 0 only when none is in).
VLLM_ROUTER_PD_METRICS = """\
vllm_router_processed_requests_total{worker="http://198.18.32.27:8500"} 7
vllm_router_pd_requests_total{route="/v1/chat/completions"} 3
vllm_router_pd_active_decode_requests{worker="http://198.18.32.27:8500",rank="aggregate"} 1
vllm_router_pd_pending_decode_requests{worker="http://198.18.32.27:8500",rank="aggregate"} 2
vllm_router_pd_active_prefill_tokens{worker="http://198.18.32.26:8500",rank="aggregate"} 0
vllm_router_pd_unknown_prefill_requests{worker="http://198.18.32.26:8500",rank="aggregate"} 2
vllm_router_pd_decode_pending_seconds_count 5
"""


def test_a_pd_routers_in_flight_is_the_sum_of_its_stage_gauges() -> None:
    url = "http://198.18.32.16:29000/metrics"
    names = router.VLLM.pd_inflight
    assert metrics_inflight(FakeHttp({("GET", url): (200, VLLM_ROUTER_PD_METRICS)}), url, names) == 5
    idle = "\n".join(line.rsplit(" ", 1)[0] + " 0" for line in VLLM_ROUTER_PD_METRICS.splitlines()) + "\n"
    assert metrics_inflight(FakeHttp({("GET", url): (200, idle)}), url, names) == 0
    assert metrics_inflight(FakeHttp({("GET", url): (200, "smg_router_requests_total 3\n")}), url, names) is None
    assert metrics_inflight(FakeHttp({("GET", url): (200, VLLM_ROUTER_PD_METRICS)}), url, router.SGLANG.pd_inflight) is None


def test_a_counter_that_fails_one_read_is_read_again_not_given_up() -> None:
    """None after a count is a failed read (the real PD tier's router, busy at load ~90, gave one
    after 95 s of counts), not a missing counter: the key is read again, and keeps the drain
    open meanwhile; unanswered at the deadline, its last count is what is left."""
    now = [0.0]
    reads = {"router": iter([2, None, 0]), "decode": iter([1, 0, 0])}
    result = drain({k: (lambda k=k: next(reads[k])) for k in reads}, 60.0, together=True, settle_s=0.5,  # type: ignore[misc]
                   clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))  # fmt: skip
    assert {k: d.text() for k, d in result.items()} == {"router": "drained 2->0 0.9s", "decode": "drained 1->0 0.9s"}
    now[0] = 0.0
    result = drain({"router": iter([3] + [None] * 20).__next__}, 1.0, settle_s=0.5, clock=lambda: now[0],
                   sleep=lambda s: now.__setitem__(0, now[0] + s))  # fmt: skip
    assert result["router"].text() == "timeout (3 left)"
