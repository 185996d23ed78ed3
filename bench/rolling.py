"""Rolling restart of R groups vs. the sum of each group's own restart time.

    sudo python3 bench/rolling.py --groups 4 --runs 3 [--delay 2]

Deployment: ``playbooks/bench/rolling.yaml``, R single-node replicas (one restart group each) of
the engine stand-in on R of the sandbox's H100 hosts (h1-h4, h6-h8; dockerd on every host),
each with a fixed start delay.  Per round, all measured as fresh ``fleet`` processes:

* own time of each group: ``fleet restart PB --limit HOST --force`` (that group alone; --force
  because restarting one replica of a deployment needs it), wall time; summed over the groups;
* rolling: ``fleet restart PB --rolling --max-unavailable 1``, wall time, with its progress lines
  stamped on arrival (``batch i/R`` notes and per-unit states) to split it into per-batch times.

Reported (target: rolling total <= 1.10 x the sum of the groups' own restart times):
* rolling / sum of the lone restart commands (each pays fleet's fixed start-up once, so this
  favours rolling);
* rolling / sum of each group's own restart *work* (from its lone run's progress lines: batch
  note -> healthy: drain, stop, install, start, health gate), the strict reading;
* the sum of the rolling run's batches / the same sum (orchestration cost per batch), and the
  rolling run's fixed cost outside its batches (start-up, load, connect, lock, survey, report).  No router is given: without one
the roll skips router removal and drains through the engine's own in-flight counter.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
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

PLAYBOOK = REPO / "playbooks/bench/rolling.yaml"
HOST_ORDER = ("h1", "h2", "h3", "h4", "h6", "h7", "h8")  # the sandbox's H100 hosts (h5: Ascend, h9+: RTX-6000D)


def playbook(dest: Path, hosts: list[str], delay: float) -> Path:
    doc = yaml.safe_load(PLAYBOOK.read_text())
    doc["placement"]["single"]["hosts"] = ":".join(hosts)
    doc["overrides"]["env"]["FLEET_STANDIN_START_DELAY"] = f"{delay:g}"
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def batches(events: list[tuple[float, str, str]], end: float) -> list[float]:
    """Duration of each batch: from its ``batch i/R`` note to the next one (or the end)."""
    # notes are plain lines ("batch 1/4: group, ..."), split like "host/unit: state" lines
    starts = [t for t, who, _ in events if who.startswith("batch ")]
    return [round(b - a, 3) for a, b in zip(starts, starts[1:] + [end])]


def group_work(events: list[tuple[float, str, str]]) -> float | None:
    """A lone group's own restart work in its ``fleet restart --limit`` run: from its batch note
    (drain, stop, install, start) to its last unit's ``healthy``."""
    start = next((t for t, who, _ in events if who.startswith("batch ")), None)
    healthy = [t for t, who, st in events if st == "healthy"]
    return round(max(healthy) - start, 3) if start is not None and healthy else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="rolling restart vs. sum of the groups' own restarts")
    ap.add_argument("--groups", type=int, default=4, help="R: replicas (restart groups)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--delay", type=float, default=2.0, help="stand-in start delay (s)")
    ap.add_argument("--name", default="bench")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    require_root()
    if not 1 <= args.groups <= len(HOST_ORDER):
        raise SystemExit(f"--groups 1..{len(HOST_ORDER)}")
    hosts = list(HOST_ORDER[: args.groups])
    n_hosts = int(hosts[-1][1:])
    doc: dict[str, Any] = {"benchmark": "rolling", "machine": machine(), "argv": sys.argv, "groups": args.groups,
                           "delay_s": args.delay, "runs": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="fleet-bench-rolling-") as tmp:
        pb = str(playbook(Path(tmp) / "rolling.yaml", hosts, args.delay))
        with sandbox(args.name, n_hosts, docker=True) as st:
            common = ("-i", st.inventory, "--known-hosts", st.known_hosts)  # type: ignore[attr-defined]
            up = run_timed(fleet("up", pb, *common, "--quiet"), cwd=REPO)
            if up.rc != 0:
                raise SystemExit(f"fleet up failed:\n{up.stdout[-2000:]}\n{up.stderr[-2000:]}")
            for r in range(args.runs):
                own: dict[str, float] = {}
                own_events: dict[str, list[tuple[float, str, str]]] = {}
                ok = True
                for h in hosts:
                    wall1, _, rc1, out1, ev1 = run_streamed(fleet("restart", pb, *common, "--limit", h, "--force"))
                    own[h] = round(wall1, 3)
                    own_events[h] = ev1
                    if rc1 != 0:
                        ok = False
                        print(f"  restart --limit {h} failed:\n{out1[-1500:]}\n{ev1[-10:]}", file=sys.stderr)
                load = loadavg()[0]
                wall, cpu, rc, out, events = run_streamed(fleet("restart", pb, *common, "--rolling",
                                                                "--max-unavailable", "1"))  # fmt: skip
                per_batch = batches(events, wall)
                rec = {"round": r, "own_s": own, "own_sum_s": round(sum(own.values()), 3), "rolling_s": round(wall, 3),
                       "rolling_cpu_s": round(cpu, 3), "batches_s": per_batch,
                       "outside_batches_s": round(wall - sum(per_batch), 3), "rc": rc, "load1_before": load,
                       "ok": ok and rc == 0 and len(per_batch) == args.groups, "events": events, "own_events": own_events}  # fmt: skip
                rec["ratio"] = round(rec["rolling_s"] / rec["own_sum_s"], 3)
                work = [group_work(ev) for ev in own_events.values()]
                if all(w is not None for w in work):
                    rec["own_work_s"] = work
                    rec["own_work_sum_s"] = round(sum(w for w in work if w is not None), 3)
                    rec["ratio_work"] = round(rec["rolling_s"] / rec["own_work_sum_s"], 3)
                    rec["ratio_batches_work"] = round(sum(per_batch) / rec["own_work_sum_s"], 3)
                if rc != 0:
                    rec["stdout_tail"] = out[-1500:]
                    rec["stderr_tail"] = "\n".join(st for _, who, st in events if not who)[-1500:]
                doc["runs"].append(rec)
                print(f"  round {r}: own {rec['own_s']} sum {rec['own_sum_s']:.2f} s; rolling {wall:.2f} s "
                      f"(batches {per_batch}, outside {rec['outside_batches_s']:.2f} s) ratio {rec['ratio']:.2f}  "
                      f"load {load}  {'ok' if rec['ok'] else 'FAILED'}", file=sys.stderr)  # fmt: skip
            run_timed(fleet("down", pb, *common, "--quiet"), cwd=REPO)
    runs = [r for r in doc["runs"] if r["ok"]]
    doc["machine"]["loadavg_at_end"] = loadavg()
    doc["summary"] = {
        "groups": args.groups, "delay_s": args.delay, "runs_ok": len(runs), "runs_failed": len(doc["runs"]) - len(runs),
        "own_each_median_s": round(median([v for r in runs for v in r["own_s"].values()]), 3) if runs else None,
        "own_sum_median_s": round(median([r["own_sum_s"] for r in runs]), 3) if runs else None,
        "rolling_median_s": round(median([r["rolling_s"] for r in runs]), 3) if runs else None,
        "rolling_range_s": spread([r["rolling_s"] for r in runs]),
        "batch_median_s": round(median([b for r in runs for b in r["batches_s"]]), 3) if runs else None,
        "outside_batches_median_s": round(median([r["outside_batches_s"] for r in runs]), 3) if runs else None,
        "ratio_median": round(median([r["ratio"] for r in runs]), 3) if runs else None,
        "own_work_sum_median_s": round(median([r["own_work_sum_s"] for r in runs if "own_work_sum_s" in r]), 3) if runs else None,
        "ratio_work_median": round(median([r["ratio_work"] for r in runs if "ratio_work" in r]), 3) if runs else None,
        "ratio_batches_work_median": round(median([r["ratio_batches_work"] for r in runs if "ratio_batches_work" in r]), 3) if runs else None,
        "target_ratio": 1.10,
    }  # fmt: skip
    s = doc["summary"]
    path = write_results("rolling", doc, args.out)
    nan = float("nan")
    print(md_table(
        ["R groups", "start delay s", "rolling total s [min–max]", "Σ own restart commands s", "rolling / Σ commands",
         "Σ own group work s", "rolling / Σ work", "Σ batches / Σ work", "fixed cost outside batches s"],
        [[str(args.groups), f"{args.delay:g}", f"{fmt_s(s['rolling_median_s'] or nan)} [{s['rolling_range_s']}]",
          fmt_s(s["own_sum_median_s"] or nan), f"{s['ratio_median']}", fmt_s(s["own_work_sum_median_s"] or nan),
          f"{s['ratio_work_median']}", f"{s['ratio_batches_work_median']}",
          fmt_s(s["outside_batches_median_s"] or nan)]],
    ))  # fmt: skip
    print(f"\nresults: {path}", file=sys.stderr)
    return 0 if runs and len(runs) == len(doc["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
