"""The fleet side of the fan-out benchmark: one process, like ``ansible-playbook`` or ``pyinfra``.

    python3 bench/fleet_job.py -i INVENTORY --known-hosts FILE [--forks 8] [--steps job|up]

It drives the hosts through fleet's own execution layer (``launcher.execute``: ``SshConnector``
with strict host keys, ``run_all`` on a bounded pool, one reused connection per host) with the
same remote operations ``fleet up`` uses to install and start a unit:

* ``--steps job`` (the job every tool does): upload the unit's two files in one exec
  (``launcher.execute.files``: atomic writes, parents created, modes set), then start it and read
  its status back in one more.  2 round trips.
* ``--steps up``: the whole remote step sequence ``fleet up`` runs for one new unit, with the
  same builders and batching (``launcher.deploy.lock``, ``steps.read_manifests_argv``): lock +
  manifests + liveness, stop + files + manifest, start, liveness, unlock.  5 round trips.

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
from launcher.remote import check, failure, sh  # noqa: E402
from launcher.deploy.steps import read_manifests_argv  # noqa: E402
from launcher.execute.fanout import DEFAULT_FORKS, Ok, run_all  # noqa: E402
from launcher.execute.files import Put, Step, run_batch, write_files  # noqa: E402
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
    """Install both files in one exec (``launcher.execute.files``, what ``fleet up`` installs
    with), then start and read the status back in one more (how ``fleet up`` batches a host's
    start commands): 2 round trips."""
    puts = [Put(path=f"{UNIT_DIR}/{name}", data=data, mode=mode) for name, (data, mode) in files.items()]

    def fn(host: Host, t: Transport) -> str:
        t0 = time.time()
        write_files(t, puts, timeout=STEP_TIMEOUT)
        trace.step(host.name, "install", t0)
        t0 = time.time()
        start, status = run_batch(t, [Step(argv=("sh", f"{UNIT_DIR}/run.sh"), label="start"),
                                      Step(argv=sh(STATUS), label="status")], timeout=STEP_TIMEOUT)  # fmt: skip
        trace.step(host.name, "start+status", t0)
        if not start.ok:
            raise failure(start, "start")
        return status.stdout_text.strip()

    return fn


def up_steps(files: dict[str, tuple[bytes, int]], trace: Trace):  # type: ignore[no-untyped-def]
    """The remote sequence ``fleet up`` runs for one new unit, with its builders and batching:
    lock + manifests + liveness (1), stop + install files + manifest (2), start (3), liveness
    (4, the health gate's first look), unlock (5)."""
    owner = lock.owner_line()
    puts = [Put(path=f"{UNIT_DIR}/{name}", data=data, mode=mode) for name, (data, mode) in files.items()]

    def fn(host: Host, t: Transport) -> str:
        def step(name: str, action):  # type: ignore[no-untyped-def]
            t0 = time.time()
            value = action()
            trace.step(host.name, name, t0)
            return value

        survey = [Step(argv=lock.acquire_argv(DEPLOYMENT, owner), label="lock"),
                  Step(argv=read_manifests_argv(DEPLOY_DIR), label="manifests"),
                  Step(argv=sh(STATUS), label="liveness")]  # fmt: skip
        results = step("lock+survey", lambda: run_batch(t, survey, timeout=STEP_TIMEOUT))
        if not results[0].ok:
            raise failure(results[0], "lock")
        try:
            manifest = json.dumps({"deployment": DEPLOYMENT, "unit": "unit", "host": host.name,
                                   "files": sorted(p.path for p in puts)}).encode()  # fmt: skip
            install = [*puts, Put(path=f"{UNIT_DIR}/manifest.json", data=manifest, mode=0o644)]
            step("stop+install", lambda: write_files(t, install, steps=[Step(argv=sh(STOP), label="stop")],
                                                     timeout=STEP_TIMEOUT))  # fmt: skip
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
    ap.add_argument("--forks", type=int, default=DEFAULT_FORKS, help=f"hosts at a time (fleet's default: {DEFAULT_FORKS})")
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
