"""``fleet watch``: time to recover a killed rank, and the watch's own CPU per surveyed host.

    sudo python3 bench/watch.py [--runs 3] [--interval 2] [--cpu-seconds 60]
    sudo python3 bench/watch.py --real-engine [--runs 2]     (after fleet sandbox image --real-engine)

Deployments (``playbooks/bench/watch-pp2.yaml``, ``watch-single.yaml``): two stand-in PP2
instances behind the real sglang-router on h1..h5 (each rank's start delay 2 s), and three
single-node replicas on h6..h8; 8 sandbox hosts.

* Recover: ``fleet watch watch-pp2.yaml --interval I --json`` runs; per run, rank 1 of the first
  instance is killed (``docker kill`` over the sandbox's SSH), and the watch's events split the
  recovery: detection (kill -> ``recreating``), out of the router, restart (out of the router ->
  the group's last rank started: docker's ``StartedAt`` of its containers), health (that start ->
  the health gate passed), back in the router, and the total from the kill to ``recovered``
  (``--backoff 0``: the runs break the same group again and again, and its backoff is not what
  is measured).  ``restart_and_health_s`` is the sum of the two, as the watch's event has it.
* CPU: the watch alone on a healthy deployment for ``--cpu-seconds``, once over the PP2
  deployment (5 hosts) and once over both (8 hosts); its process's user+sys CPU (psutil) divided
  by hosts x intervals.  No action happens then: this is the survey's cost.
* ``--real-engine``: the same recovery with the REAL vLLM PP2 (``playbooks/sandbox/real-pp2.yaml``
  placed on h1:h2 of a 2-host real-engine sandbox): the restart + health gate is the real
  engine's cold start of both ranks.  No CPU part (the survey does not depend on the engine).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, fleet, fmt_s, loadavg, machine, md_table, median, require_root, run_timed, sandbox, write_results  # noqa: E402

PP2 = REPO / "playbooks/bench/watch-pp2.yaml"
SINGLE = REPO / "playbooks/bench/watch-single.yaml"
KILLED = ("h2", "fleet-bench-watch-rank0-r1")
REAL_PP2 = REPO / "playbooks/sandbox/real-pp2.yaml"
REAL_KILLED = ("h2", "fleet-sb-real-pp2-rank0-r1")
REAL_TIMEOUT_S = 900.0  # a real cold start of both ranks on a loaded 2-core machine


class Watch:
    """``fleet watch`` running, its JSON events read from stdout as they come."""

    def __init__(self, common: tuple[str, ...], interval: float, *playbooks: Path) -> None:
        # --backoff 0: the runs kill the same group again and again; its backoff is not what is measured.
        argv = fleet("watch", *(str(p) for p in playbooks), *common, "--interval", f"{interval:g}", "--json", "-q",
                     "--backoff", "0")  # fmt: skip
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.events: list[dict[str, Any]] = []

    def next(self, kind: str, timeout: float = REAL_TIMEOUT_S) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                self.log.seek(0)
                raise SystemExit(f"fleet watch exited {self.proc.wait()}:\n{self.log.read()[-2000:]}")
            event = json.loads(line)
            self.events.append(event)
            if event["kind"] == kind:
                return event
        raise SystemExit(f"no {kind} event within {timeout:g}s: {self.events[-5:]}")

    def cpu_s(self) -> float:
        t = psutil.Process(self.proc.pid).cpu_times()
        return float(t.user + t.system)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(120)


def epoch(event: dict[str, Any]) -> float:
    at = datetime.datetime.strptime(event["at"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return at.replace(tzinfo=datetime.timezone.utc).timestamp()


def started_at(sb: Any, hosts: list[str], group: str) -> float:
    """When the last rank of ``group`` on ``hosts`` was started (docker's ``StartedAt`` of its
    running containers, nanoseconds cut to microseconds), epoch seconds."""
    latest = 0.0
    for h in hosts:
        res = sb.ssh(h, f"docker ps -q --filter label=fleet.group={group} | xargs -r docker inspect -f '{{{{.State.StartedAt}}}}'")
        if res.rc != 0 or not res.out.split():
            raise SystemExit(f"{h}: no running rank of {group} to read its start from: {res.err}")
        for stamp in res.out.split():
            day, _, frac = stamp.rstrip("Z").partition(".")
            at = datetime.datetime.strptime(f"{day}.{(frac or '0')[:6]}", "%Y-%m-%dT%H:%M:%S.%f")
            latest = max(latest, at.replace(tzinfo=datetime.timezone.utc).timestamp())
    return latest


def recover(sb: Any, common: tuple[str, ...], runs: int, interval: float, playbook: Path = PP2,
            victim: tuple[str, str] = KILLED) -> list[dict[str, float]]:  # fmt: skip
    w = Watch(common, interval, playbook)
    out = []
    try:
        w.next("note")
        time.sleep(2 * interval)
        for _ in range(runs):
            killed = time.time()
            res = sb.ssh(victim[0], f"docker kill {victim[1]}")
            if res.rc != 0:
                raise SystemExit(f"docker kill: {res.err}")
            began = w.next("recreating")
            done = w.next("recovered")
            # The event's times are relative; anchored at its own time, they are the moments the group left
            # its router and passed its gate, and the ranks' start (same clock: the sandbox's hosts are
            # this machine) splits the two.
            healthy_at = epoch(done) - done["register_s"]
            out_at = healthy_at - done["restart_s"]
            started = started_at(sb, done["hosts"], done["group"])
            rec = {"detect_s": round(epoch(began) - killed, 3), "out_of_router_s": done["out_of_router_s"],
                   "restart_s": round(started - out_at, 3), "health_s": round(healthy_at - started, 3),
                   "restart_and_health_s": done["restart_s"], "back_in_router_s": done["register_s"],
                   "total_s": round(epoch(done) - killed, 3), "load1": loadavg()[0]}  # fmt: skip
            out.append(rec)
            print(f"  recover: {rec}", file=sys.stderr)
            time.sleep(3 * interval)
    finally:
        w.stop()
    return out


def cpu(common: tuple[str, ...], seconds: float, interval: float, playbooks: tuple[Path, ...], hosts: int) -> dict[str, float]:
    w = Watch(common, interval, *playbooks)
    try:
        w.next("note")
        time.sleep(2 * interval)  # connections open, first surveys done
        c0, t0 = w.cpu_s(), time.monotonic()
        time.sleep(seconds)
        used, wall = w.cpu_s() - c0, time.monotonic() - t0
    finally:
        w.stop()
    intervals = wall / interval
    rec = {"hosts": hosts, "seconds": round(wall, 1), "interval_s": interval, "cpu_s": round(used, 3),
           "cpu_ms_per_host_per_interval": round(1000 * used / hosts / intervals, 2), "load1": loadavg()[0]}  # fmt: skip
    print(f"  cpu: {rec}", file=sys.stderr)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="fleet watch: time to recover, CPU per surveyed host")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--cpu-seconds", type=float, default=60.0)
    ap.add_argument("--name", default="bwatch")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--real-engine", action="store_true", help="the real vLLM PP2 instead of the stand-ins")
    args = ap.parse_args(argv)
    require_root()
    from launcher.sandbox.client import Sandbox

    doc: dict[str, Any] = {"benchmark": "watch", "machine": machine(), "argv": sys.argv, "interval_s": args.interval}
    if args.real_engine:
        doc["benchmark"] = "watch-real-engine"
        with sandbox(args.name, 2, docker=True, real_engine=True) as st, tempfile.TemporaryDirectory() as tmp:
            # The sandbox playbook on this 2-host sandbox's h1:h2, declared the RTX-6000D nodes the
            # recipe runs on (as the sandbox declares its h9:h10).
            inv = yaml.safe_load(Path(st.inventory).read_text())  # type: ignore[attr-defined]
            for h in ("h1", "h2"):
                inv["all"]["children"]["sandbox"]["hosts"][h].update(gpu_model="RTX-6000D", gpu_memory_gib=84)
            inventory = Path(tmp) / "inventory.yaml"
            inventory.write_text(yaml.safe_dump(inv, sort_keys=False))
            common = ("-i", str(inventory), "--known-hosts", st.known_hosts)  # type: ignore[attr-defined]
            pb = Path(tmp) / "real-pp2.yaml"
            pb.write_text(REAL_PP2.read_text().replace("hosts: h9:h10", "hosts: h1:h2"))
            up = run_timed(fleet("up", str(pb), *common, "--skip-preflight", "--quiet"), cwd=REPO, timeout=REAL_TIMEOUT_S)
            if up.rc != 0:
                raise SystemExit(f"fleet up {pb.name} failed:\n{up.stdout[-2000:]}\n{up.stderr[-2000:]}")
            doc["up_s"] = round(up.wall_s, 1)
            sb = Sandbox(st)  # type: ignore[arg-type]
            try:
                doc["recover"] = recover(sb, common, args.runs, args.interval, pb, REAL_KILLED)
            finally:
                run_timed(fleet("down", str(pb), *common, "--quiet"), cwd=REPO)
                sb.close()
        doc["cpu"] = []
    else:
        doc = measure_standin(doc, args)
    return report(doc, args)


def measure_standin(doc: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from launcher.sandbox.client import Sandbox

    with sandbox(args.name, 8, docker=True) as st:
        common = ("-i", st.inventory, "--known-hosts", st.known_hosts)  # type: ignore[attr-defined]
        for pb in (PP2, SINGLE):
            up = run_timed(fleet("up", str(pb), *common, "--skip-preflight", "--quiet"), cwd=REPO)
            if up.rc != 0:
                raise SystemExit(f"fleet up {pb.name} failed:\n{up.stdout[-2000:]}\n{up.stderr[-2000:]}")
        sb = Sandbox(st)  # type: ignore[arg-type]
        try:
            doc["recover"] = recover(sb, common, args.runs, args.interval)
            doc["cpu"] = [cpu(common, args.cpu_seconds, args.interval, (PP2,), 5),
                          cpu(common, args.cpu_seconds, args.interval, (PP2, SINGLE), 8)]  # fmt: skip
        finally:
            sb.close()
    return doc


def report(doc: dict[str, Any], args: argparse.Namespace) -> int:
    rec = doc["recover"]
    doc["machine"]["loadavg_at_end"] = loadavg()
    doc["summary"] = {k: round(median([r[k] for r in rec]), 3) for k in rec[0]} if rec else {}
    path = write_results(doc["benchmark"], doc, args.out)
    s = doc["summary"]
    print(md_table(["interval s", "detect s", "out of router s", "restart s", "health s", "back in router s", "total s"],
                   [[f"{args.interval:g}", *(fmt_s(s[k]) for k in ("detect_s", "out_of_router_s", "restart_s", "health_s",
                                                                   "back_in_router_s", "total_s"))]]))  # fmt: skip
    if doc["cpu"]:
        print(md_table(["hosts surveyed", "interval s", "watch CPU s", "CPU ms per host per interval"],
                       [[str(c["hosts"]), f"{c['interval_s']:g}", f"{c['cpu_s']:.2f}", f"{c['cpu_ms_per_host_per_interval']:.2f}"]
                        for c in doc["cpu"]]))  # fmt: skip
    print(f"results: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
