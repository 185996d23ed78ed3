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
from launcher.rolling.router_api import Drained, RouterClient, RouterError, drain, inflight, parse_get_load, parse_metrics


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


def test_a_get_that_timed_out_is_asked_again_and_a_post_is_not() -> None:
    answers = {("GET", "http://r:8000/workers"): (200, WORKERS), ("POST", "http://r:8000/workers"): (202, "{}")}
    busy = RouterClient("http://r:8000", SlowHttp(2, answers))
    assert [w.id for w in busy.workers()] == ["u-1", "u-2"]
    assert len(busy.http.calls) == 3  # type: ignore[attr-defined]
    with pytest.raises(RouterError) as err:
        RouterClient("http://r:8000", SlowHttp(3, answers)).workers()
    assert str(err.value) == "router http://r:8000: GET /workers: no answer in 3 tries: timed out"
    with pytest.raises(RouterError) as err:
        RouterClient("http://r:8000", SlowHttp(1, answers)).add("http://10.0.0.3:30000")
    assert str(err.value) == "router http://r:8000: POST /workers: no answer: timed out"


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
