"""A simulated host for orchestration tests: files, containers and locks in memory, driven by
the deploy layer's own fixed scripts (recognised by identity, so a changed script shows up as an
unknown command and fails the test).

``fail_start``: unit names whose container exits (code 4) right after starting (``fail_args``: whose
run.sh holds one of these strings); ``fail_stop``:
units whose stop fails while they exist; ``unhealthy``:
units whose health endpoint never answers; ``missing_images``: images not present locally.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

from launcher.runtimes import container, docker
from launcher.deploy import lock, steps, wait
from launcher.execute import files
from launcher.execute.command import Command
from launcher.execute.transport import Result, check_put_args
from launcher import hosthttp
from launcher.rolling import restore

if TYPE_CHECKING:
    import pytest


@dataclass
class Container:
    state: str = "running"
    exit_code: int = 0
    restarts: int = 0
    starts: int = 1
    logs: list[str] = field(default_factory=list)


class SimHost:
    def __init__(self, name: str) -> None:
        self.name = name
        self.files: dict[str, tuple[bytes, int]] = {}
        self.containers: dict[str, Container] = {}
        self.images: set[str] = set()
        self.missing_images: set[str] = set()
        self.fail_start: set[str] = set()
        self.fail_args: set[str] = set()  # a start whose run.sh holds one of these exits (code 4)
        self.fail_stop: set[str] = set()  # units whose stop fails (the daemon refuses)
        self.unhealthy: set[str] = set()
        self.health_urls: dict[str, str] = {}  # url -> container that serves it
        self.start_counts: dict[str, int] = {}
        self.log: list[tuple[str, ...]] = []
        self.writes = 0
        self.closed = False
        self.held: set[str] = set()  # containers whose restart policy was set to "no"
        self.journal: list[tuple[str, str, str]] = []  # (what, host, unit); may be shared by a fleet
        self.events: list[tuple[str, str, str]] = []  # stops, starts, health waits: (what, host, unit); ditto
        self.trips = 0  # round trips: every run and put (the steps inside a batch are one)
        self.stdin = b""  # of the last run (a batch's file bytes)

    # Transport ----------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return self.name

    def close(self) -> None:
        self.closed = True

    def get(self, path: str) -> bytes:
        return self.files[path][0]

    def put(self, path: str, data: bytes, mode: int) -> None:
        self.trips += 1
        self._write(path, data, mode)

    def _write(self, path: str, data: bytes, mode: int) -> None:
        check_put_args(path, mode)
        self.writes += 1
        self.log.append(("put", path, f"{mode:04o}"))
        self.files[path] = (data, mode)

    def run(
        self,
        argv: Sequence[str] | Command,
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = False,
    ) -> Result:
        self.trips += 1
        self.stdin = stdin or b""
        args = tuple(Command.of(argv).reveal())
        self.log.append(args)
        code, out, err = self._dispatch(args)
        return Result(host=self.name, command=" ".join(args), exit_status=code, stdout=out.encode(), stderr=err.encode())

    # Behaviour ----------------------------------------------------------------------------
    def _dispatch(self, a: tuple[str, ...]) -> tuple[int, str, str]:
        if a[:2] == ("sh", "-c"):
            script, params = a[2], a[4:]
            handler = _SCRIPTS.get(script)
            if handler is None:
                raise AssertionError(f"unknown script: {script[:60]}")
            return handler(self, params)
        if a[0] == "sh" and len(a) == 2 and a[1].endswith("/run.sh"):
            return self._start(a[1])
        raise AssertionError(f"unknown command: {a}")

    def _start(self, script: str) -> tuple[int, str, str]:
        if script not in self.files:
            return 127, "", f"sh: {script}: not found"
        text = self.files[script][0].decode()
        name = re.search(r"--name (\S+)", text)
        assert name is not None
        unit = name.group(1)
        self.start_counts[unit] = self.start_counts.get(unit, 0) + 1
        self.events.append(("start", self.name, unit))
        c = Container(starts=self.start_counts[unit])
        if unit in self.fail_start or any(a in text for a in self.fail_args):
            c.state, c.exit_code = "exited", 4
            c.logs = ["loading weights", "FATAL: rendezvous with rank 0 failed"]
        self.containers[unit] = c
        return 0, "0123abcd\n", ""

    def lock_acquire(self, p: Sequence[str]) -> tuple[int, str, str]:
        d, owner = p[1], p[2]
        if any(k == d + "/owner" for k in self.files):
            return 75, self.files[d + "/owner"][0].decode(), ""
        self.files[d + "/owner"] = (owner.encode() + b"\n", 0o644)
        return 0, "", ""

    def lock_release(self, p: Sequence[str]) -> tuple[int, str, str]:
        d, owner = p[0], p[1]
        held = self.files.get(d + "/owner")
        if held is not None and held[0].decode().strip() == owner:
            del self.files[d + "/owner"]
        return 0, "", ""

    def lock_break(self, p: Sequence[str]) -> tuple[int, str, str]:
        held = self.files.pop(p[0] + "/owner", None)
        return 0, held[0].decode() if held else "", ""

    def serial(self, p: Sequence[str]) -> tuple[int, str, str]:
        """``lock.serial_argv``: the command, logged as itself, if the lock is still the
        caller's and its start step is not fenced off (the simulated host runs one command at a
        time, so the flock itself has nothing to order)."""
        d, owner, step, argv = p[0], p[1], p[2], tuple(p[4:])
        held = self.files.get(d + "/owner")
        if held is None or held[0].decode().strip() != owner:
            return 75, "", f"not started: this run no longer holds the deploy lock {d}\n"
        fence = self.files.get(d + "/fence")
        if fence is not None and fence[0].decode().strip() == step:
            return 75, "", "not started: its start step was cancelled\n"
        self.log.append(argv)
        return self._dispatch(argv)

    def fence(self, p: Sequence[str]) -> tuple[int, str, str]:
        d, step = p[0], p[1]
        self.journal.append(("fence", self.name, step))
        if d + "/owner" in self.files:
            self.files[d + "/fence"] = (step.encode() + b"\n", 0o644)
        return 0, "", ""

    def read_prev(self, p: Sequence[str]) -> tuple[int, str, str]:
        kept = self.files.get(p[0] + "/prev/manifest.json")
        return 0, kept[0].decode() if kept else "", ""

    def swap(self, p: Sequence[str]) -> tuple[int, str, str]:
        """``restore._SWAP``: the files kept in prev/ become current, the current ones go there."""
        d, n = p[0], int(p[1])
        current, previous = list(p[2:2 + n]), list(p[2 + n:])
        if d + "/prev/manifest.json" not in self.files:
            return 3, "", f"no previous generation kept in {d}/prev\n"
        nxt = {d + "/prev" + f: self.files[f] for f in current if f in self.files}
        for f in previous:
            if d + "/prev" + f in self.files:
                self.files[f] = self.files[d + "/prev" + f]
        if d + "/manifest.json" in self.files:
            nxt[d + "/prev/manifest.json"] = self.files[d + "/manifest.json"]
        self.files[d + "/manifest.json"] = self.files[d + "/prev/manifest.json"]
        for f in current:
            if f not in previous:
                self.files.pop(f, None)
        for k in [k for k in self.files if k.startswith(d + "/prev/")]:
            del self.files[k]
        self.files.update(nxt)
        return 0, "", ""

    def read_manifests(self, p: Sequence[str]) -> tuple[int, str, str]:
        paths = sorted(k for k in self.files if fnmatch.fnmatch(k, p[0] + "/*/manifest.json") and k.count("/") == p[0].count("/") + 2)
        return 0, "".join("\n" + self.files[k][0].decode() for k in paths), ""

    def liveness(self, p: Sequence[str]) -> tuple[int, str, str]:
        lines = []
        for n in p[1:]:
            c = self.containers.get(n)
            if c is None:
                lines.append(f"Error: No such container: {n}")
            else:
                lines.append(f"/{n}|{c.state}|{c.exit_code}|{c.restarts}")
        return 0, "\n".join(lines) + "\n", ""

    def probe(self, p: Sequence[str]) -> tuple[int, str, str]:
        unit = self.health_urls.get(p[0])
        c = self.containers.get(unit or "")
        if c is None or c.state != "running" or unit in self.unhealthy:
            return 7, "", f"curl: (7) Failed to connect to {p[0]}"
        return 0, "", ""

    def wait(self, p: Sequence[str]) -> tuple[int, str, str]:
        """The health gate's remote wait, answered at once with what is true now (docker units
        only; the gate pads rounds that come back this fast)."""
        triples = [p[i:i + 3] for i in range(4, len(p), 3)]
        self.events += [("wait", self.name, name) for _, name, _ in triples]
        _, inspect, _ = self.liveness(("fmt", *(name for _, name, _ in triples)))
        probes = "".join(f"{wait.MARK}probe {i} {int(self.probe((url,))[0] == 0)}\n"
                         for i, (_, _, url) in enumerate(triples) if url)
        return 0, f"{wait.MARK}docker\n{inspect}{wait.MARK}systemd\n\n{probes}{wait.MARK}end\n", ""

    def pull(self, p: Sequence[str]) -> tuple[int, str, str]:
        if p[0] in self.images:
            return 0, "present\n", ""
        if p[0] in self.missing_images:
            return 1, "", f"Error response from daemon: manifest for {p[0]} not found"
        self.images.add(p[0])
        return 0, "pulled\n", ""

    def stop(self, p: Sequence[str]) -> tuple[int, str, str]:
        self.journal.append(("stop", self.name, p[0]))
        self.events.append(("stop", self.name, p[0]))
        if p[0] in self.fail_stop and p[0] in self.containers:
            return 1, "", f"Error response from daemon: cannot remove container {p[0]}: device or resource busy\n"
        self.containers.pop(p[0], None)
        return 0, "", ""

    def hold(self, p: Sequence[str]) -> tuple[int, str, str]:
        for n in p:
            self.journal.append(("hold", self.name, n))
            if n in self.containers:
                self.held.add(n)
        return 0, "", ""

    def rotate(self, p: Sequence[str]) -> tuple[int, str, str]:
        d, old = p[0], p[1:]
        for k in [k for k in self.files if k.startswith(d + "/prev/")]:
            del self.files[k]
        for f in old:
            if f in self.files:
                self.files[d + "/prev" + f] = self.files[f]
        if d + "/manifest.json" in self.files:
            self.files[d + "/prev/manifest.json"] = self.files.pop(d + "/manifest.json")
        return 0, "", ""

    def remove(self, p: Sequence[str]) -> tuple[int, str, str]:
        for f in p:
            self.files.pop(f, None)
        return 0, "", ""

    def hashes(self, p: Sequence[str]) -> tuple[int, str, str]:
        out = []
        for f in p:
            out.append(f"{hashlib.sha256(self.files[f][0]).hexdigest()}  {f}" if f in self.files else f"- {f}")
        return 0, "\n".join(out) + "\n", ""

    def read(self, p: Sequence[str]) -> tuple[int, str, str]:
        import base64

        out = []
        for f in p:
            out.append(f"{base64.b64encode(self.files[f][0]).decode()} {f}" if f in self.files else f"- {f}")
        return 0, "\n".join(out) + "\n", ""

    def logs(self, p: Sequence[str]) -> tuple[int, str, str]:
        c = self.containers.get(p[-1])
        if c is None:
            return 1, f"Error: No such container: {p[-1]}\n", ""
        return 0, "".join(f"2026-01-01T00:00:0{i}.000000000Z {line}\n" for i, line in enumerate(c.logs)), ""

    def failure_logs(self, p: Sequence[str]) -> tuple[int, str, str]:
        """``failure_logs_argv``: the current run's start, then the log (params: name, lines)."""
        c = self.containers.get(p[0])
        if c is None:
            return 0, f"Error: No such container: {p[0]}\n" * 2, ""
        return 0, "2026-01-01T00:00:00.5Z\n" + self.logs(p[:1])[1], ""

    def manifest(self, unit_dir: str) -> dict[str, object] | None:
        raw = self.files.get(unit_dir + "/manifest.json")
        return None if raw is None else dict(json.loads(raw[0]))


    # Batched operations (launcher/execute/files.py): one exec running several of the scripts
    # below, then removals, then file writes whose bytes come on stdin; the steps inside a
    # batch are logged like separate runs.
    def batch(self, p: Sequence[str]) -> tuple[int, str, str]:
        b, n, rest = p[0], int(p[1]), list(p[2:])
        out, err = "", ""
        for s in range(1, n + 1):
            k = int(rest[0])
            argv, rest = tuple(rest[1:1 + k]), rest[1 + k:]
            self.log.append(argv)
            code, o, e = self._dispatch(argv)
            out += f"{o}\n{b} step {s} {code}\n"
            err += f"{e}\n{b} step {s}\n"
            if code:
                return code, out, err
        m = int(rest[0])
        for i, path in enumerate(rest[1:1 + m], start=1):
            out += f"\n{b} rm {i}\n"
            self.files.pop(path, None)
        rest, data = rest[1 + m:], self.stdin
        for i in range(0, len(rest), 3):
            path, mode, length = rest[i], int(rest[i + 1], 8), int(rest[i + 2])
            out += f"\n{b} put {i // 3 + 1}\n"
            self._write(path, data[:length], mode)
            data = data[length:]
        return 0, out + f"\n{b} done\n", err

    def images_present(self, p: Sequence[str]) -> tuple[int, str, str]:
        return 0, "".join(f"{'present' if i in self.images else 'absent'} {i}\n" for i in p), ""

    def http(self, p: Sequence[str]) -> tuple[int, str, str]:
        """HTTP sent from the host (rolling's drain asks the engine for in-flight requests): the
        simulated engines have no load counter, so every URL answers 404, as an engine without
        /get_load does."""
        return 0, "not found\n404", ""


