"""Batched remote file writes (launcher/execute/files.py) on the local transport, under the
system sh, dash and busybox sh (with busybox's own tools), and over a real sshd."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.errors import RemoteError
from launcher.execute.command import Command, Token
from launcher.execute.files import Put, Step, batch_command, run_batch, write_files
from launcher.execute.local import LocalTransport
from launcher.execute.ssh import SshConnector
from launcher.execute.transport import PUT_TEMP_PREFIX, Result

from .sshd import Sshd


class Shelled:
    """The local transport with the batch's ``sh`` replaced by another shell (and PATH)."""

    def __init__(self, shell: Sequence[str], path: str | None = None) -> None:
        self.local = LocalTransport()
        self.shell = tuple(shell)
        self.path = path

    @property
    def host(self) -> str:
        return "localhost"

    def run(self, argv: Sequence[Token] | Command, *, timeout: float, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, check: bool = False) -> Result:  # fmt: skip
        c = Command.of(argv)
        assert c.argv[0] == "sh"
        extra = {"PATH": self.path} if self.path else None
        return self.local.run((*self.shell, *c.argv[1:]), timeout=timeout, stdin=stdin, env=extra)

    def put(self, path: str, data: bytes, mode: int) -> None:
        raise AssertionError("batches never use put")

    def get(self, path: str) -> bytes:
        raise AssertionError("batches never use get")

    def close(self) -> None:
        pass


def busybox_path(tmp: Path) -> str:
    """A PATH of busybox applets only, so the script runs on busybox's tools too."""
    bb = shutil.which("busybox")
    assert bb is not None
    bindir = tmp / "bb"
    bindir.mkdir(exist_ok=True)
    for tool in ("sh", "dd", "mktemp", "chmod", "mv", "mkdir", "rm", "wc", "cat", "true", "printf"):
        if not (bindir / tool).exists():
            (bindir / tool).symlink_to(bb)
    return str(bindir)


SHELLS = ["sh", "dash", "busybox"]


def transport(kind: str, tmp: Path) -> object:
    if kind == "sh":
        return LocalTransport()
    if shutil.which(kind) is None:
        pytest.skip(f"{kind} is not installed")
    if kind == "dash":
        return Shelled(("dash",))
    return Shelled((str(Path(busybox_path(tmp)) / "sh"),), busybox_path(tmp))


def leftovers(root: Path) -> list[str]:
    return [str(p) for p in root.rglob(PUT_TEMP_PREFIX + "*")]


def mode_of(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SHELLS)
def test_steps_then_removals_then_writes_in_one_exec(kind: str, tmp_path: Path) -> None:
    t = transport(kind, tmp_path)
    (tmp_path / "old").write_text("stale")
    steps = [
        Step(argv=("sh", "-c", 'echo "out $1"; echo "err $2" >&2', "sh", "a b", "c"), label="first"),
        Step(argv=("printf", "%s|", *(str(i) for i in range(12))), label="many args"),
        Step(argv=("cat",), label="reads /dev/null, not the files' bytes"),
    ]
    big = bytes(range(256)) * 700  # > 64 KiB: whole blocks and a remainder
    results = run_batch(
        t,  # type: ignore[arg-type]
        steps,
        remove=[str(tmp_path / "old"), str(tmp_path / "never-there")],
        puts=[
            Put(path=str(tmp_path / "d" / "e" / "big"), data=big, mode=0o600),
            Put(path=str(tmp_path / "empty"), data=b"", mode=0o755),
            Put(path=str(tmp_path / "d" / "no newline"), data=b"x\n\ny", mode=0o640),
        ],
    )
    assert [(r.command, r.exit_status, r.stdout, r.stderr) for r in results] == [
        ("first", 0, b"out a b\n", b"err c\n"),
        ("many args", 0, b"0|1|2|3|4|5|6|7|8|9|10|11|", b""),
        ("reads /dev/null, not the files' bytes", 0, b"", b""),
    ]
    assert not (tmp_path / "old").exists()
    assert (tmp_path / "d" / "e" / "big").read_bytes() == big and mode_of(tmp_path / "d" / "e" / "big") == 0o600
    assert (tmp_path / "empty").read_bytes() == b"" and mode_of(tmp_path / "empty") == 0o755
    assert (tmp_path / "d" / "no newline").read_bytes() == b"x\n\ny"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("kind", SHELLS)
def test_a_failed_step_stops_the_batch_and_names_its_label(kind: str, tmp_path: Path) -> None:
    t = transport(kind, tmp_path)
    keep = tmp_path / "keep"
    keep.write_text("here")
    steps = [
        Step(argv=("true",), label="ok"),
        Step(argv=("sh", "-c", "echo partial; echo 'cannot keep prev' >&2; exit 3"), label="keep /x/prev"),
        Step(argv=("sh", "-c", "touch \"$1\"", "sh", str(tmp_path / "ran")), label="never"),
    ]
    puts = [Put(path=str(tmp_path / "new"), data=b"n", mode=0o644)]
    results = run_batch(t, steps, remove=[str(keep)], puts=puts)  # type: ignore[arg-type]
    assert [(r.command, r.exit_status, r.stdout, r.stderr) for r in results] == [
        ("ok", 0, b"", b""),
        ("keep /x/prev", 3, b"partial\n", b"cannot keep prev\n"),
    ]
    assert keep.exists() and not (tmp_path / "new").exists() and not (tmp_path / "ran").exists()
    with pytest.raises(RemoteError) as err:
        write_files(t, puts, steps=steps, remove=[str(keep)])  # type: ignore[arg-type]
    assert str(err.value) == "localhost: keep /x/prev: exit 3: cannot keep prev"


