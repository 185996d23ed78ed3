"""Fan-out benchmark: the same job on N sandbox hosts by fleet, ansible-playbook and pyinfra.

    sudo python3 bench/fanout.py --hosts 8,32,64 --runs 3 [--profile]

The job, per host: upload a unit's two files (``bench/job/run.sh`` 0755, ``bench/job/env``
0600) under /srv/fleet-bench/unit, start it (``sh run.sh``: a plain background process), read its
status back (the process is alive).  Each tool runs as its own process from the command line, so
interpreter start-up and imports count, as they do for an operator.

Tools (``--tools``, comma-separated; default all):
  fleet          bench/fleet_job.py (fleet's default forks, 64; key exchanges capped at 8)
  fleet-forks8   the same with forks 8 (the default before 2026-11-29's second pass)
  fleet-up       bench/fleet_job.py --steps up: fleet up's whole remote step sequence (5 trips)
  ansible-f5     ansible-playbook bench/peers/ansible/fanout.yml, forks 5 (ansible's default)
  ansible-fN     the same with forks = hosts
  pyinfra        pyinfra -y INVENTORY bench/peers/pyinfra/fanout_deploy.py (default parallelism)

Hosts run without dockerd (``fleet.up(docker=False)``): 64 per-host dockerds cost ~30 MB and a
second of CPU each to start, and the job does not need them.  Before every timed run all hosts
are reset (process killed, files removed; untimed); after it every host is checked (process
alive, both files with the right content and mode; untimed): a run that did not do the whole job
on every host is reported as failed, never timed as a success.  Tool order rotates per round.

Peers come from a separate venv (``$FLEET_BENCH_PEERS_VENV``, default
/var/cache/fleet-bench/peers-venv: ``python3 -m venv ... && pip install ansible-core pyinfra
py-spy``).  Host keys are checked strictly by every tool against the sandbox's known_hosts.

``--profile``: one more fleet run per host count under py-spy (CPU samples of fleet's process)
plus fleet's own phase trace, summarised as "where the time goes".
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    BENCH,
    Timed,
    fmt_s,
    loadavg,
    machine,
    md_table,
    median,
    peer,
    peer_version,
    require_root,
    run_timed,
    sandbox,
    spread,
    write_results,
)

ALL_TOOLS = ("fleet", "fleet-forks8", "fleet-up", "ansible-f5", "ansible-fN", "pyinfra")
JOB = BENCH / "job"
RESET = (
    'p=$(cat /run/fleet-bench/unit.pid 2>/dev/null) && kill "$p" 2>/dev/null; '
    "rm -rf /srv/fleet-bench /run/fleet-bench; true"
)
VERIFY = (
    'p=$(cat /run/fleet-bench/unit.pid) && kill -0 "$p" && '
    "sha256sum /srv/fleet-bench/unit/run.sh /srv/fleet-bench/unit/env && "
    "stat -c '%a %n' /srv/fleet-bench/unit/run.sh /srv/fleet-bench/unit/env"
)


# ---------------------------------------------------------------------------------------------
# hosts: reset before, verify after (through fleet's library; never timed)


def _on_all(st: Any, script: str) -> dict[str, tuple[int, str]]:
    from launcher.config.inventory import load_inventory
    from launcher.execute.fanout import Ok, run_all
    from launcher.execute.hostkeys import KnownHosts
    from launcher.execute.ssh import SshConnector

    hosts = load_inventory(st.inventory).hosts
    with SshConnector(KnownHosts((st.known_hosts,), record_to=os.devnull)) as conn:
        res = run_all(hosts, lambda h, t: t.run(("sh", "-c", script), timeout=60), connector=conn, forks=16)
    out: dict[str, tuple[int, str]] = {}
    for o in res.outcomes:
        if isinstance(o, Ok):
            out[o.host.name] = (o.value.exit_status, o.value.stdout_text + o.value.stderr_text)
        else:
            out[o.host.name] = (-1, str(getattr(o, "error", o)))
    return out


def reset(st: Any) -> None:
    bad = {h: r for h, r in _on_all(st, RESET).items() if r[0] != 0}
    if bad:
        raise SystemExit(f"reset failed: {bad}")


def verify(st: Any) -> list[str]:
    """Hosts where the job is not done (empty: all done)."""
    want = {
        f"/srv/fleet-bench/unit/{name}": hashlib.sha256((JOB / name).read_bytes()).hexdigest()
        for name in ("run.sh", "env")
    }
    modes = {"/srv/fleet-bench/unit/run.sh": "755", "/srv/fleet-bench/unit/env": "600"}
    bad = []
    for host, (rc, out) in sorted(_on_all(st, VERIFY).items()):
        digests = {p: d for d, p in (line.split() for line in out.splitlines() if len(line.split()) == 2
                                     and len(line.split()[0]) == 64)}  # fmt: skip
        got_modes = {p: m for m, p in (line.split() for line in out.splitlines() if len(line.split()) == 2
                                       and line.split()[0].isdigit() and len(line.split()[0]) <= 4)}  # fmt: skip
        if rc != 0 or digests != want or got_modes != modes:
            bad.append(f"{host}: rc={rc} {out.strip()[:200]!r}")
    return bad


# ---------------------------------------------------------------------------------------------
# tools


def pyinfra_inventory(st: Any, path: Path) -> None:
    hosts = [
        (h.name, {
            "ssh_hostname": h.address, "ssh_port": h.port, "ssh_user": "root", "ssh_key": st.client_key,
            "ssh_known_hosts_file": st.known_hosts, "ssh_strict_host_key_checking": "yes",
        })
        for h in st.hosts
    ]  # fmt: skip
    path.write_text(f"# generated by bench/fanout.py for sandbox {st.name}\nsandbox = {hosts!r}\n")


def ansible_cfg(path: Path, forks: int, control_dir: Path) -> None:
    path.write_text(
        "[defaults]\n"
        f"forks = {forks}\n"
        "gathering = explicit\n"
        "host_key_checking = True\n"
        "interpreter_python = /usr/bin/python3\n"
        "retry_files_enabled = False\n"
        "[ssh_connection]\n"
        "pipelining = True\n"
        "ssh_args = -o ControlMaster=auto -o ControlPersist=60s\n"
        f"control_path_dir = {control_dir}\n"
    )


def close_control_masters(control_dir: Path) -> None:
    """Ends the ControlPersist masters of one ansible run (ours, by their sockets)."""
    for sock in glob.glob(str(control_dir / "*")):
        subprocess.run(("ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"), capture_output=True, timeout=10)


def command(tool: str, st: Any, n: int, work: Path, trace: Path) -> tuple[list[str], dict[str, str], Path | None]:
    """argv, env, and the ansible control dir to clean (if any)."""
    env = dict(os.environ)
    if tool.startswith("fleet"):
        argv = [sys.executable, str(BENCH / "fleet_job.py"), "-i", st.inventory, "--known-hosts", st.known_hosts,
                "--trace", str(trace)]  # fmt: skip
        if tool == "fleet-forks8":
            argv += ["--forks", "8"]
        if tool == "fleet-up":
            argv += ["--steps", "up"]
        return argv, env, None
    if tool.startswith("ansible"):
        forks = 5 if tool == "ansible-f5" else n
        control = Path(tempfile.mkdtemp(prefix="cp-", dir=work))
        cfg = work / f"ansible-{forks}.cfg"
        ansible_cfg(cfg, forks, control)
        env.update(ANSIBLE_CONFIG=str(cfg), ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"))  # fmt: skip
        argv = [peer("ansible-playbook"), "-i", st.inventory, str(BENCH / "peers/ansible/fanout.yml"),
                "-e", f"ansible_ssh_common_args='-o UserKnownHostsFile={st.known_hosts} -o StrictHostKeyChecking=yes'"]  # fmt: skip
        return argv, env, control
    if tool == "pyinfra":
        inv = work / "pyinfra_inventory.py"
        pyinfra_inventory(st, inv)
        env["PYINFRA_PROGRESS"] = "off"
        return [peer("pyinfra"), "-y", str(inv), str(BENCH / "peers/pyinfra/fanout_deploy.py")], env, None
    raise SystemExit(f"unknown tool {tool}")


def run_tool(tool: str, st: Any, n: int, work: Path) -> dict[str, Any]:
    trace = work / f"trace-{tool}.json"
    trace.unlink(missing_ok=True)
    argv, env, control = command(tool, st, n, work, trace)
    load = loadavg()[0]
    timed: Timed = run_timed(argv, env=env, cwd=work)
    if control is not None:
        close_control_masters(control)
    bad = verify(st)
    rec: dict[str, Any] = {
        "tool": tool, "hosts": n, "wall_s": round(timed.wall_s, 3), "client_cpu_s": round(timed.cpu_s, 3),
        "rc": timed.rc, "ok": timed.rc == 0 and not bad, "load1_before": load,
    }  # fmt: skip
    if not rec["ok"]:
        rec["problems"] = bad[:5]
        rec["stderr_tail"] = (timed.stderr or timed.stdout)[-1500:]
    if trace.exists():
        rec["trace"] = json.loads(trace.read_text())
    return rec


# ---------------------------------------------------------------------------------------------
# profile


def profile_fleet(st: Any, n: int, work: Path) -> dict[str, Any]:
    """One fleet run under py-spy (CPU samples, all threads) + its phase trace."""
    reset(st)
    raw = work / "pyspy.txt"
    trace = work / "trace-profile.json"
    argv, env, _ = command("fleet", st, n, work, trace)
    spy = [peer("py-spy"), "record", "--format", "raw", "--rate", "250", "--nonblocking", "-o", str(raw), "--", *argv]
    timed = run_timed(spy, env=env, cwd=work)
    out: dict[str, Any] = {"hosts": n, "wall_s_under_pyspy": round(timed.wall_s, 3), "rc": timed.rc}
    if raw.exists():
        out.update(summarise_pyspy(raw.read_text()))
    else:
        out["pyspy_error"] = timed.stderr[-800:]
    if trace.exists():
        out["phases"] = summarise_trace(json.loads(trace.read_text()))
    return out


CATEGORIES = (
    # (label, substring of a frame "function (file:line)"), first match from the leaf wins
    ("import / start-up", "<module>"),
    ("key exchange + auth (paramiko crypto)", "paramiko/kex"),
    ("key exchange + auth (paramiko crypto)", "paramiko/auth_handler"),
    ("key exchange + auth (paramiko crypto)", "cryptography"),
    ("key exchange + auth (paramiko crypto)", "_parse_kex"),
    ("key loading (paramiko keys, known_hosts)", "paramiko/pkey"),
    ("key loading (paramiko keys, known_hosts)", "paramiko/hostkeys"),
    ("key loading (paramiko keys, known_hosts)", "paramiko/ed25519key"),
    ("SSH packet layer (paramiko transport/packet/cipher)", "paramiko/packet"),
    ("SSH packet layer (paramiko transport/packet/cipher)", "paramiko/transport"),
    ("SSH channels (paramiko channel)", "paramiko/channel"),
    ("fleet execute layer (ssh.py, fanout.py)", "launcher/execute"),
    ("inventory load (YAML)", "launcher/config"),
    ("inventory load (YAML)", "yaml/"),
)


def summarise_pyspy(raw: str) -> dict[str, Any]:
    """Collapsed stacks -> top self-time functions and a few categories (CPU samples only)."""
    leaf: Counter[str] = Counter()
    cats: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        leaf[frames[-1]] += count
        label = "other"
        for frame in reversed(frames):
            hit = next((lab for lab, sub in CATEGORIES if sub in frame), None)
            if hit:
                label = hit
                break
        cats[label] += count
    return {
        "samples": total,
        "rate_hz": 250,
        "cpu_s_sampled": round(total / 250, 3),
        "categories": {k: round(v / total, 3) for k, v in cats.most_common()} if total else {},
        "top_self": [(f, round(c / total, 3)) for f, c in leaf.most_common(12)] if total else [],
    }


def summarise_trace(tr: dict[str, Any]) -> dict[str, Any]:
    steps: dict[str, list[float]] = {}
    ends = []
    for rows in tr["hosts"].values():
        for name, t0, t1 in rows:
            steps.setdefault(name, []).append(t1 - t0)
        ends.append(max(t1 for _, _, t1 in rows))
    return {
        "imports_s": tr["imports_s"],
        "inventory_s": tr["inventory_s"],
        "fanout_s": tr["fanout_s"],
        "close_s": tr["close_s"],
        "per_host_step_median_s": {k: round(median(v), 4) for k, v in steps.items()},
        "per_host_total_median_s": round(median([sum(t1 - t0 for _, t0, t1 in rows) for rows in tr["hosts"].values()]), 4),
    }


# ---------------------------------------------------------------------------------------------
# report


def summarise(runs: list[dict[str, Any]], sizes: Sequence[int], tools: Sequence[str]) -> dict[str, Any]:
    med: dict[str, dict[int, float]] = {}
    table = []
    for tool in tools:
        for n in sizes:
            walls = [r["wall_s"] for r in runs if r["tool"] == tool and r["hosts"] == n and r["ok"]]
            fails = sum(1 for r in runs if r["tool"] == tool and r["hosts"] == n and not r["ok"])
            cpus = [r["client_cpu_s"] for r in runs if r["tool"] == tool and r["hosts"] == n and r["ok"]]
            med.setdefault(tool, {})[n] = median(walls)
            table.append({"tool": tool, "hosts": n, "median_s": round(median(walls), 3) if walls else None,
                          "range_s": spread(walls), "runs_ok": len(walls), "runs_failed": fails,
                          "client_cpu_median_s": round(median(cpus), 3) if cpus else None})  # fmt: skip
    ratios = []
    for peer_tool in (t for t in tools if not t.startswith("fleet")):
        for n in sizes:
            for mine in (t for t in tools if t.startswith("fleet")):
                a, b = med[mine][n], med[peer_tool][n]
                if a == a and b == b:
                    ratios.append({"fleet": mine, "peer": peer_tool, "hosts": n, "speedup": round(b / a, 2)})
    marginal = []
    if 32 in sizes and 64 in sizes:
        for tool in tools:
            t32, t64 = med[tool][32], med[tool][64]
            if t32 == t32 and t64 == t64:
                marginal.append({"tool": tool, "per_host_s": round((t64 - t32) / 32, 4),
                                 "t64_over_t32": round(t64 / t32, 2)})  # fmt: skip
    return {"table": table, "ratios": ratios, "marginal": marginal}


def markdown(summary: dict[str, Any], sizes: Sequence[int]) -> str:
    tools = list(dict.fromkeys(r["tool"] for r in summary["table"]))
    rows = []
    for tool in tools:
        cells = [tool]
        for n in sizes:
            r = next(x for x in summary["table"] if x["tool"] == tool and x["hosts"] == n)
            fail = f" ({r['runs_failed']} failed)" if r["runs_failed"] else ""
            cells.append(f"{fmt_s(r['median_s'] if r['median_s'] is not None else float('nan'))} "
                         f"[{r['range_s']}]{fail}")  # fmt: skip
        rows.append(cells)
    out = [md_table(["tool", *(f"{n} hosts: median s [min–max]" for n in sizes)], rows)]
    cpu_rows = [[t] + [fmt_s(next(x for x in summary["table"] if x["tool"] == t and x["hosts"] == n)["client_cpu_median_s"] or float("nan")) for n in sizes] for t in tools]
    out.append(md_table(["tool", *(f"client CPU s, {n} hosts" for n in sizes)], cpu_rows))
    if summary["ratios"]:
        rr = [[r["fleet"], r["peer"], str(r["hosts"]), f"{r['speedup']}×"] for r in summary["ratios"]]
        out.append(md_table(["fleet variant", "peer", "hosts", "peer time / fleet time"], rr))
    if summary["marginal"]:
        mr = [[m["tool"], f"{m['per_host_s'] * 1000:.0f} ms", f"{m['t64_over_t32']}"] for m in summary["marginal"]]
        out.append(md_table(["tool", "(t64 − t32)/32 per host", "t64 / t32"], mr))
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="fleet vs ansible-playbook vs pyinfra on sandbox fleets")
    ap.add_argument("--hosts", default="8,32,64", help="comma-separated host counts")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tools", default=",".join(ALL_TOOLS))
    ap.add_argument("--name", default="bench", help="sandbox name (1-12 lowercase letters/digits)")
    ap.add_argument("--profile", action="store_true", help="also profile one fleet run per size")
    ap.add_argument("--out", type=Path, default=None, help="results JSON (default bench/results/fanout-*.json)")
    args = ap.parse_args(argv)
    require_root()
    sizes = [int(x) for x in args.hosts.split(",")]
    tools = [t for t in args.tools.split(",") if t]
    for t in tools:
        if t not in ALL_TOOLS:
            raise SystemExit(f"unknown tool {t}; choose from {', '.join(ALL_TOOLS)}")
    doc: dict[str, Any] = {
        "benchmark": "fanout", "machine": machine(), "argv": sys.argv, "sizes": sizes, "tools": tools,
        "versions": {"ansible-playbook": peer_version("ansible-playbook") if any(t.startswith("ansible") for t in tools) else None,
                     "pyinfra": peer_version("pyinfra") if "pyinfra" in tools else None},
        "runs": [], "profiles": [],
    }  # fmt: skip
    work_root = Path(tempfile.mkdtemp(prefix="fleet-bench-fanout-"))
    try:
        for n in sizes:
            work = work_root / f"n{n}"
            work.mkdir()
            t0 = time.perf_counter()
            with sandbox(args.name, n, docker=False) as st:
                print(f"== {n} hosts (sandbox up {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
                for r in range(args.runs):
                    order = tools[r % len(tools):] + tools[: r % len(tools)]
                    for tool in order:
                        reset(st)
                        rec = run_tool(tool, st, n, work)
                        rec["round"] = r
                        doc["runs"].append(rec)
                        flag = "ok" if rec["ok"] else f"FAILED rc={rec['rc']} {rec.get('problems', '')}"
                        print(f"  {tool:<13} {n:>3} hosts run {r}: {rec['wall_s']:6.2f} s  "
                              f"cpu {rec['client_cpu_s']:5.2f} s  load {rec['load1_before']}  {flag}",
                              file=sys.stderr)  # fmt: skip
                        if not rec["ok"]:
                            print(rec.get("stderr_tail", ""), file=sys.stderr)
                if args.profile:
                    prof = profile_fleet(st, n, work)
                    doc["profiles"].append(prof)
                    print(f"  profile {n}: {json.dumps(prof.get('categories', {}))}", file=sys.stderr)
                reset(st)
    finally:
        subprocess.run(("rm", "-rf", str(work_root)))
    doc["machine"]["loadavg_at_end"] = loadavg()
    doc["summary"] = summarise(doc["runs"], sizes, tools)
    path = write_results("fanout", doc, args.out)
    print(markdown(doc["summary"], sizes))
    print(f"\nresults: {path}", file=sys.stderr)
    return 0 if all(r["ok"] for r in doc["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