_SCRIPTS = {
    lock._ACQUIRE: SimHost.lock_acquire,
    lock._RELEASE: SimHost.lock_release,
    lock._BREAK: SimHost.lock_break,
    lock._SERIAL: SimHost.serial,
    lock._FENCE: SimHost.fence,
    steps._READ_MANIFESTS: SimHost.read_manifests,
    docker._INSPECT: SimHost.liveness,
    steps._PROBE: SimHost.probe,
    wait._WAIT: SimHost.wait,
    container._PULL: SimHost.pull,
    docker._REMOVE: SimHost.stop,
    docker._HOLD: SimHost.hold,
    steps._ROTATE: SimHost.rotate,
    steps._REMOVE: SimHost.remove,
    steps._HASHES: SimHost.hashes,
    steps._READ: SimHost.read,
    docker._LOGS: SimHost.logs,
    docker._FAILED_RUN_LOGS: SimHost.failure_logs,
    files._SCRIPT: SimHost.batch,
    container._IMAGES: SimHost.images_present,
    hosthttp._REQUEST: SimHost.http,
    restore._READ_PREV: SimHost.read_prev,
    restore._SWAP: SimHost.swap,
}


def interrupt_first_release(monkeypatch: "pytest.MonkeyPatch", interrupts: list[float], host: str = "h2", *,
                            abandoned: bool = False) -> None:
    """``host``'s first lock release (of any lock) sends a SIGINT, taken by the main thread (the
    ``interrupts`` fixture), then finishes -- unless its connection was closed meanwhile (it then
    fails, as SSH does).  It finishes half a second after the SIGINT was taken; with
    ``abandoned`` (the interrupt is one that abandons the release) only once its connection is
    closed, or after :data:`ABANDON_BOUND_S` (a bound on a failure: a release that is waited for
    instead of abandoned then finishes, and the lock it leaves released fails the test), so a
    main thread slow to close the connections on a loaded machine cannot let it finish first."""
    import threading
    import time

    from tests.conftest import sigint_taken

    plain = SimHost.lock_release
    first = threading.Lock()  # released never: only the first release of host takes it

    def release(self: SimHost, p: Sequence[str]) -> tuple[int, str, str]:
        if self.name == host and first.acquire(blocking=False):
            time.sleep(0.2)  # the main thread is waiting on the release by now
            sigint_taken(interrupts)
            if abandoned:
                deadline = time.monotonic() + ABANDON_BOUND_S
                while not self.closed and time.monotonic() < deadline:
                    time.sleep(0.01)
            else:
                time.sleep(0.5)
            if self.closed:
                return 255, "", "connection closed"
        return plain(self, p)

    monkeypatch.setitem(_SCRIPTS, lock._RELEASE, release)


ABANDON_BOUND_S = 60.0  # interrupt_first_release(abandoned=True): how long a release waits for its closed connection
