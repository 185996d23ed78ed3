"""The PD canary (launcher/deploy/crossing.py) against scripted hosts: which deployments it
applies to, the decode's transfer counters read before and after one request through the router,
and the one-line error naming the router, prefill and decode hosts and the engine's error line.
The real engines are in tests/real_engine/test_real_pd.py."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from launcher.deploy import crossing
from launcher.deploy.session import Target
from launcher.execute.command import Command, Token
from launcher.execute.fake import FakeTransport, Reply
from launcher.execute.transport import Result
from launcher.observe.fetch import _HEAD, _TAIL
from launcher.pipeline import load_target
from launcher.sandbox.inventory import preview

REPO = Path(__file__).resolve().parents[2]


def metrics(url: str, done: int, seconds: float, failed: int, nbytes: int) -> bytes:
    labels = '{engine="0",model_name="tiny"}'
    text = (f"# TYPE vllm:nixl_xfer_time_seconds histogram\n"
            f"vllm:nixl_xfer_time_seconds_count{labels} {done}\nvllm:nixl_xfer_time_seconds_sum{labels} {seconds}\n"
            f"# TYPE vllm:nixl_num_failed_transfers counter\nvllm:nixl_num_failed_transfers_total{labels} {failed}\n"
            f"# TYPE vllm:nixl_bytes_transferred histogram\n"
            f"vllm:nixl_bytes_transferred_count{labels} {done}\nvllm:nixl_bytes_transferred_sum{labels} {nbytes}\n")  # fmt: skip
    return f"{_HEAD}{url}\n{text}\n{_TAIL}0\n".encode()


class Decode(FakeTransport):
    """The decode host: its /metrics and its log change once the router host has sent the canary."""

    def __init__(self, host: str, before: bytes, after: bytes, log: bytes, sent: list[bool]) -> None:
        super().__init__(host)
        self.before, self.after, self.log, self.sent = before, after, log, sent

    def run(self, argv: Sequence[Token] | Command, *, timeout: float, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, check: bool = False) -> Result:  # fmt: skip
        result = super().run(argv, timeout=timeout, stdin=stdin, env=env, check=check)
        if "/metrics" in result.command:
            body = self.after if self.sent else self.before
            return Result(host=self.host, command=result.command, exit_status=0, stdout=body, stderr=b"")
        if "docker logs" in result.command:
            lines = self.log.splitlines(keepends=True)
            # each canary after the first logs its last line again, a nanosecond later each time
            again = [lines[-1].replace(b"1Z ", f"{1 + k}Z ".encode(), 1) for k in range(1, len(self.sent))] if lines else []
            body = b"".join([*lines, *again] if self.sent else lines[:1])
            return Result(host=self.host, command=result.command, exit_status=0, stdout=body, stderr=b"")
        return result


class Router(FakeTransport):
    def __init__(self, host: str, replies: Sequence[Reply], sent: list[bool]) -> None:
        super().__init__(host, replies)
        self.sent = sent

    def run(self, argv: Sequence[Token] | Command, *, timeout: float, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, check: bool = False) -> Result:  # fmt: skip
        result = super().run(argv, timeout=timeout, stdin=stdin, env=env, check=check)
        if "/v1/completions" in result.command:
            self.sent.append(True)
        return result


def target(tmp_path: Path) -> Target:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(preview(17))
    return load_target(REPO / "playbooks/sandbox/real-pd.yaml", inv, None, None)


def hosts(tmp_path: Path, after: tuple[int, float, int, int], answer: bytes, decode_log: bytes = b"") -> dict[str, FakeTransport]:
    t = target(tmp_path)
    url = next(d.unit.health.url for d in t.units if d.unit.role == "decode" and d.unit.health).replace("/health", "/metrics")
    sent: list[bool] = []
    return {
        "h6": Router("h6", [Reply(match="/v1/completions", stdout=answer)], sent),
        "h16": FakeTransport("h16"),
        "h17": Decode("h17", metrics(url, 2, 0.2, 0, 4096), metrics(url, *after), decode_log, sent),
    }


def test_applies_to_vllm_pd_only(tmp_path: Path) -> None:
    t = target(tmp_path)
    assert crossing.applies(t.units)
    assert not crossing.applies([d for d in t.units if d.unit.role != "router"])
    inv = tmp_path / "inventory.yaml"
    sglang_pd = load_target(REPO / "playbooks/sandbox/pd-2p1d.yaml", inv, None, None)
    assert not crossing.applies(sglang_pd.units), "SGLang's PD exposes no transfer counters fleet reads"


def test_crossed(tmp_path: Path) -> None:
    t = target(tmp_path)
    c = crossing.cross(hosts(tmp_path, (3, 0.3, 0, 8192), b'{"id":"cmpl-1"}\n200'), t.units, sleep=lambda s: None)
    assert c.ok, c.error
    assert (c.router, c.prefill, c.decode) == ("h6", ("h16",), ("h17",))
    moved = c.moved["h17"]
    assert (moved.done, moved.failed, moved.bytes) == (1, 0, 4096)
    assert moved.avg_ms is not None and round(moved.avg_ms) == 100
    assert c.evidence().endswith(
        "decode h17 pulled the KV from prefill h16: 1 transfer(s), avg 100.0 ms, 4096 bytes, 0 failed"
    ), c.evidence()


def test_recomputed_not_transferred(tmp_path: Path) -> None:
    """The request is answered but the decode's counter did not move: not healthy, and the
    engine's own error line is quoted."""
    log = (b"2026-12-02T06:00:00.000000001Z (APIServer pid=1) INFO 12-02 06:00:00 [x.py:1] before\n"
           b"2026-12-02T06:00:01.000000001Z (EngineCore pid=9) ERROR 12-02 06:00:01 [nixl.py:9] "
           b"NIXL handshake with 198.18.0.26:5600 failed: Connection refused\n")  # fmt: skip
    t = target(tmp_path)
    c = crossing.cross(hosts(tmp_path, (2, 0.2, 1, 4096), b'{"id":"cmpl-1"}\n200', log), t.units, sleep=lambda s: None)
    assert c.first == (
        "PD canary through the router on h6 (prefill h16 -> decode h17): no KV transfer: the decode's KV-transfer "
        "counter did not move (1 failed); h17: (EngineCore pid=9) ERROR 12-02 06:00:01 [nixl.py:9] NIXL handshake "
        "with 198.18.0.26:5600 failed: Connection refused"
    )
    # a handshake failure: sent once more, and it failed again (no transfer, none failed this time)
    assert c.error == (
        "PD canary through the router on h6 (prefill h16 -> decode h17): no KV transfer: the decode's KV-transfer "
        "counter did not move; h17: (EngineCore pid=9) ERROR 12-02 06:00:01 [nixl.py:9] NIXL handshake "
        "with 198.18.0.26:5600 failed: Connection refused"
    )


