"""The fleet side of the fan-out benchmark: one process, like ``ansible-playbook`` or ``pyinfra``.

    python3 bench/fleet_job.py -i INVENTORY --known-hosts FILE [--forks 8] [--steps job|up]

It drives the hosts through fleet's own execution layer (``launcher.execute``: ``SshConnector``
with strict host keys, ``run_all`` on a bounded pool, one reused connection per host) with the
same remote operations ``fleet up`` uses to install and start a unit:

* ``--steps job`` (the job every tool does): upload the unit's two files (``Transport.put``:
  atomic write, parents created, mode set), start it, read its status back.  4 round trips.
* ``--steps up``: the whole remote step sequence ``fleet up`` runs for one new unit, with the
  same builders (``launcher.deploy.lock``, ``steps.read_manifests_argv``): take the deploy lock,
  read the manifests, read liveness, stop the old instance, upload the files and the manifest,
  start, read liveness, release the lock.  10 round trips.

Why not ``fleet up`` itself: its runtimes are docker and systemd; these sandbox hosts run no
dockerd (64 of them do not fit the time budget of a 2-core machine) and no systemd (PID 1 here
is not systemd), so the unit is a plain process started by ``run.sh``.  ``bench/bringup.py``
measures ``fleet up`` itself on docker hosts.

Exit status 0 when every host reported ``running``; 1 otherwise.  ``--trace FILE`` writes the
phase timings (imports, inventory, connect and each step per host) as JSON.
"""

from __future__ import annotations

import time

T_TOP = time.time()  # interpreter start-up is measured by the caller (fork -> T_TOP)

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.config.inventory import load_inventory  # noqa: E402
from launcher.deploy import lock  # noqa: E402
from launcher.deploy.remote import check, sh  # noqa: E402
from launcher.deploy.steps import read_manifests_argv  # noqa: E402
from launcher.execute.fanout import Ok, run_all  # noqa: E402
from launcher.execute.hostkeys import KnownHosts  # noqa: E402
from launcher.execute.ssh import SshConnector  # noqa: E402
from launcher.execute.transport import Transport  # noqa: E402
from launcher.model import Host  # noqa: E402

T_IMPORTS = time.time()

JOB = Path(__file__).resolve().parent / "job"
UNIT_DIR = "/srv/fleet-bench/unit"
DEPLOY_DIR = "/srv/fleet-bench"
DEPLOYMENT = "fleet-bench"
# The same status one-liner the ansible playbook and the pyinfra deploy run.
STATUS = 'p=$(cat /run/fleet-bench/unit.pid) && kill -0 "$p" && echo "running $p"'
STOP = 'p=$(cat /run/fleet-bench/unit.pid 2>/dev/null) && kill "$p" 2>/dev/null; true'
STEP_TIMEOUT = 60.0


