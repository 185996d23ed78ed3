"""Weights staging benchmark: one model to N sandbox hosts, spread host to host (fleet's
schedule) vs. every host fetching from the source, with every node's send rate limited to one
modelled NIC.

    sudo python3 bench/weights.py [--hosts 8,16] [--files 48] [--file-mib 4] [--rate-mbit 32]

The model: ``--files`` random files of ``--file-mib`` MiB in a directory on the control host.
The NIC: ``tc qdisc ... tbf rate R`` on every sender's egress -- the control host's link into
the sandbox (its ``fsb<slot>`` interface) and each host's data interface in its namespace -- so the
source, like every host, sends at most R in total, and on each host's ingress (the bridge's port
towards it), so a host receives at most R in total (a full-duplex NIC; the sandbox has no netem,
tbf is in the kernel).  Each mode runs through ``launcher.weights.stage.stage`` (``use_hosts=False`` for the
baseline), with the hosts' copies removed before every run (untimed) and verified after it
(every host ``ok``: a run that did not finish everywhere is reported as failed).  "one copy" is
the same tool staging one host.  Target: 16 hosts host-to-host <= 1.5x one copy.  Per run: the
machine's busy CPU seconds (all sessions) and the staging's own (a cpuacct cgroup, :class:`_Cpu`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import loadavg, machine, md_table, require_root, sandbox, write_results  # noqa: E402

from launcher.config.inventory import load_inventory  # noqa: E402
from launcher.execute.hostkeys import KnownHosts  # noqa: E402
from launcher.execute.ssh import SshConnector  # noqa: E402
from launcher.weights.needs import ModelNeed  # noqa: E402
from launcher.weights.spread import Spread, chunk_bytes  # noqa: E402
from launcher.weights.stage import Source, stage  # noqa: E402

MODEL = "bench/model"
DEST = f"/srv/models/{MODEL}"


def _tc(argv: list[str], netns: str | None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run(prefix + argv, check=True, capture_output=True)


def _limit(st: object, rate_mbit: int, latency_ms: int) -> None:
    """tbf on every node's egress -- the control host's link into the sandbox and each host's
    data interface -- and on each host's ingress (the bridge's port towards it): a full-duplex
    NIC, so a host receiving two transfers at once shares one link's rate between them."""
    tbf = ["root", "tbf", "rate", f"{rate_mbit}mbit", "burst", "64kb", "latency", f"{latency_ms}ms"]
    _tc(["tc", "qdisc", "replace", "dev", f"fsb{st.slot}", *tbf], None)  # type: ignore[attr-defined]
    for h in st.hosts:  # type: ignore[attr-defined]
        _tc(["tc", "qdisc", "replace", "dev", h.ifname, *tbf], h.netns)
        _tc(["tc", "qdisc", "replace", "dev", f"vh{h.index}", *tbf], st.ctl_netns)  # type: ignore[attr-defined]


def _unlimit(st: object) -> None:
    subprocess.run(["tc", "qdisc", "del", "dev", f"fsb{st.slot}", "root"], capture_output=True)  # type: ignore[attr-defined]


