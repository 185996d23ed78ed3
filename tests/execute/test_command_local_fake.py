"""Command masking, LocalTransport and FakeTransport (no network)."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from launcher.errors import RemoteError, UnreachableError
from launcher.execute.command import Command, Secret
from launcher.execute.fake import FakeConnector, FakeTransport, PutCall, Reply, RunCall
from launcher.execute.fanout import run_all
from launcher.execute.local import LocalTransport
from launcher.execute.transport import CommandTimeout, Transport
from launcher.model import Host


def test_secret_never_displayed(caplog: pytest.LogCaptureFixture) -> None:
    token = Secret("hf_abc123")
    cmd = Command(argv=("curl", "-H", token, "https://x/y z"))
    with caplog.at_level(logging.INFO):
        logging.getLogger("t").info("running %s / %r / %s", cmd, cmd, token)
    shown = caplog.text + str(cmd) + repr(cmd) + repr(cmd.argv) + f"{token}"
    assert "hf_abc123" not in shown
    assert str(cmd) == "curl -H *** 'https://x/y z'"
    assert repr(cmd) == "Command(\"curl -H *** 'https://x/y z'\")"
    assert cmd.reveal() == ("curl", "-H", "hf_abc123", "https://x/y z")
    assert cmd.shell_text() == "curl -H hf_abc123 'https://x/y z'"


def test_command_constructors() -> None:
    assert Command.shell("a | b").argv == ("sh", "-c", "a | b")
    assert Command.of(["ls"]) == Command(argv=("ls",))
    cmd = Command(argv=("x",))
    assert Command.of(cmd) is cmd
    assert cmd.with_env({"A": "1 2"}).shell_text() == "env 'A=1 2' x"
    with pytest.raises(ValueError, match="at least one argv token"):
        Command(argv=())
    with pytest.raises(ValueError, match="bad environment variable name 'A-B'"):
        cmd.with_env({"A-B": "1"})


def test_local_run_uses_no_shell() -> None:
    t = LocalTransport()
    r = t.run(["printf", "%s|", "$HOME", "a;b"], timeout=10)
    assert (r.exit_status, r.stdout, r.command) == (0, b"$HOME|a;b|", "printf '%s|' '$HOME' 'a;b'")
    r = t.run(["sh", "-c", 'cat; echo "$X" >&2; exit 4'], timeout=10, stdin=b"in", env={"X": "y"})
    assert (r.exit_status, r.stdout, r.stderr) == (4, b"in", b"y\n")
    with pytest.raises(RemoteError) as info:
        t.run(["sh", "-c", "exit 4"], timeout=10, check=True)
    assert str(info.value) == "localhost: sh -c 'exit 4': exit 4"


def test_local_missing_program_is_exit_127() -> None:
    r = LocalTransport().run(["/nonexistent/prog"], timeout=10)
    assert (r.exit_status, r.stderr) == (127, b"/nonexistent/prog: No such file or directory\n")


def test_local_timeout() -> None:
    with pytest.raises(CommandTimeout) as info:
        LocalTransport("ctl").run(["sleep", "60"], timeout=0.5)
    assert str(info.value) == "ctl: sleep 60: no exit status: timed out after 0.5s"


def test_local_put_get(tmp_path: Path) -> None:
    t = LocalTransport()
    path = tmp_path / "a" / "b" / "secret"
    t.put(str(path), b"data", 0o600)
    assert (path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) == (b"data", 0o600)
    assert t.get(str(path)) == b"data"
    assert [p.name for p in path.parent.iterdir()] == ["secret"]
    with pytest.raises(RemoteError) as info:
        t.get(str(tmp_path / "none"))
    assert str(info.value) == f"localhost: get {tmp_path}/none: no exit status: No such file or directory"
    with pytest.raises(ValueError, match="put needs an absolute file path, got 'rel'"):
        t.put("rel", b"", 0o600)


def test_fake_records_and_replies() -> None:
    t = FakeTransport("h1", replies=(Reply(match=r"^docker ps", stdout=b"abc\n"),
                                     Reply(match="boom", exit_status=2, stderr=b"bad\n"),
                                     Reply(match="^sleep", hang=True)))
    assert t.run(["docker", "ps", "-q"], timeout=5).stdout == b"abc\n"
    assert t.run(["echo", Secret("pw")], timeout=5, env={"A": "b"}).ok
    with pytest.raises(RemoteError, match=r"^h1: boom: exit 2: bad$"):
        t.run(["boom"], timeout=5, check=True)
    with pytest.raises(CommandTimeout):
        t.run(["sleep", "9"], timeout=5)
    t.put("/etc/x", b"1", 0o640)
    assert t.get("/etc/x") == b"1"
    assert t.commands == ("docker ps -q", "env A=b echo ***", "boom", "sleep 9")
    assert t.calls[-1] == PutCall(path="/etc/x", data=b"1", mode=0o640)
    assert isinstance(t.calls[1], RunCall) and t.calls[1].command.reveal() == ("echo", "pw")
    with pytest.raises(RemoteError, match="^h1: get /nope: exit 1: No such file or directory$"):
        t.get("/nope")


def test_fanout_over_fake_connector() -> None:
    hosts = [Host(name=f"n{i}", address=f"n{i}") for i in range(5)]
    connector = FakeConnector(unreachable={"n3": "link down"})

    def fn(host: Host, t: Transport) -> int:
        return t.run(["echo", host.name], timeout=5).exit_status

    result = run_all(hosts, fn, connector=connector, forks=2)
    assert result.values() == {"n0": 0, "n1": 0, "n2": 0, "n4": 0}
    (down,) = result.unreachable
    assert isinstance(down.error, UnreachableError)
    assert down.reason == "n3: unreachable: link down"
    assert connector.transports["n4"].commands == ("echo n4",)
