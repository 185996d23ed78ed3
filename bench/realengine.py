"""Bring-up with the REAL engine: ``fleet up`` of ``playbooks/sandbox/real-single.yaml`` to
all-healthy vs the same container started by hand on the same host, and fleet's share beyond
the engine's cold start.

    python3 bench/realengine.py --runs 2        (root; builds the real-engine image once)

Per run, alternating the two: (a) ``fleet up`` in a fresh process (load, plan, render, SSH,
docker, the health gate polling from the host) until it returns all-healthy; (b) by hand: the
``docker run`` line fleet rendered for the unit (its run.sh, with its env), over one SSH command, then
/health polled from this machine every 0.1 s until 200.  Both start from no container and the
same warm compile cache on the host (the first, untimed start fills it).  fleet's share =
median(a) - median(b), over the starts that became healthy: a start that did not (the playbook's
600 s start deadline, or 900 s by hand, passed on a loaded machine) is recorded as null with the
load average, and the runs go on.  Nothing is asserted; results go to
bench/results/realengine-*.json.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, fleet, fmt_s, loadavg, machine, median, require_root, run_timed, write_results  # noqa: E402

PLAYBOOK = REPO / "playbooks/sandbox/real-single.yaml"
UNIT = "fleet-sb-real-single-single0-r0"
RUN_SH = f"/etc/fleet/sb-real-single/{UNIT}/run.sh"
ENV = f"/etc/fleet/sb-real-single/{UNIT}/env"


def _healthy(url: str, timeout_s: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.1)
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    require_root()
    from launcher.sandbox import fleet as sandbox
    from launcher.sandbox.client import Sandbox

    st = sandbox.up("realbench", 1, docker=True, real_engine=True)
    sb = Sandbox(st)
    common = ("-i", st.inventory, "--known-hosts", st.known_hosts)
    url = f"http://{st.hosts[0].data_ip}:8100/health"
    by_fleet: list[float | None] = []
    by_hand: list[float | None] = []
    loads: list[tuple[float, float, float]] = []
    try:
        warm = run_timed(fleet("up", str(PLAYBOOK), "-q", *common))  # fills the host's compile cache
        print(f"first (cold cache) fleet up: {fmt_s(warm.wall_s)} rc={warm.rc} load {loadavg()}", flush=True)
        # The rendered line and env, taken while fleet's files exist (down removes them).
        docker_run = sb.ssh("h1", f"grep '^exec ' {RUN_SH}").out.strip().removeprefix("exec ").replace('"$docker"', "docker")
        env = " ".join(sb.ssh("h1", f"cat {ENV}").out.split())
        for _ in range(args.runs):
            run_timed(fleet("down", str(PLAYBOOK), "-q", *common))
            t = run_timed(fleet("up", str(PLAYBOOK), "-q", *common))
            by_fleet.append(t.wall_s if t.rc == 0 else None)
            run_timed(fleet("down", str(PLAYBOOK), "-q", *common))
            t0 = time.monotonic()
            res = sb.ssh("h1", f"env {env} {docker_run}")
            assert res.rc == 0, res.err
            ready = _healthy(url, 900)
            by_hand.append(None if ready is None else time.monotonic() - t0)  # the SSH command and the polling
            sb.ssh("h1", f"docker rm -f {UNIT}")
            loads.append(loadavg())
            print(f"fleet up {_s(by_fleet[-1])}  by hand {_s(by_hand[-1])}  load {loads[-1]}", flush=True)
    finally:
        run_timed(fleet("down", str(PLAYBOOK), "-q", *common))
        sb.close()
        sandbox.down("realbench")
    done_f = [x for x in by_fleet if x is not None]
    done_h = [x for x in by_hand if x is not None]
    share = median(done_f) - median(done_h) if done_f and done_h else None
    print(f"median: fleet up {_s(median(done_f) if done_f else None)}, by hand {_s(median(done_h) if done_h else None)}, "
          f"fleet's share {_s(share)}")  # fmt: skip
    write_results("realengine", {"machine": machine(), "fleet_up_s": by_fleet, "by_hand_s": by_hand, "loadavg": loads,
                                 "first_fleet_up_s": warm.wall_s, "fleet_share_s": share})  # fmt: skip


def _s(v: float | None) -> str:
    return "did not become healthy" if v is None else fmt_s(v)


if __name__ == "__main__":
    main()
