"""``logs`` (``fleet logs [-f]``) against a host that answers ``docker logs`` like dockerd does:
``--tail N`` the last N lines, ``--since T`` every line stamped at or after T (inclusive)."""

from __future__ import annotations

from typing import Mapping, Sequence

import pytest

from launcher.deploy.status import LogLine, UnitStatus, group_verdicts, logs, status
from launcher.errors import UnreachableError
from launcher.execute.command import Command, Token
from launcher.execute.transport import Result
from launcher.model import Host, Plan
from tests.deploy.factory import pp_plan, target, unit

UNIT = "fleet-demo-rank-r0"


class DockerLogs:
    """h1's ``docker logs`` of :data:`UNIT`: ``lines`` are (RFC 3339 nano stamp, text)."""

    def __init__(self, lines: Sequence[tuple[str, str]] = ()) -> None:
        self.lines = list(lines)
        self.asked: list[tuple[str, ...]] = []

    @property
    def host(self) -> str:
        return "h1"

    def run(self, argv: Sequence[Token] | Command, *, timeout: float, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, check: bool = False) -> Result:  # fmt: skip
        args = tuple(str(a) for a in Command.of(argv).argv)
        self.asked.append(args)
        assert args[4:7] == ("docker", "logs", "--timestamps") and args[-1] == UNIT, args
        if args[7] == "--tail":
            n = int(args[8])
            shown = self.lines[len(self.lines) - n :] if n else []
        else:
            assert args[7] == "--since"
            shown = [(p, x) for p, x in self.lines if p >= args[8]]
        out = "".join(f"{p} {x}\n" for p, x in shown).encode()
        return Result(host="h1", command=" ".join(args), exit_status=0, stdout=out, stderr=b"")

    def put(self, path: str, data: bytes, mode: int) -> None:
        raise AssertionError("logs writes nothing")

    def get(self, path: str) -> bytes:
        raise AssertionError("logs reads no file")

    def close(self) -> None:
        pass


def stamp(i: int) -> str:
    return f"2026-11-29T03:00:{i:02d}.000000000Z"


def follow(host: DockerLogs, tail: int, then: Sequence[Sequence[str]]) -> list[str]:
    """``logs -f``: before each later poll, ``then``'s next lines are logged; Ctrl-C after them."""
    shown: list[str] = []
    more = iter(then)

    def sleep(_: float) -> None:
        batch = next(more, None)
        if batch is None:
            raise KeyboardInterrupt
        start = len(host.lines)
        host.lines += [(stamp(start + i), text) for i, text in enumerate(batch)]

    def connect(h: Host) -> DockerLogs:
        return host

    with pytest.raises(KeyboardInterrupt):
        logs(target(pp_plan()), connect, lambda line: shown.append(str(line)), unit=UNIT, tail=tail, follow=True,
             sleep=sleep)  # fmt: skip
    return shown


def test_follow_with_tail_0_shows_only_new_lines() -> None:
    host = DockerLogs([(stamp(0), "old a"), (stamp(1), "old b")])
    assert follow(host, 0, [["new c"], [], ["new d", "new e"]]) == [
        f"h1/{UNIT} | new c", f"h1/{UNIT} | new d", f"h1/{UNIT} | new e",
    ]  # fmt: skip


def test_follow_shows_the_tail_then_each_new_line_once() -> None:
    host = DockerLogs([(stamp(i), f"old {i}") for i in range(5)])
    assert follow(host, 2, [["new 5"], ["new 6"]]) == [f"h1/{UNIT} | {x}" for x in ("old 3", "old 4", "new 5", "new 6")]


def test_follow_of_an_empty_log_shows_every_line_it_gets_later() -> None:
    host = DockerLogs()
    got = follow(host, 2, [[f"new {i}" for i in range(4)]])
    assert got == [f"h1/{UNIT} | new {i}" for i in range(4)]


