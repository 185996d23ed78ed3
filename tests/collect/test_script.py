"""collect.sh (what ``fleet collect`` runs on each host) run for real under ``sh`` against a
temporary fleet root, with a stand-in ``docker`` on PATH: ``ps``/``inspect``/``logs`` answer for
two units and ``docker exec UNIT CMD...`` runs CMD here, as the container's shell would.  A unit's
``NCCL_DEBUG_FILE`` from its env file is a glob over the debug files and nothing else: a value
holding ``$(...)`` is never run (issue 16 item 4)."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

from launcher.preflight.collect import COLLECT_SCRIPT
from launcher.quoting import env_line

DOCKER = """#!/bin/sh
# Stand-in for the docker CLI (ps, inspect, logs, exec) over the units listed in $FAKE_UNITS.
case $1 in
ps) for u in $FAKE_UNITS; do echo "$u"; done ;;
inspect) echo '[{"Config": {"Env": ["NCCL_DEBUG=INFO"]}}]' ;;
logs) echo "NCCL INFO ring 0" ;;
exec) shift 2; exec "$@" ;;
*) exit 1 ;;
esac
"""


def _collect(tmp_path: Path, env_files: dict[str, str]) -> dict[str, bytes]:
    root, sysd, bin_ = tmp_path / "etc-fleet", tmp_path / "systemd", tmp_path / "bin"
    for d in (sysd, bin_):
        d.mkdir()
    for unit, text in env_files.items():
        (root / "dep" / unit).mkdir(parents=True)
        (root / "dep" / unit / "env").write_text(text)
    (bin_ / "docker").write_text(DOCKER)
    (bin_ / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "FAKE_UNITS": " ".join(env_files),
           "TMPDIR": str(tmp_path)}  # fmt: skip
    res = subprocess.run(["sh", "-c", COLLECT_SCRIPT, "fleet-collect", "dep", "10", "5", "true", str(root), str(sysd), str(1 << 20)],
                         capture_output=True, env=env, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    with tarfile.open(fileobj=io.BytesIO(res.stdout), mode="r:gz") as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def test_nccl_debug_file_is_a_glob_never_shell_text(tmp_path: Path) -> None:
    logs = tmp_path / "nccl"
    logs.mkdir()
    (logs / "debug.h1.log").write_text("line 1\nline 2\n")
    marker = tmp_path / "ran"
    hostile = f"{logs}/x.%h.$(touch {marker})"
    got = _collect(tmp_path, {
        "fleet-dep-good": env_line("NCCL_DEBUG", "INFO") + env_line("NCCL_DEBUG_FILE", f"{logs}/debug.%h.log"),
        "fleet-dep-evil": env_line("NCCL_DEBUG", "INFO") + env_line("NCCL_DEBUG_FILE", hostile),
    })  # fmt: skip
    assert not marker.exists(), "a value from the env file was run as shell code"
    assert got["units/fleet-dep-good/nccl-debug-files.txt"].decode() == f"== {logs}/debug.h1.log\nline 1\nline 2\n"
    assert got["units/fleet-dep-evil/nccl-debug-files.txt"] == b""
    assert got["units/fleet-dep-good/nccl.log"] == b"NCCL INFO ring 0\n"
    assert not [n for n in os.listdir(tmp_path) if n.startswith("fleet-collect.")], "temp dir removed"


def test_nccl_debug_files_stay_in_the_units_log_paths(tmp_path: Path) -> None:
    """Issue 25 item 5: ``/proc/*/environ`` was globbed inside the container and pulled every
    process's environment (secrets included) into the bundle.  Wildcards in the value, '..',
    and directories that resolve outside /tmp, /var/tmp, /var/log and the working directory
    (through a symlink too) are not collected, and say so."""
    logs = tmp_path / "nccl"
    logs.mkdir()
    (logs / "proc").symlink_to("/proc/self")
    os.environ["FLEET_TEST_SECRET"] = "sekrit-value"  # in the environ of every process below
    try:
        got = _collect(tmp_path, {
            "fleet-dep-glob": env_line("NCCL_DEBUG", "INFO") + env_line("NCCL_DEBUG_FILE", "/proc/*/environ"),
            "fleet-dep-proc": env_line("NCCL_DEBUG", "INFO") + env_line("NCCL_DEBUG_FILE", "/proc/self/environ"),
            "fleet-dep-link": env_line("NCCL_DEBUG", "INFO") + env_line("NCCL_DEBUG_FILE", f"{logs}/proc/environ"),
            "fleet-dep-up": env_line("NCCL_DEBUG", "INFO") + env_line("NCCL_DEBUG_FILE", f"{logs}/../../etc/x"),
        })  # fmt: skip
    finally:
        del os.environ["FLEET_TEST_SECRET"]
    assert not [n for n, data in got.items() if b"sekrit-value" in data]
    shown = {u: got[f"units/fleet-dep-{u}/nccl-debug-files.txt"].decode() for u in ("glob", "proc", "link", "up")}
    assert shown["glob"] == "not collected: NCCL_DEBUG_FILE=/proc/*/environ holds wildcards or '..'\n"
    assert shown["up"] == f"not collected: NCCL_DEBUG_FILE={logs}/../../etc/x holds wildcards or '..'\n"
    assert shown["proc"].startswith("not collected: /proc/self is /proc/") and shown["proc"].endswith(", not a log directory\n")
    assert shown["link"].startswith(f"not collected: {logs}/proc is /proc/")
