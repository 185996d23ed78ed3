"""``fleet demo`` as a newcomer runs it right after ``sudo bash scripts/install.sh``: the
installed ``fleet`` in a subprocess, from an empty directory, with an empty HOME (no
known_hosts, no config).  It must bring up its own 15-host sandbox, deploy the 2P1D PD playbook
and the 2-node PP playbook, answer through the real router (a prefill and the decode named),
show status and leave nothing behind.  The wall time is printed (``-s``), not asserted."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from launcher.sandbox import netns, state

pytestmark = pytest.mark.sandbox


@pytest.fixture
def demo_name() -> Iterator[str]:
    if os.geteuid() != 0 or shutil.which("fleet") is None:
        pytest.skip("fleet demo needs root and the installed fleet command (scripts/install.sh)")
    name = f"dm{os.getpid()}"[:12]
    yield name
    if state.load(name) is not None or netns.namespaces(name):
        from launcher.sandbox import fleet

        fleet.down(name)


def test_demo_deploys_pd_and_pp_answers_through_the_router_and_cleans_up(demo_name: str, tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    t0 = time.monotonic()
    proc = subprocess.run(["fleet", "demo", "--name", demo_name], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=1500)  # fmt: skip
    wall = time.monotonic() - t0
    print(f"\nfleet demo: {wall:.1f}s wall; {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}")
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    out = proc.stdout
    assert re.search(r"^sb-pd answer \([0-9.]+s\): '.+'$", out, re.M), out
    assert re.search(r"^  served by prefill h(9|11) and decode h13 \(KV handed over for bootstrap room \d+\)$", out, re.M), out
    assert re.search(r"^  served by h6 \(ranks: h6, h7\)$", out, re.M), out
    running = re.findall(r"^(h\d+)\s+fleet-(sb-pd|sb-pp2)-\S+\s+\S+\s+\d\s+running\s+(ok|-)\s+1\s+none\s*$", out, re.M)
    assert len(running) == 9, out  # 7 PD units + 2 PP ranks, all running, healthy where checked
    # the commands shown are ones an operator can paste: each names the playbook it deployed
    shown = re.findall(r"^\$ fleet (up|status|down) (\S+) -i ", proc.stderr, re.M)
    assert sorted((cmd, Path(path).name) for cmd, path in shown) == sorted(
        (cmd, pb) for cmd in ("up", "status", "down") for pb in ("pd-2p1d.yaml", "pp2.yaml")), proc.stderr  # fmt: skip
    assert all(Path(path).is_file() for _, path in shown), shown
    assert f"sandbox {demo_name} torn down" in proc.stderr
    assert state.load(demo_name) is None and netns.namespaces(demo_name) == ()
