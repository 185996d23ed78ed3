"""Bring-up overhead of ``fleet up``: wall time to all-healthy minus the units' own start delay.

    sudo python3 bench/bringup.py --runs 3 [--delay 5] [--scenarios pp2-router,pd,pp2] [--skip-preflight]

Scenarios (``playbooks/bench/``), on one sandbox fleet with dockerd on every host (7 hosts for
pp2 alone, 11 with pd):
  pp2         Kimi TP8 PP2 over two hosts (h6, h7): 2 engine units, one restart group.
  pp2-router  the same behind a real sglang-router on h1 (regular mode): 3 units, 2 start steps.
  pd   GLM 2P1D, TP8 PP2 per role (prefill h9-h12, decode h13-h14, two nodes per instance),
       mooncake transfer, sglang-router on h15: 7 units, 4 groups, 2 start steps.
Hosts h9-h14 are retagged RTX-6000D in the bench's copy of the sandbox inventory (the GLM PD
recipe needs that SKU; the hosts are the same stand-in hosts either way).

Every engine stand-in delays its readiness by ``FLEET_STANDIN_START_DELAY`` (``--delay`` s,
written into the playbook's ``overrides.env``); overhead = wall time of the ``fleet up`` process
(fresh process: imports, load, plan, render, SSH, docker, health gate) - delay.  Each timed run
starts from nothing (``fleet down`` before it, untimed) and must end with every unit healthy.
The stand-in's fixed delay makes the units' own start known; the run also measures it "by hand"
(the same containers started over open connections, no orchestration) to split fleet's share.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    REPO,
    fleet,
    fmt_s,
    loadavg,
    machine,
    md_table,
    median,
    require_root,
    run_streamed,
    run_timed,
    sandbox,
    spread,
    write_results,
)

SCENARIOS = {
    "pp2": REPO / "playbooks/bench/pp2.yaml",
    "pp2-router": REPO / "playbooks/bench/pp2-router.yaml",
    "pd": REPO / "playbooks/bench/pd-2p1d.yaml",
}
RTX_HOSTS = ("h9", "h10", "h11", "h12", "h13", "h14")
HOSTS = {"pp2": 7, "pp2-router": 7, "pd": 15}  # sandbox hosts each scenario needs (h1..hN)
ROUTER_UNIT = re.compile(r"-router-r\d+$")  # unit names end in <role>-r<rank>; deployments may say "router"
TARGETS = {"pp2": 1.0, "pp2-router": 1.0, "pd": 2.0}


def bench_inventory(st: Any, dest: Path) -> Path:
    doc = yaml.safe_load(Path(st.inventory).read_text())
    hosts = doc["all"]["children"]["sandbox"]["hosts"]
    for h in RTX_HOSTS:
        if h in hosts:
            hosts[h]["gpu_model"] = "RTX-6000D"
    dest.write_text("# bench/bringup.py: the sandbox inventory, h9-h14 retagged RTX-6000D\n"
                    + yaml.safe_dump(doc, sort_keys=False))  # fmt: skip
    return dest


def with_delay(src: Path, dest: Path, delay: float) -> Path:
    doc = yaml.safe_load(src.read_text())
    doc["overrides"]["env"]["FLEET_STANDIN_START_DELAY"] = f"{delay:g}"
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def timeline(events: list[tuple[float, str, str]]) -> dict[str, float | None]:
    """When the last unit reached each stage (seconds since fork)."""

    def last(prefix: str, engines_only: bool = False) -> float | None:
        ts = [t for t, who, st in events if st.startswith(prefix) and (not engines_only or not ROUTER_UNIT.search(who))]
        return max(ts) if ts else None

    first = min((t for t, who, _ in events if who), default=None)
    return {"first_event": first, "installing": last("installing"), "starting": last("starting"),
            "engines_healthy": last("healthy", engines_only=True), "healthy": last("healthy"),
            "failed": last("failed")}  # fmt: skip


def one_run(pb: Path, inv: Path, known: str, delay: float, preflight: bool = True) -> dict[str, Any]:
    down = run_timed(fleet("down", str(pb), "-i", str(inv), "--known-hosts", known, "--quiet"), cwd=REPO)
    if down.rc != 0:
        raise SystemExit(f"fleet down failed before a run:\n{down.stderr[-2000:]}")
    load = loadavg()[0]
    skip = () if preflight else ("--skip-preflight",)
    wall, cpu, rc, stdout, events = run_streamed(fleet("up", str(pb), "-i", str(inv), "--known-hosts", known, *skip))
    tl = timeline(events)
    rec: dict[str, Any] = {"wall_s": round(wall, 3), "overhead_s": round(wall - delay, 3),
                           "client_cpu_s": round(cpu, 3), "rc": rc, "load1_before": load,
                           "down_before_s": round(down.wall_s, 2), "timeline_s": tl, "events": events}  # fmt: skip
    if tl["engines_healthy"] is not None:
        rec["engines_healthy_overhead_s"] = round(tl["engines_healthy"] - delay, 3)
    outcomes = [line.split() for line in stdout.splitlines() if line.startswith("h") and "fleet-" in line]
    rec["units"] = len(outcomes)
    rec["failed_units"] = [o[1] for o in outcomes if len(o) > 3 and o[3] == "failed"]
    rec["ok"] = rc == 0 and bool(outcomes) and not rec["failed_units"]
    if not rec["ok"]:
        rec["stderr_tail"] = "\n".join(st for _, who, st in events if not who)[-1500:]
    return rec


def floor(pb: Path, inv: Path, known: str) -> dict[str, Any]:
    """The units' own start time, without fleet's orchestration: with the files ``fleet up`` just
    installed, remove every unit's container, then step by step (engines, then the router) start
    the step's units all at once over already-open SSH connections and poll every health URL of
    the step from its host every 50 ms; the next step starts the moment the last one answers.
    Returns seconds from the first start to the last step healthy (``steps_s``: per step)."""
    import threading

    from launcher.pipeline import load_target
    from launcher.deploy.desired import step_of
    from launcher.deploy.steps import probe_argv
    from launcher.execute.hostkeys import KnownHosts
    from launcher.execute.ssh import SshConnector

    target = load_target(str(pb), str(inv), None, ())
    steps = sorted({step_of([d]) for d in target.units})
    hosts = {h.name: h for h in target.hosts}
    done: dict[str, float] = {}
    step_s: list[float] = []
    with SshConnector(KnownHosts((known,), record_to=os.devnull)) as conn:
        transports = {d.name: conn.connect(hosts[d.host]) for d in target.units}
        for d in reversed(target.units):  # sequential: untimed
            transports[d.name].run(d.commands.remove(), timeout=120, check=True)
        t0 = time.perf_counter()

        def one(d: Any) -> None:
            t = transports[d.name]
            for argv in d.start:
                t.run(argv, timeout=120, check=True)
            if d.unit.health is None:
                return
            while time.perf_counter() - t0 < 300:
                if t.run(probe_argv(d.unit.health.url, 2), timeout=30).ok:
                    done[d.name] = time.perf_counter() - t0
                    return
                time.sleep(0.05)

        for step in steps:
            started = time.perf_counter()
            units = [d for d in target.units if step_of([d]) == step]
            threads = [threading.Thread(target=one, args=(d,)) for d in units]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            step_s.append(round(time.perf_counter() - started, 3))
            if not all(d.name in done for d in units if d.unit.health is not None):
                return {"floor_s": None, "units": len(target.units), "steps_s": step_s, "ok": False}
    return {"floor_s": round(max(done.values()), 3), "units": len(target.units), "steps_s": step_s, "ok": True}


PROFILE_WRAPPER = """
import cProfile, sys, time
t0 = time.perf_counter()
from launcher.cli import main
t1 = time.perf_counter()
sys.stderr.write(f"bench-profile: imports {t1 - t0:.3f}\\n")
sys.argv = ["fleet"] + sys.argv[2:]
cProfile.run("main()", OUT)
"""


def profile_up(pb: Path, inv: Path, known: str, delay: float, work: Path) -> dict[str, Any]:
    """One more ``fleet up`` under cProfile (main thread: load, plan, render and the waits of each
    phase's fan-out), top launcher functions by cumulative time."""
    import pstats

    run_timed(fleet("down", str(pb), "-i", str(inv), "--known-hosts", known, "--quiet"), cwd=REPO)
    out = work / "up.prof"
    code = PROFILE_WRAPPER.replace("OUT", repr(str(out)))
    argv = [sys.executable, "-c", code, "x", "up", str(pb), "-i", str(inv), "--known-hosts", known, "--quiet"]
    t = run_timed(argv, cwd=REPO)
    imports = next((float(line.split()[-1]) for line in t.stderr.splitlines() if line.startswith("bench-profile:")), None)
    stats = pstats.Stats(str(out))
    rows = []
    for (path, line, fn), (_, _, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "/launcher/" in path:
            rel = path.split("/launcher/", 1)[1]
            rows.append((round(cumtime, 3), round(tottime, 3), f"launcher/{rel}:{line} {fn}"))
    rows.sort(reverse=True)
    return {"wall_s": round(t.wall_s, 3), "delay_s": delay, "imports_s": imports, "rc": t.rc,
            "top_cumulative": rows[:25]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="fleet up overhead to all-healthy (sandbox, dockerd)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--delay", default="5", help="stand-in start delay(s), comma-separated")
    ap.add_argument("--scenarios", default="pp2-router,pd,pp2")
    ap.add_argument("--name", default="bench")
    ap.add_argument("--profile", action="store_true", help="one more pp2 run under cProfile")
    ap.add_argument("--no-floor", action="store_true", help="skip the units' own start time (by hand)")
    ap.add_argument("--preflight", default="on,off",
                    help="fleet up with its preflight gate (on), with --skip-preflight (off), or both")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    require_root()
    delays = [float(d) for d in args.delay.split(",")]
    scenarios = [s for s in args.scenarios.split(",") if s]
    modes = [m == "on" for m in args.preflight.split(",") if m]
    labels = [sc if pf else f"{sc} --skip-preflight" for sc in scenarios for pf in modes]
    doc: dict[str, Any] = {"benchmark": "bringup", "machine": machine(), "argv": sys.argv, "runs": []}  # fmt: skip
    os.environ.setdefault("FLEET_NO_COLOR", "1")
    with tempfile.TemporaryDirectory(prefix="fleet-bench-bringup-") as tmp:
        work = Path(tmp)
        with sandbox(args.name, max(HOSTS[sc] for sc in scenarios), docker=True) as st:
            rtx = bench_inventory(st, work / "inventory-rtx.yaml")
            for scenario in scenarios:
                inv = rtx if scenario == "pd" else Path(st.inventory)  # type: ignore[attr-defined]
                for delay in delays:
                    pb = with_delay(SCENARIOS[scenario], work / f"{scenario}.yaml", delay)
                    for r, pf in ((r, pf) for r in range(args.runs) for pf in modes):
                        rec = one_run(pb, inv, st.known_hosts, delay, pf)  # type: ignore[attr-defined]
                        label = scenario if pf else f"{scenario} --skip-preflight"
                        rec.update(scenario=label, base=scenario, preflight=pf, delay_s=delay, round=r)
                        if not args.no_floor and rec["ok"]:
                            rec["floor"] = floor(pb, inv, st.known_hosts)  # type: ignore[attr-defined]
                            f = rec["floor"]["floor_s"]
                            if f is not None:
                                rec["fleet_own_s"] = round(rec["wall_s"] - f, 3)
                        doc["runs"].append(rec)
                        flag = "ok" if rec["ok"] else "FAILED\n" + rec.get("stderr_tail", "")
                        print(f"  {label:<28} delay {delay:g}: wall {rec['wall_s']:.2f} s  overhead "
                              f"{rec['overhead_s']:.2f} s  floor {rec.get('floor', {}).get('floor_s')} s  cpu {rec['client_cpu_s']:.2f} s  load {rec['load1_before']}  {flag}",
                              file=sys.stderr)  # fmt: skip
                    if args.profile and scenario == "pp2" and delay == delays[0]:
                        doc["profile"] = profile_up(pb, inv, st.known_hosts, delay, work)  # type: ignore[attr-defined]
                        for row in doc["profile"]["top_cumulative"][:15]:
                            print(f"    profile: {row}", file=sys.stderr)
                    run_timed(fleet("down", str(pb), "-i", str(inv), "--known-hosts", st.known_hosts, "--quiet"),
                              cwd=REPO)  # type: ignore[attr-defined]  # fmt: skip
    doc["machine"]["loadavg_at_end"] = loadavg()
    rows, summary = [], []
    for scenario in labels:
        target = TARGETS[scenario.split()[0]]
        for delay in delays:
            mine = [r for r in doc["runs"] if r["scenario"] == scenario and r["delay_s"] == delay]
            runs = [r for r in mine if r["ok"]]
            over = [r["overhead_s"] for r in runs]
            eng = [r["engines_healthy_overhead_s"] for r in mine if "engines_healthy_overhead_s" in r]
            floors = [r["floor"]["floor_s"] for r in mine if r.get("floor", {}).get("floor_s") is not None]
            own = [r["fleet_own_s"] for r in mine if "fleet_own_s" in r]
            failed = sorted({u for r in mine for u in r["failed_units"]})
            s = {"scenario": scenario, "delay_s": delay, "overhead_median_s": round(median(over), 3) if over else None,
                 "overhead_range_s": spread(over), "wall_median_s": round(median([r["wall_s"] for r in runs]), 3) if runs else None,
                 "engines_healthy_overhead_median_s": round(median(eng), 3) if eng else None,
                 "engines_healthy_overhead_range_s": spread(eng),
                 "floor_median_s": round(median(floors), 3) if floors else None, "floor_range_s": spread(floors),
                 "fleet_own_median_s": round(median(own), 3) if own else None, "fleet_own_range_s": spread(own),
                 "runs_ok": len(runs), "runs_failed": len(mine) - len(runs), "failed_units": failed,
                 "target_s": target}  # fmt: skip
            summary.append(s)
            rows.append([scenario, f"{delay:g}", fmt_s(s["wall_median_s"] or float("nan")),
                         f"{fmt_s(s['overhead_median_s'] or float('nan'))} [{s['overhead_range_s']}]",
                         f"{fmt_s(s['engines_healthy_overhead_median_s'] or float('nan'))} [{s['engines_healthy_overhead_range_s']}]",
                         f"{fmt_s(s['floor_median_s'] or float('nan'))} [{s['floor_range_s']}]",
                         fmt_s(s["floor_median_s"] - delay) if s["floor_median_s"] is not None else "–",
                         f"{fmt_s(s['fleet_own_median_s'] or float('nan'))} [{s['fleet_own_range_s']}]",
                         f"≤ {target:g}",
                         f"{len(runs)} ok" + (f", {len(mine) - len(runs)} failed ({', '.join(failed)})" if len(mine) > len(runs) else "")])  # fmt: skip
    doc["summary"] = summary
    path = write_results("bringup", doc, args.out)
    print(md_table(["scenario", "start delay s", "fleet up wall s (median)", "overhead s (median [min–max])",
                    "engines healthy − delay s", "units' own start (by hand) s",
                    "by hand − delay s (the overhead's floor: no fleet at all)", "fleet's own: wall − by-hand s",
                    "target s", "runs"], rows))  # fmt: skip
    print(f"\nresults: {path}", file=sys.stderr)
    return 0 if all(r["ok"] for r in doc["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
