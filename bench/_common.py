"""Shared helpers of the hand-run benchmarks: timing, medians, machine facts, results files,
and sandbox fleets brought up (and always torn down) under the bench's own name.

Nothing here asserts a number: the scripts measure and print; ``bench/README.md`` records.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
PEERS_VENV = Path(os.environ.get("FLEET_BENCH_PEERS_VENV", "/var/cache/fleet-bench/peers-venv"))

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@dataclass(frozen=True, slots=True, kw_only=True)
class Timed:
    """One run of one command: wall seconds, CPU seconds of its process tree, exit status."""

    wall_s: float
    cpu_s: float
    rc: int
    stdout: str
    stderr: str


def run_timed(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None,
              timeout: float = 900.0) -> Timed:  # fmt: skip
    """Wall time from fork to exit, and the user+sys CPU of the child and everything it
    waited for (ansible's forks, pyinfra's ssh processes)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(list(argv), env=dict(env) if env is not None else None, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall_s=wall, cpu_s=cpu, rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)


def fleet(*args: str) -> list[str]:
    """argv of the ``fleet`` CLI of this checkout, run by this interpreter."""
    return [sys.executable, "-c", "from launcher.cli import main; main()", *args]


def run_streamed(argv: list[str]) -> tuple[float, float, int, str, list[tuple[float, str, str]]]:
    """Runs ``fleet up`` with its progress lines (``host/unit: state``) on stderr, each stamped
    with its arrival time since fork; returns wall, CPU, exit status, stdout, events."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events: list[tuple[float, str, str]] = []
    assert proc.stderr is not None and proc.stdout is not None
    out_chunks: list[str] = []
    reader = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    for line in proc.stderr:
        now = time.perf_counter() - t0
        who, sep, state = line.rstrip("\n").partition(": ")
        events.append((round(now, 3), who if sep else "", state if sep else line.rstrip("\n")))
    rc = proc.wait()
    wall = time.perf_counter() - t0
    reader.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, rc, "".join(out_chunks), events


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f}" if values else "-"


def loadavg() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return (round(one, 2), round(five, 2), round(fifteen, 2))


def machine() -> dict[str, object]:
    """What the numbers were measured on, and how busy the machine was."""
    mem_kib = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {
        "cpus": os.cpu_count(),
        "mem_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": loadavg(),
        "uptime": subprocess.run(("uptime",), capture_output=True, text=True).stdout.strip(),
        "other_busy_processes": busy_processes(),
    }


def busy_processes(limit: int = 5) -> list[str]:
    """The processes using the most CPU right now (not ours), as ``ps`` shows them."""
    out = subprocess.run(("ps", "-eo", "pcpu,pid,comm", "--sort=-pcpu", "--no-headers"),
                         capture_output=True, text=True).stdout  # fmt: skip
    mine = {os.getpid()}
    rows = []
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and int(parts[1]) not in mine and float(parts[0]) >= 5.0:
            rows.append(f"{parts[2]} {parts[0]}%")
    return rows[:limit]


def write_results(name: str, doc: Mapping[str, object], out: Path | None = None) -> Path:
    path = out or RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def peer(tool: str) -> str:
    """A peer tool from the separate peers venv (never from fleet's own environment)."""
    path = PEERS_VENV / "bin" / tool
    if not path.exists():
        raise SystemExit(
            f"{path} missing: python3 -m venv {PEERS_VENV} && {PEERS_VENV}/bin/pip install ansible-core pyinfra"
        )
    return str(path)


def peer_version(tool: str) -> str:
    try:
        out = subprocess.run((peer(tool), "--version"), capture_output=True, text=True, timeout=60).stdout
    except SystemExit:
        return "missing"
    return out.strip().splitlines()[0] if out.strip() else "?"


# ---------------------------------------------------------------------------------------------
# sandbox


@contextlib.contextmanager
def sandbox(name: str, n: int, *, docker: bool, real_engine: bool = False) -> Iterator[object]:
    """A sandbox fleet of ``n`` hosts under ``name`` (its own namespaces, guard route, state
    dir); torn down on exit, also after errors and Ctrl-C.  Its hosts see an empty root
    ``~/.bashrc`` (the sandbox's own host setup): this machine's runs ``pyenv init``, ~0.3 s per
    SSH command that a production host does not pay."""
    from launcher.sandbox import fleet

    st = fleet.up(name, n, docker=docker, real_engine=real_engine)
    try:
        yield st
    finally:
        fleet.down(name)


def precompile() -> None:
    """Byte-compile this checkout's ``launcher/``, as installing fleet does (pip compiles a
    wheel's modules; the peers' venv is compiled the same way): with PYTHONDONTWRITEBYTECODE
    set, as on this machine, an uncompiled editable checkout would re-compile every module in
    every fleet process (~0.1 s of each start-up)."""
    import compileall

    compileall.compile_dir(str(REPO / "launcher"), quiet=1)


def require_root() -> None:
    precompile()
    if os.geteuid() != 0:
        raise SystemExit("the sandbox benchmarks need root (network namespaces, sshd)")
    for tool in ("ip", "unshare", "/usr/sbin/sshd", "ssh-keygen"):
        if shutil.which(tool) is None:
            raise SystemExit(f"missing {tool} (apt: openssh-server iproute2)")


def fmt_s(x: float) -> str:
    return "-" if x != x else f"{x:.2f}"  # nan-safe


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