class Trace:
    """Per-host step timings (seconds since T_TOP), filled by the worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.hosts: dict[str, list[tuple[str, float, float]]] = {}

    def step(self, host: str, name: str, t0: float) -> None:
        t1 = time.time()
        with self._lock:
            self.hosts.setdefault(host, []).append((name, round(t0 - T_TOP, 4), round(t1 - T_TOP, 4)))


class TimedConnector:
    """``SshConnector`` with the connect phase (TCP + key exchange + auth) timed per host."""

    def __init__(self, inner: SshConnector, trace: Trace) -> None:
        self.inner = inner
        self.trace = trace

    def connect(self, host: Host) -> Transport:
        t0 = time.time()
        transport = self.inner.connect(host)
        self.trace.step(host.name, "connect", t0)
        return transport

    def close(self) -> None:
        self.inner.close()


def job(files: dict[str, tuple[bytes, int]], trace: Trace):  # type: ignore[no-untyped-def]
    def fn(host: Host, t: Transport) -> str:
        for name, (data, mode) in files.items():
            t0 = time.time()
            t.put(f"{UNIT_DIR}/{name}", data, mode)
            trace.step(host.name, f"put {name}", t0)
        t0 = time.time()
        check(t, ("sh", f"{UNIT_DIR}/run.sh"), timeout=STEP_TIMEOUT)
        trace.step(host.name, "start", t0)
        t0 = time.time()
        out = check(t, sh(STATUS), timeout=STEP_TIMEOUT)
        trace.step(host.name, "status", t0)
        return out.strip()

    return fn


def up_steps(files: dict[str, tuple[bytes, int]], trace: Trace):  # type: ignore[no-untyped-def]
    owner = lock.owner_line()

    def fn(host: Host, t: Transport) -> str:
        def step(name: str, action):  # type: ignore[no-untyped-def]
            t0 = time.time()
            value = action()
            trace.step(host.name, name, t0)
            return value

        step("lock", lambda: lock.acquire(t, DEPLOYMENT, owner))
        try:
            step("survey manifests", lambda: check(t, read_manifests_argv(DEPLOY_DIR), timeout=STEP_TIMEOUT))
            step("survey liveness", lambda: t.run(sh(STATUS), timeout=STEP_TIMEOUT))
            step("stop", lambda: check(t, sh(STOP), timeout=STEP_TIMEOUT))
            for name, (data, mode) in files.items():
                step(f"put {name}", lambda d=data, m=mode, n=name: t.put(f"{UNIT_DIR}/{n}", d, m))
            manifest = json.dumps({"deployment": DEPLOYMENT, "unit": "unit", "host": host.name,
                                   "files": sorted(f"{UNIT_DIR}/{n}" for n in files)}).encode()  # fmt: skip
            step("put manifest.json", lambda: t.put(f"{UNIT_DIR}/manifest.json", manifest, 0o644))
            step("start", lambda: check(t, ("sh", f"{UNIT_DIR}/run.sh"), timeout=STEP_TIMEOUT))
            out: str = step("liveness", lambda: check(t, sh(STATUS), timeout=STEP_TIMEOUT))
        finally:
            step("unlock", lambda: lock.release(t, DEPLOYMENT, owner))
        return out.strip()

    return fn


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("-i", "--inventory", required=True)
    ap.add_argument("--known-hosts", required=True)
    ap.add_argument("--forks", type=int, default=8, help="hosts at a time (fleet up's default: 8)")
    ap.add_argument("--steps", choices=("job", "up"), default="job")
    ap.add_argument("--trace", type=Path, default=None, help="write phase timings here (JSON)")
    args = ap.parse_args(argv)

    inventory = load_inventory(args.inventory)
    hosts = inventory.hosts
    files = {
        "run.sh": ((JOB / "run.sh").read_bytes(), 0o755),
        "env": ((JOB / "env").read_bytes(), 0o600),
    }
    known = KnownHosts.for_operator((args.known_hosts,))
    t_inventory = time.time()
    trace = Trace()
    fn = job(files, trace) if args.steps == "job" else up_steps(files, trace)
    connector = TimedConnector(SshConnector(known), trace)
    try:
        result = run_all(hosts, fn, connector=connector, forks=args.forks)
        t_fanout = time.time()
    finally:
        connector.close()
    t_closed = time.time()

    bad = []
    for o in result.outcomes:
        if not (isinstance(o, Ok) and str(o.value).startswith("running")):
            bad.append(f"{o.host.name}: {getattr(o, 'message', None) or getattr(o, 'reason', None) or o}")
    print(f"fleet: {len(hosts)} hosts, {len(hosts) - len(bad)} running, {len(bad)} failed")
    for line in bad:
        print(line, file=sys.stderr)
    if args.trace is not None:
        args.trace.write_text(json.dumps({
            "t_top": T_TOP,
            "imports_s": round(T_IMPORTS - T_TOP, 4),
            "inventory_s": round(t_inventory - T_IMPORTS, 4),
            "fanout_s": round(t_fanout - t_inventory, 4),
            "close_s": round(t_closed - t_fanout, 4),
            "fanout_start": round(t_inventory - T_TOP, 4),
            "forks": args.forks,
            "steps": args.steps,
            "hosts": trace.hosts,
        }, indent=1))  # fmt: skip
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
