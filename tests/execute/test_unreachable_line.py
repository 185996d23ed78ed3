"""A host that stops answering mid-step is one line naming the host and the step (a script by
its header line); the whole script only under ``--debug`` (issue #26: 117 lines for one dropped
connection at the start of ``up``)."""

from __future__ import annotations

import click
import paramiko
import pytest
from click.testing import CliRunner

from launcher.cli import _Group
from launcher.errors import RemoteError, UnreachableError, brief
from launcher.execute.files import Put, write_files
from launcher.execute.ssh import SshOptions, SshTransport


class _DroppedTransport:
    """Stands in for paramiko's Transport to a host whose SSH port drops packets after the
    handshake: still active, but no session channel opens (paramiko's own error text)."""

    def is_active(self) -> bool:
        return True

    def open_session(self, timeout: float | None = None) -> paramiko.Channel:
        raise paramiko.SSHException("Timeout opening channel.")


class _Client:
    def get_transport(self) -> _DroppedTransport:
        return _DroppedTransport()

    def close(self) -> None:
        pass


def _dropped() -> UnreachableError:
    t = SshTransport("h7", _Client(), SshOptions())  # type: ignore[arg-type]
    with pytest.raises(UnreachableError) as caught:
        write_files(t, [Put(path="/etc/fleet/x/run.sh", data=b"echo hi\n", mode=0o755)])
    return caught.value


def test_dropped_session_is_one_line_naming_host_and_step() -> None:
    err = _dropped()
    lines = err.debug.splitlines()
    assert str(err) == (
        "h7: unreachable: cannot open a session for sh -c '# Commands, removals and atomic file writes in one exec "
        f"(launcher/execute/files.py): … ({len(lines) - 1} lines; --debug shows it): Timeout opening channel."
    )
    assert lines[0] == "h7: the whole command:" and len(lines) > 20


def _raising(err: Exception) -> click.Group:
    @click.group(cls=_Group)
    def group() -> None:
        pass

    @group.command("step")
    def step() -> None:
        raise err

    return group


@pytest.mark.parametrize("debug", ["", "1"])
def test_cli_shows_the_script_only_with_debug(debug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_DEBUG", debug)
    err = _dropped()
    result = CliRunner().invoke(_raising(err), ["step"])
    assert result.exit_code == 1
    first = f"fleet: error: {err}\n"
    assert result.stderr == (first + err.debug + "\n" if debug else first)


def test_brief() -> None:
    assert brief("docker ps -a") == "docker ps -a"
    assert brief("x" * 130) == "x" * 120 + " … (1 lines; --debug shows it)"
    err = RemoteError("h1", "sh -c 'set -e\necho a\n' sh", 3, "boom")
    assert str(err) == "h1: sh -c 'set -e … (3 lines; --debug shows it): exit 3: boom"
    assert err.debug == "h1: the whole command:\nsh -c 'set -e\necho a\n' sh"