def _cpu_busy_s() -> float:
    """CPU seconds the whole machine spent busy so far (/proc/stat: every core, every process --
    the sandbox hosts' sshd, ssh and rsync are not this process's children)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class _Cpu:
    """CPU seconds of the staging itself: a cpuacct cgroup holding this process and every sandbox
    host's sshd, so each hop's sshd session, rsync daemon, rsync and ssh (their children) and the
    control host's pushes are counted, and other sessions' load on the machine is not."""

    def __init__(self, st: object) -> None:
        self.dir = Path(f"/sys/fs/cgroup/cpuacct/fleet-bench-weights-{os.getpid()}")
        self.dir.mkdir()
        for pid in [os.getpid(), *(h.sshd.pid for h in st.hosts)]:  # type: ignore[attr-defined]
            (self.dir / "cgroup.procs").write_text(f"{pid}\n")

    def seconds(self) -> float:
        return int((self.dir / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        for pid in (self.dir / "cgroup.procs").read_text().split():
            try:
                (self.dir.parent / "cgroup.procs").write_text(f"{pid}\n")
            except ProcessLookupError:
                pass
        self.dir.rmdir()


def _wipe(st: object) -> None:
    for h in st.hosts:  # type: ignore[attr-defined]
        subprocess.run(["rm", "-rf", f"{h.dir}/srv/models/bench"], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="8,16")
    ap.add_argument("--files", type=int, default=48)
    ap.add_argument("--file-mib", type=int, default=4)
    ap.add_argument("--rate-mbit", type=int, default=32)
    ap.add_argument("--queue-ms", type=int, default=400, help="tbf latency: the longest a packet waits in a sender's queue")
    ap.add_argument("--modes", default="hosts,source")
    ap.add_argument("--name", default="wbench", help="sandbox name")
    ap.add_argument("--out", type=Path, default=None, help="results file (default: bench/results/weights-<time>.json)")
    args = ap.parse_args()
    require_root()
    counts = [int(x) for x in args.hosts.split(",")]
    modes = args.modes.split(",")
    doc: dict[str, object] = {"machine": machine(), "files": args.files, "file_mib": args.file_mib,
                              "rate_mbit": args.rate_mbit, "queue_ms": args.queue_ms, "runs": []}  # fmt: skip
    runs: list[dict[str, object]] = doc["runs"]  # type: ignore[assignment]
    with tempfile.TemporaryDirectory(prefix="fleet-bench-weights-") as tmp:
        src = Path(tmp) / "src"
        (src / MODEL).mkdir(parents=True)
        for i in range(args.files):
            (src / MODEL / f"model-{i:05d}.safetensors").write_bytes(os.urandom(args.file_mib * 1024 * 1024))
        with sandbox(args.name, max(counts), docker=False) as st:
            _limit(st, args.rate_mbit, args.queue_ms)
            cpu_own = _Cpu(st)
            try:
                inventory = load_inventory(st.inventory)  # type: ignore[attr-defined]
                known = KnownHosts((st.known_hosts,), record_to=Path(tmp) / "kh")  # type: ignore[attr-defined]
                plan = [(1, "hosts")] + [(n, m) for n in counts for m in modes]
                for n, mode in plan:
                    _wipe(st)
                    hosts = [h.name for h in inventory.hosts[:n]]
                    need = ModelNeed(model=MODEL, what="weights", rel=MODEL, paths=tuple((h, DEST) for h in hosts))
                    with SshConnector(known) as connector:
                        t0, c0, o0 = time.monotonic(), _cpu_busy_s(), cpu_own.seconds()
                        report = stage(inventory, (need,), Source(kind="dir", root=str(src)), connector,
                                       use_hosts=mode == "hosts")  # fmt: skip
                        seconds, cpu = time.monotonic() - t0, _cpu_busy_s() - c0
                        own = cpu_own.seconds() - o0
                    ok = report.ok and len(report.hosts) == n
                    row = {"hosts": n, "mode": mode, "seconds": round(seconds, 2), "cpu_busy_s": round(cpu, 1),
                           "staging_cpu_s": round(own, 1), "load": loadavg(),
                           "ok": ok,
                           "bytes": sum(h.bytes for h in report.hosts),
                           "from_source": sum(dict(h.senders).get("source", 0) for h in report.hosts),
                           "link_bound": _link_bound(n, args.files, args.file_mib, mode == "hosts")}  # fmt: skip
                    runs.append(row)
                    print(row, flush=True)
            finally:
                cpu_own.close()
                _unlimit(st)
    one = next(r["seconds"] for r in runs if r["hosts"] == 1)
    rows = [[str(r["hosts"]), str(r["mode"]), f"{r['seconds']:.1f}", f"{float(r['seconds']) / float(one):.2f}x",  # type: ignore[arg-type]
             f"{r['link_bound']:.2f}x", str(r["from_source"]), f"{r['staging_cpu_s']:.1f}",
             f"{r['load'][0]:.0f}", "ok" if r["ok"] else "FAILED"] for r in runs]  # type: ignore[index]
    print(md_table(("hosts", "mode", "seconds", "vs one copy", "schedule's link-time bound", "files read from the source",
                    "staging CPU s", "load", "result"), rows))
    print(write_results("weights", doc, args.out))


def _link_bound(hosts: int, files: int, file_mib: int, use_hosts: bool) -> float:
    """The schedule's own time in units of one copy, with equal files, stage's batch size and no
    per-transfer cost: :class:`Spread` run as events in time, every node's uplink and every
    host's downlink one rate shared equally by the transfers on it."""
    items = [("m", f"f{i}") for i in range(files)]
    sizes = dict.fromkeys(items, file_mib)
    spread = Spread({f"h{i}": items for i in range(hosts)}, use_hosts=use_hosts, sizes=sizes,
                    chunk=chunk_bytes(sizes, hosts))  # fmt: skip
    now, left = 0.0, {t: float(file_mib * len(t.items)) for t in spread.start()}
    while left:
        up, down = Counter(t.src for t in left), Counter(t.dst for t in left)
        rate = {t: 1 / max(up[t.src], down[t.dst]) for t in left}
        step = min(left[t] / rate[t] for t in left)
        now += step
        left = {t: b - rate[t] * step for t, b in left.items()}
        for t in [t for t, b in left.items() if b <= 1e-9]:
            del left[t]
            left.update({n: float(file_mib * len(n.items)) for n in spread.done(t)})
    return now / (files * file_mib)

if __name__ == "__main__":
    main()