def test_without_follow_the_last_lines() -> None:
    host = DockerLogs([(stamp(i), f"line {i}") for i in range(5)])
    shown: list[str] = []
    logs(target(pp_plan()), lambda h: host, lambda line: shown.append(str(line)), unit=UNIT, tail=3)
    assert shown == [f"h1/{UNIT} | line {i}" for i in (2, 3, 4)]
    assert [a[7:9] for a in host.asked] == [("--tail", "3")]


def test_status_lists_hosts_in_inventory_order() -> None:
    """Issue 16 item 19: h10 was listed before h9 (sorted as text)."""
    names = ("h9", "h10", "h11")
    plan = Plan(deployment="demo", recipe="fam/x",
                units=tuple(unit(h, f"fleet-demo-single{i}-r0", f"g{i}") for i, h in enumerate(names)))  # fmt: skip

    def unreachable(host: Host) -> DockerLogs:
        raise UnreachableError(host.name, "no route")

    rows = status(target(plan, hosts=names), unreachable)
    assert [r.host for r in rows] == list(names)


def _row(unit: str, group: str, state: str = "running", health: str = "ok", restarts: int = 0) -> UnitStatus:
    return UnitStatus(host="h", unit=unit, role="rank", rank=0, group=group, state=state, health=health,
                      generation=1, drift="none", restarts=restarts)  # fmt: skip


def test_a_multinode_group_is_as_healthy_as_its_ranks() -> None:
    """Seen with the real vLLM: rank 1 killed and restarted by docker, rank 0 still answers /health."""
    rows = [_row("pp-r0", "d/pp"), _row("pp-r1", "d/pp", health="-", restarts=1),
            _row("ok-r0", "d/ok"), _row("ok-r1", "d/ok", health="-"),
            _row("single", "d/single", restarts=2)]  # fmt: skip
    assert [(r.unit, r.health) for r in group_verdicts(rows)] == [
        ("pp-r0", "failing"), ("pp-r1", "-"), ("ok-r0", "ok"), ("ok-r1", "-"), ("single", "ok"),
    ]  # fmt: skip
    exited = [_row("pp-r0", "d/pp"), _row("pp-r1", "d/pp", state="exited", health="-")]
    assert group_verdicts(exited)[0].health == "failing"


def test_logs_json_is_one_object_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    """``fleet logs --json``: what the CLI prints for each line."""
    import json

    from launcher.cli.deploy import _json_line

    host = DockerLogs([(stamp(i), f"line {i}") for i in range(3)])
    logs(target(pp_plan()), lambda h: host, _json_line, unit=UNIT, tail=2)
    _json_line(LogLine(host="h2", unit=None, text="unreachable: connection refused by 198.18.0.2:22"))
    assert [json.loads(x) for x in capsys.readouterr().out.splitlines()] == [
        {"host": "h1", "unit": UNIT, "line": "line 1"},
        {"host": "h1", "unit": UNIT, "line": "line 2"},
        {"host": "h2", "error": "unreachable: connection refused by 198.18.0.2:22"},
    ]


def test_health_reads_failing_only_after_a_second_failed_probe() -> None:
    from launcher.deploy.status import REPROBE_AFTER_S, health_verdicts

    script = {"u/health": [False, True], "dead/health": [False, False], "ok/health": [True]}
    asked: list[str] = []
    slept: list[float] = []

    def answers(url: str) -> bool:
        asked.append(url)
        return script[url].pop(0)

    urls = {"slow": "u/health", "dead": "dead/health", "fine": "ok/health"}
    assert health_verdicts(urls, answers, slept.append) == {"slow": "ok", "dead": "failing", "fine": "ok"}
    # every unit once, then the failed ones again together, after one pause
    assert asked == ["u/health", "dead/health", "ok/health", "u/health", "dead/health"]
    assert slept == [REPROBE_AFTER_S]
    slept.clear()
    assert health_verdicts({"fine": "ok/health"}, lambda url: True, slept.append) == {"fine": "ok"}
    assert slept == []