def test_router_error(tmp_path: Path) -> None:
    t = target(tmp_path)
    answer = b'{"error":{"message":"KV load failure for request cmpl-1"}}\n500'
    c = crossing.cross(hosts(tmp_path, (2, 0.2, 1, 4096), answer), t.units, sleep=lambda s: None)
    assert c.error == (
        "PD canary through the router on h6 (prefill h16 -> decode h17): no KV transfer: the router answered 500: "
        "KV load failure for request cmpl-1"
    )


class SlowHandshake(Decode):
    """A decode whose first canary fails to set up the NIXL handshake (vLLM's fixed 5 s receive
    timeout, a busy prefill host: session 15's CI) and whose second one pulls the KV."""

    def run(self, argv: Sequence[Token] | Command, *, timeout: float, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, check: bool = False) -> Result:  # fmt: skip
        result = super().run(argv, timeout=timeout, stdin=stdin, env=env, check=check)
        if "/metrics" in result.command and len(self.sent) < 2:
            return Result(host=self.host, command=result.command, exit_status=0, stdout=self.before, stderr=b"")
        return result


HANDSHAKE_LOG = (b"2026-12-02T06:00:00.000000001Z (APIServer pid=1) INFO 12-02 06:00:00 [x.py:1] before\n"
                 b"2026-12-02T06:00:01.000000001Z (Worker pid=33) ERROR 12-02 06:00:01 [base_worker.py:1318] NIXL "
                 b"transfer failure: handshake_setup_failed | Context: {'failure_type': 'handshake_setup_failed'}\n")


def test_a_canary_whose_handshake_failed_is_sent_once_more(tmp_path: Path) -> None:
    t = target(tmp_path)
    hs = hosts(tmp_path, (3, 0.3, 0, 8192), b'{"error":{"message":"Internal server error"}}\n500', HANDSHAKE_LOG)
    decode = hs["h17"]
    assert isinstance(decode, Decode)
    hs["h17"] = SlowHandshake("h17", decode.before, decode.after, decode.log, decode.sent)
    router = hs["h6"]
    router.replies = (Reply(match="/v1/completions", stdout=b'{"id":"cmpl-2"}\n200'),)
    first = Router("h6", [Reply(match="/v1/completions", stdout=b'{"error":{"message":"Internal server error"}}\n500')],
                   decode.sent)  # fmt: skip

    class Twice(FakeTransport):  # the router host: its first canary fails, its second is answered
        def run(self, argv: Sequence[Token] | Command, *, timeout: float, stdin: bytes | None = None,
                env: Mapping[str, str] | None = None, check: bool = False) -> Result:  # fmt: skip
            return (first if not decode.sent else router).run(argv, timeout=timeout, stdin=stdin, env=env, check=check)

    hs["h6"] = Twice("h6")
    c = crossing.cross(hs, t.units, sleep=lambda s: None)
    assert c.ok, c.error
    assert c.first == (
        "PD canary through the router on h6 (prefill h16 -> decode h17): no KV transfer: the router answered 500: "
        "Internal server error; h17: (Worker pid=33) ERROR 12-02 06:00:01 [base_worker.py:1318] NIXL transfer failure: "
        "handshake_setup_failed | Context: {'failure_type': 'handshake_setup_failed'}"
    )
    assert len(decode.sent) == 2
    assert c.evidence().endswith(f"4096 bytes, 0 failed (sent twice; the first: {c.first})"), c.evidence()
    assert c.as_json()["first"] == c.first


def test_a_canary_that_fails_otherwise_is_not_sent_again(tmp_path: Path) -> None:
    t = target(tmp_path)
    hs = hosts(tmp_path, (2, 0.2, 1, 4096), b'{"error":{"message":"KV load failure for request cmpl-1"}}\n500')
    c = crossing.cross(hs, t.units, sleep=lambda s: None)
    decode = hs["h17"]
    assert isinstance(decode, Decode)
    assert not c.ok and c.first == "" and len(decode.sent) == 1
