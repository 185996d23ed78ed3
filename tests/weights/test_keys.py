"""The weights run's authorized_keys edits (``hostscripts/weights-keys.sh``), run as a host runs
them: the real script under ``sh`` with a private ``/run`` (a mount namespace, as the sandbox
hosts have; needs root) and ``HOME`` in a temp dir (issue 25 item 3).

- An operator's authorized_keys without a trailing newline keeps its last key intact through a
  run's add and removal (the old append glued the run's line onto it, the removal then deleted it).
- A symlinked authorized_keys stays a link; the run's line goes into, and out of, the file it leads to.
- Concurrent runs lose no line (each edit is a rename under one flock).
- The run's line carries ``expiry-time=`` (UTC, one KEY_TTL_S ahead).
- The next run sweeps lines whose run dir is gone, run dirs that expired, and reports the other
  runs' owners (the caller ends dead ones of its control host).
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime as dt
import os
import re
import subprocess
from pathlib import Path

import pytest

from launcher.weights import auth

OPERATOR = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorKeyOperatorKeyOperatorKeyOpera operator@laptop"


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Path]:
    if os.geteuid() != 0:
        pytest.fail("needs root (a mount namespace with a private /run, as on the sandbox hosts)")
    (tmp_path / "run").mkdir()
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    return tmp_path / "home", tmp_path / "run"


def run(host: tuple[Path, Path], argv: tuple[str, ...], path: str | None = None) -> subprocess.CompletedProcess[str]:
    home, run_dir = host
    wrap = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$1" /run && shift && exec "$@"', "ns", str(run_dir), *argv)  # fmt: skip
    r = subprocess.run(wrap, capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(home), "PATH": path or os.environ["PATH"]})
    assert r.returncode == 0, r.stderr
    return r


def line(run_id: str) -> str:
    return auth.authorized_line(auth.new_key(), f"/run/fleet-weights-{run_id}/rsyncd-0.conf", ["10.0.0.2"], run_id)


def test_a_last_key_without_newline_survives_the_run(host: tuple[Path, Path]) -> None:
    ak = host[0] / ".ssh" / "authorized_keys"
    ak.write_text(OPERATOR)  # no trailing newline
    ak.chmod(0o644)
    run(host, auth.begin_argv("a1", "me@ctl pid=1", [line("a1")]))
    lines = ak.read_text().splitlines()
    assert lines[0] == OPERATOR and lines[1].endswith(" fleet-weights-a1") and len(lines) == 2
    assert ak.stat().st_mode & 0o777 == 0o644
    run(host, auth.cleanup_argv(["a1"]))
    assert ak.read_text() == OPERATOR + "\n"
    assert not (host[1] / "fleet-weights-a1").exists()


def test_a_symlinked_authorized_keys_is_edited_where_it_leads(host: tuple[Path, Path]) -> None:
    real = host[0] / "managed_keys"
    real.write_text(OPERATOR + "\n")
    ak = host[0] / ".ssh" / "authorized_keys"
    ak.symlink_to(real)
    run(host, auth.begin_argv("b1", "me@ctl pid=1", [line("b1")]))
    assert ak.is_symlink() and re.findall(r" fleet-weights-(b1)$", real.read_text(), re.M) == ["b1"]
    run(host, auth.cleanup_argv(["b1"]))
    assert ak.is_symlink() and real.read_text() == OPERATOR + "\n"


def test_concurrent_runs_lose_no_line(host: tuple[Path, Path]) -> None:
    ids = [f"c{i}" for i in range(8)]
    with cf.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: run(host, auth.begin_argv(i, "me@ctl pid=1", [line(i)])), ids))
    text = (host[0] / ".ssh" / "authorized_keys").read_text()
    assert sorted(re.findall(r"fleet-weights-(c\d)$", text, re.M)) == ids
    with cf.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: run(host, auth.cleanup_argv([i])), ids))
    assert (host[0] / ".ssh" / "authorized_keys").read_text() == ""


def test_the_line_expires(host: tuple[Path, Path]) -> None:
    run(host, auth.begin_argv("d1", "me@ctl pid=1", [line("d1")]))
    text = (host[0] / ".ssh" / "authorized_keys").read_text()
    m = re.fullmatch(r'expiry-time="(\d{14})Z",restrict,from="10\.0\.0\.2",command="[^"]+" ssh-ed25519 \S+ '
                     r"fleet-weights-d1\n", text)  # fmt: skip
    assert m, text
    expires = dt.datetime.strptime(m.group(1), "%Y%m%d%H%M%S").replace(tzinfo=dt.timezone.utc)
    ahead = (expires - dt.datetime.now(dt.timezone.utc)).total_seconds()
    assert auth.KEY_TTL_S - 120 < ahead <= auth.KEY_TTL_S


def test_the_next_run_sweeps_dead_runs_and_names_live_ones(host: tuple[Path, Path]) -> None:
    home, run_dir = host
    ak = home / ".ssh" / "authorized_keys"
    run(host, auth.begin_argv("e1", "me@ctl pid=11 start=1.00", [line("e1")]))  # its dir vanishes (a reboot)
    run(host, auth.begin_argv("e2", "me@ctl pid=12 start=2.00", [line("e2")]))  # expired
    run(host, auth.begin_argv("e3", "me@ctl pid=13 start=3.00", [line("e3")]))  # still running
    subprocess.run(["rm", "-rf", str(run_dir / "fleet-weights-e1")], check=True)
    (run_dir / "fleet-weights-e2" / "expires").write_text("1\n")
    r = run(host, auth.begin_argv("e4", "me@ctl pid=14 start=4.00", [line("e4")]))
    assert auth.other_runs(r.stdout) == {"e3": "me@ctl pid=13 start=3.00"}
    assert re.findall(r"fleet-weights-(e\d)$", ak.read_text(), re.M) == ["e3", "e4"]
    assert sorted(p.name for p in run_dir.iterdir()) == ["fleet-weights-e3", "fleet-weights-e4"]


def test_runs_lists_every_run_and_changes_nothing(host: tuple[Path, Path]) -> None:
    """What a staging run asks a host it does not touch (to sweep dead runs there): a killed
    run's keys stayed on a receiver that the next run found complete."""
    run(host, auth.begin_argv("b1", "me@ctl pid=1 start=1.00 x", [line("b1")]))
    run(host, auth.begin_argv("b2", "me@ctl pid=2 start=2.00 x", [line("b2")]))
    ak = host[0] / ".ssh" / "authorized_keys"
    before = ak.read_text()
    listed = run(host, auth.runs_argv()).stdout
    assert auth.other_runs(listed) == {"b1": "me@ctl pid=1 start=1.00 x", "b2": "me@ctl pid=2 start=2.00 x"}
    assert ak.read_text() == before and sorted(p.name for p in host[1].iterdir()) == ["fleet-weights-b1", "fleet-weights-b2"]


def test_end_removes_a_run_dir_a_transfer_still_wrote_into(host: tuple[Path, Path], tmp_path: Path) -> None:
    """A SIGTERMed run's clean-up failed in CI with ``rm: cannot remove ... Directory not empty``:
    a transfer still ending wrote into the run dir while rm emptied it.  Here ``rm`` on the
    script's PATH fails that way once (then is the real one): ``end`` still succeeds."""
    run(host, auth.begin_argv("f1", "me@ctl pid=1", [line("f1")]))
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "rm").write_text(
        "#!/bin/sh\n"
        f'if [ ! -e {tmp_path}/failed-once ]; then : >{tmp_path}/failed-once\n'
        "  echo \"rm: cannot remove '$3': Directory not empty\" >&2; exit 1; fi\n"
        'exec /bin/rm "$@"\n'
    )
    (shim / "rm").chmod(0o755)
    run(host, auth.cleanup_argv(["f1"]), path=f"{shim}:{os.environ['PATH']}")
    assert (tmp_path / "failed-once").exists(), "the shim was not used"
    assert not (host[1] / "fleet-weights-f1").exists()
    assert "fleet-weights-f1" not in (host[0] / ".ssh" / "authorized_keys").read_text()