@pytest.mark.parametrize("kind", SHELLS)
def test_a_failed_write_names_the_file_keeps_earlier_ones_and_leaves_no_temp_file(kind: str, tmp_path: Path) -> None:
    t = transport(kind, tmp_path)
    (tmp_path / "plain").write_text("a file, not a directory")
    bad = str(tmp_path / "plain" / "x")
    puts = [
        Put(path=str(tmp_path / "first"), data=b"1", mode=0o644),
        Put(path=bad, data=b"2", mode=0o644),
        Put(path=str(tmp_path / "third"), data=b"3", mode=0o644),
    ]
    with pytest.raises(RemoteError) as err:
        write_files(t, puts)  # type: ignore[arg-type]
    assert str(err.value).startswith(f"localhost: put {bad}: exit 1: "), str(err.value)
    assert (tmp_path / "first").read_bytes() == b"1" and not (tmp_path / "third").exists()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("kind", SHELLS)
def test_truncated_input_fails_that_file_without_a_temp_file(kind: str, tmp_path: Path) -> None:
    t = transport(kind, tmp_path)
    dest = tmp_path / "short"
    command, stdin = batch_command((), (), (Put(path=str(dest), data=b"0123456789", mode=0o600),), "B")
    result = t.run(command, timeout=30, stdin=stdin[:7])  # type: ignore[attr-defined]
    assert result.exit_status == 1 and result.stderr_text.strip().splitlines()[-1] == "short input: 7 of 10 bytes"
    assert not dest.exists() and leftovers(tmp_path) == []


def test_without_dd_fullblock_it_reads_byte_by_byte(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    dd = shutil.which("dd")
    (bindir / "dd").write_text(f'#!/bin/sh\nfor a do case "$a" in iflag=*) exit 1;; esac; done\nexec {dd} "$@"\n')
    (bindir / "dd").chmod(0o755)
    t = Shelled(("sh",), f"{bindir}:{os.environ['PATH']}")
    puts = [Put(path=str(tmp_path / n), data=d, mode=0o644) for n, d in (("a", b"abc" * 100), ("b", b"\x00\xff"))]
    write_files(t, puts)  # type: ignore[arg-type]
    assert (tmp_path / "a").read_bytes() == b"abc" * 100 and (tmp_path / "b").read_bytes() == b"\x00\xff"


def test_contents_travel_on_stdin_never_in_argv() -> None:
    token = b"hf_s3cr3t"
    command, stdin = batch_command(
        (), (), (Put(path="/etc/fleet/d/u/secrets.env", data=b"HF_TOKEN=" + token + b"\n", mode=0o600),), "B"
    )
    assert token not in command.shell_text().encode() and token in stdin
    assert command.argv[-3:] == ("/etc/fleet/d/u/secrets.env", "0600", "19")


def test_relative_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        batch_command((), (), (Put(path="etc/x", data=b"", mode=0o644),), "B")


# ---------------------------------------------------------------------------------------------
# arbitrary bytes, names and modes

_name = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1, max_size=30
).filter(lambda n: n not in (".", "..", "sub1", "sub2"))
_files = st.lists(
    st.tuples(st.sampled_from(["", "sub1", "sub2"]), _name, st.binary(max_size=3000), st.integers(0, 0o777)),
    max_size=6,
)


@pytest.mark.parametrize("kind", SHELLS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=_files)
def test_any_bytes_names_and_modes_round_trip(kind: str, tmp_path_factory: pytest.TempPathFactory,
                                              files: list[tuple[str, str, bytes, int]]) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp("hyp")
    t = transport(kind, root)
    puts = [Put(path=str(root / "out" / sub / name), data=data, mode=mode) for sub, name, data, mode in files]
    write_files(t, puts)  # type: ignore[arg-type]
    want = {p.path: (p.data, p.mode) for p in puts}  # the last write of a path wins
    for path, (data, mode) in want.items():
        assert Path(path).read_bytes() == data and mode_of(Path(path)) == mode, path
    found = {str(p) for p in (root / "out").rglob("*") if p.is_file()} if puts else set()
    assert found == set(want)
    shutil.rmtree(root)


# ---------------------------------------------------------------------------------------------


def test_over_ssh_one_exec(connector: SshConnector, fleet: tuple[Sshd, ...], tmp_path: Path) -> None:
    t = connector.connect(fleet[0].host())
    dest = tmp_path / "ssh" / "f"
    results = run_batch(t, [Step(argv=("echo", "hi"), label="echo")],
                        puts=[Put(path=str(dest), data=b"\x00bin\xff" * 20000, mode=0o640)])  # fmt: skip
    assert [(r.host, r.stdout) for r in results] == [("h1", b"hi\n")]
    assert dest.read_bytes() == b"\x00bin\xff" * 20000 and mode_of(dest) == 0o640
