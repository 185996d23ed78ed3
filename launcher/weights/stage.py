"""``fleet weights stage`` and ``verify`` over SSH: scan, compare, refuse, spread, record.

Staging, in this order (nothing moves before step 3 passed on every host):
1. the source is scanned and hashed once (a manifest already in the source dir lends the hashes
   of files whose size and mtime it records);
2. every host is scanned (``full``: hashed, on all hosts in parallel) and compared with the
   source manifest: intact files make the host a holder of them, the rest are what it lacks;
3. free space is checked against what each host lacks (refusal names host, path, need, have);
4. the run's host-to-host keys are installed (:mod:`launcher.weights.auth`), each changing
   copy loses its manifest, files the source does not have are removed;
5. files are spread (:mod:`launcher.weights.spread`): rsync over SSH, pushed by the control host
   when the source is a directory here, else pulled by the receiving host from a holder;
6. each host is scanned again and, when it matches, gets its manifest (written last);
7. keys and run dirs are removed from every host touched (also after errors and Ctrl-C).

A re-run finds every intact file and transfers only the others; rsync's delta transfer then
sends only the changed blocks of a file that is present but different.
"""

from __future__ import annotations

import concurrent.futures as cf
import ipaddress
import json
import os
import posixpath
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Literal, Mapping, Protocol, Sequence

from launcher import hostscripts, stephook
from launcher.errors import FleetError, RemoteError, UnreachableError, UsageError
from launcher.deploy.lock import holder_state, owner_line
from launcher.execute.fanout import DEFAULT_FORKS, run_all
from launcher.execute.local import LocalTransport
from launcher.execute.ssh import Endpoint, SshConnector
from launcher.execute.transport import CommandTimeout, Transport
from launcher.model import Host, Inventory
from launcher.weights import auth, disk
from launcher.weights.manifest import (
    MANIFEST_NAME, SKIP, VIEW_PREFIX, Listing, Manifest, Mismatch, compare, for_host, from_listing, parse_scan, to_json,
)  # fmt: skip
from launcher.weights.needs import ModelNeed
from launcher.weights.spread import SLOTS, SOURCE, Blame, Spread, Transfer, chunk_bytes

SCAN_TIMEOUT_S = 6 * 3600.0  # hashing hundreds of GB
TRANSFER_TIMEOUT_S = 24 * 3600.0  # one batch; rsync's own --timeout catches a stalled link
RSYNC_IO_TIMEOUT_S = 120
PARTIAL_DIR = ".fleet-partial"  # resumable: an interrupted file's data is kept here


class WeightsRefused(FleetError):
    """Not enough disk on some host: nothing was transferred."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    kind: Literal["dir", "host"]
    root: str  # holds each model at its relative name
    host: str = ""  # kind "host": the inventory host holding it
    dirs: tuple[tuple[str, str], ...] = ()  # (model, its dir), where it is not <root>/<rel>

    def dir_of(self, need: ModelNeed) -> str:
        return dict(self.dirs).get(need.model) or posixpath.join(self.root, need.rel)


def parse_source(text: str, inventory: Inventory) -> Source:
    """``DIR`` (on the control host) or ``HOST:PATH`` (HOST in the inventory)."""
    name, sep, path = text.partition(":")
    if sep and not name.startswith("/") and not name.startswith("."):
        if name not in {h.name for h in inventory.hosts}:
            raise UsageError(f"--source {text}: no host {name!r} in the inventory")
        if not path.startswith("/"):
            raise UsageError(f"--source {text}: the path on {name} must be absolute")
        return Source(kind="host", root=path, host=name)
    if not os.path.isdir(text):
        raise UsageError(f"--source {text}: no such directory on this host")
    return Source(kind="dir", root=os.path.abspath(text))


class Progress(Protocol):
    def begin(self, host: str, total: int) -> None: ...

    def advance(self, host: str, done: int) -> None: ...

    def end(self, host: str, ok: bool) -> None: ...


class Quiet:
    def begin(self, host: str, total: int) -> None:
        pass

    def advance(self, host: str, done: int) -> None:
        pass

    def end(self, host: str, ok: bool) -> None:
        pass


@dataclass(frozen=True, slots=True, kw_only=True)
class HostResult:
    host: str
    status: Literal["ok", "failed", "unreachable"]
    files: int = 0  # files transferred to it
    bytes: int = 0  # bytes rsync moved to it (deltas, not file sizes)
    mismatches: tuple[tuple[str, Mismatch], ...] = ()  # (model dir, mismatch): what verify found / stage fixed
    senders: tuple[tuple[str, int], ...] = ()  # (host it got files from, or "source"; files), by name
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    models: tuple[Manifest, ...]
    hosts: tuple[HostResult, ...]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(h.status == "ok" for h in self.hosts)


# ---------------------------------------------------------------------------------------------
# Scans
# ---------------------------------------------------------------------------------------------


def scan_argv(dirs: Sequence[str], *, hash_files: bool, reuse: bool = False,
              hash_only: Sequence[str] | None = None) -> tuple[str, ...]:  # fmt: skip
    script = hostscripts.text("weights-scan.py")
    opts = {"dirs": list(dirs), "hash": hash_files, "reuse": reuse, "manifest": MANIFEST_NAME, "skip": list(SKIP),
            "skip_prefix": [VIEW_PREFIX], "hash_only": None if hash_only is None else list(hash_only)}
    return ("python3", "-c", script, json.dumps(opts))


def scan(t: Transport, dirs: Sequence[str], *, hash_files: bool, reuse: bool = False,
         hash_only: Sequence[str] | None = None) -> dict[str, Listing]:
    """Each dir's :class:`Listing` on the host behind ``t`` (``hash_only``: the relative paths
    to hash in every dir, default all when ``hash_files``)."""
    r = t.run(scan_argv(dirs, hash_files=hash_files, reuse=reuse, hash_only=hash_only), timeout=SCAN_TIMEOUT_S,
              check=True)  # fmt: skip
    try:
        raw = json.loads(r.stdout)
        return {d: parse_scan(raw[d]) for d in dirs}
    except (ValueError, KeyError, TypeError) as err:
        raise RemoteError(t.host, "weights scan", r.exit_status, f"unreadable scan output: {err}") from None


def source_manifests(needs: Sequence[ModelNeed], source: Source, connector: SshConnector,
                     inventory: Inventory, revision: str | None, *, full: bool = False) -> tuple[Manifest, ...]:
    """The expected manifest of each model, from one hashed scan of the source."""
    return tuple(m for m, _ in _source_scan(needs, source, connector, inventory, revision, full=full))


def _source_scan(needs: Sequence[ModelNeed], source: Source, connector: SshConnector, inventory: Inventory,
                 revision: str | None, *, full: bool) -> list[tuple[Manifest, tuple[str, ...]]]:
    """Per model: its manifest and the files the source reaches through a symlink.

    Hashes: a ``fleet-weights.json`` in a source dir lends the sha256 of a file only while the
    file has the size, mtime and stamp (inode and ctime, which no user-space call sets back) it
    had when hashed; ``full`` hashes every byte.  A file that was hashed again and differs from
    what the source's own manifest records for the same size and mtime was changed in place
    without a new mtime -- corruption, not a new revision: refused, so it never spreads under a
    hash that now "matches"."""
    t: Transport = LocalTransport() if source.kind == "dir" else connector.connect(inventory.host(source.host))
    where = "" if source.kind == "dir" else f"{source.host}:"
    dirs = [source.dir_of(n) for n in needs]
    listings = scan(t, dirs, hash_files=True, reuse=not full)
    out = []
    for n, d in zip(needs, dirs):
        listing = listings[d]
        if not listing.exists or not listing.files:
            raise UsageError(f"source {where}{d}: {'no such directory' if not listing.exists else 'no files'} "
                             f"(the source holds {n.model} at <source>/{n.rel})")
        if listing.broken:
            raise UsageError(f"source {where}{d}: {', '.join(listing.broken[:3])}"
                             f"{f' (+{len(listing.broken) - 3})' if len(listing.broken) > 3 else ''}: "
                             "a symlink that leads nowhere")
        own = listing.manifest
        assert listing.sha256 is not None
        changed = sorted(f.path for f in (own.files if own is not None else ())
                         if listing.files.get(f.path) == (f.size, f.mtime) and listing.sha256.get(f.path) != f.sha256)
        if changed:
            raise FleetError(f"source {where}{d}: {', '.join(changed[:3])}{f' (+{len(changed) - 3})' if len(changed) > 3 else ''}: "
                             f"content differs from its {MANIFEST_NAME} under the same size and mtime (changed in "
                             "place: corrupted?); nothing was transferred -- restore the file, or remove the manifest "
                             "if the change is meant")
        rev = revision or (own.revision if own is not None and own.same_content(
            from_listing(n.model, own.revision, listing)) else None)
        out.append((from_listing(n.model, rev, listing), listing.links))
    return out


def _reference(manifests: Sequence[Manifest]) -> Manifest | None:
    """The content most hosts have (ties: the first host's), for a verify without a source."""
    if not manifests:
        return None
    counts = Counter(m.content_key() for m in manifests)
    best = max(counts.values())
    return next(m for m in manifests if counts[m.content_key()] == best)


# ---------------------------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------------------------


def _host_scans(hosts: Sequence[Host], dirs: Mapping[str, list[str]], connector: SshConnector, *, full: bool,
                forks: int) -> tuple[dict[str, dict[str, Listing]], dict[str, HostResult]]:
    result = run_all(hosts, lambda h, t: scan(t, dirs[h.name], hash_files=full), connector=connector, forks=forks)
    failed = {o.host.name: HostResult(host=o.host.name, status="unreachable", error=o.reason) for o in result.unreachable}
    failed.update({o.host.name: HostResult(host=o.host.name, status="failed", error=o.message) for o in result.failed})
    return result.values(), failed


def hosts_of(inventory: Inventory, needs: Sequence[ModelNeed]) -> tuple[list[Host], dict[str, list[str]]]:
    dirs: dict[str, list[str]] = {}
    for n in needs:
        for host, path in n.paths:
            dirs.setdefault(host, []).append(path)
    return [h for h in inventory.hosts if h.name in dirs], dirs


def verify(inventory: Inventory, needs: Sequence[ModelNeed], connector: SshConnector, *,
           expected: Sequence[Manifest] | None = None, full: bool = False, forks: int = DEFAULT_FORKS) -> Report:
    """Every host's copy of every model against ``expected`` (default: the manifest most hosts
    have).  A host without a manifest, with another revision or content, or with any file
    differing is ``failed`` with each mismatch named."""
    hosts, dirs = hosts_of(inventory, needs)
    scans, bad = _host_scans(hosts, dirs, connector, full=full, forks=forks)
    refs: list[Manifest] = []
    per_host: dict[str, list[tuple[str, Mismatch]]] = {h: [] for h in scans}
    for i, n in enumerate(needs):
        have = [(h, scans[h][p]) for h, p in n.paths if h in scans]
        ref = expected[i] if expected is not None else _reference([lst.manifest for _, lst in have if lst.manifest])
        if ref is None:
            for h, lst in have:
                per_host[h].append((dict(n.paths)[h], Mismatch(path=MANIFEST_NAME, problem="missing",
                                                               detail="no host has a staged copy")))
            continue
        refs.append(ref)
        for h, lst in have:
            path = dict(n.paths)[h]
            if lst.manifest is None:
                why = lst.manifest_error or "not staged, or staging did not finish"
                per_host[h].append((path, Mismatch(path=MANIFEST_NAME, problem="missing", detail=why)))
            elif not lst.manifest.same_content(ref):
                per_host[h].append((path, Mismatch(path=MANIFEST_NAME, problem="modified",
                                                   detail=f"revision {lst.manifest.revision}, expected {ref.revision}")))
            per_host[h].extend((path, m) for m in compare(ref, lst))
    out = [bad.get(h.name) or HostResult(host=h.name, status="failed" if per_host[h.name] else "ok",
                                         mismatches=tuple(per_host[h.name])) for h in hosts]  # fmt: skip
    return Report(models=tuple(refs), hosts=tuple(out))


# ---------------------------------------------------------------------------------------------
# stage
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class _Job:
    """One host's part of the run (mutable bookkeeping of the executor, never returned)."""

    host: Host
    total: int = 0
    done: int = 0
    files: int = 0
    bytes: int = 0
    error: str = ""
    fixed: list[tuple[str, Mismatch]] = field(default_factory=list)
    senders: Counter[str] = field(default_factory=Counter)


_STATS = {"pull": re.compile(r"Total bytes received: ([\d,.]+)"), "push": re.compile(r"Total bytes sent: ([\d,.]+)")}


def _moved(text: str, way: str) -> int:
    m = _STATS[way].search(text)
    return int(re.sub(r"[,.]", "", m.group(1))) if m else 0


def view_argv(src: str, view: str) -> tuple[str, ...]:
    """Makes ``view``: the files (JSON list on stdin) of ``src`` as regular files (hard links)."""
    return ("python3", "-c", hostscripts.text("weights-view.py"), src, view)


def _rsync_argv(ssh: str, src_dir: str, dst_dir: str, *, follow: bool = False) -> tuple[str, ...]:
    """One batch: the files named NUL-separated on stdin, relative to both dirs.  ``follow``
    (a push from this host's source dir): a symlink is sent as the file it leads to."""
    # -I: the scan already decided these files differ; rsync's own quick check (size + mtime)
    # would skip a same-size file corrupted under an unchanged mtime.
    return ("rsync", "-a", *(("-L",) if follow else ()), "-I", "--stats", f"--partial-dir={PARTIAL_DIR}", "--from0",
            "--files-from=-", f"--timeout={RSYNC_IO_TIMEOUT_S}", "-e", ssh, src_dir, dst_dir)  # fmt: skip


# rsync's exit codes that say the receiving side itself failed: syntax or usage, selecting its
# output files, its own file I/O.  Every other failure of a pull (the sender's sshd, the link, a
# timeout, the stream) may be either side's.
_RECEIVER_CODES = frozenset({1, 3, 11})


def blame(err: FleetError, *, push: bool) -> Blame:
    """Which side of a failed transfer to blame (:class:`Spread`).  Fleet's own connection to the
    host that runs the transfer failing blames that host; so does any failure of a push from the
    control host (the source is local: the receiver or the link to it failed)."""
    if isinstance(err, UnreachableError) or push:
        return "receiver"
    if isinstance(err, RemoteError) and not isinstance(err, CommandTimeout) and err.exit_status in _RECEIVER_CODES:
        return "receiver"
    return "either"


def _file_list(tr: Transfer) -> bytes:
    return b"".join(rel.encode() + b"\0" for _, rel in tr.items)


def stage(inventory: Inventory, needs: Sequence[ModelNeed], source: Source, connector: SshConnector, *,
          revision: str | None = None, full: bool = False, forks: int = DEFAULT_FORKS,
          progress: Progress | None = None, use_hosts: bool = True,
          expected: Sequence[Manifest] | None = None) -> Report:
    """Put every model at its path on every host that needs it (see the module doc).
    ``use_hosts=False`` makes every host fetch from the source (bench/'s baseline).
    ``expected``: the source's manifests, already measured (the hub's download, checked against
    the hub's hashes); else the source is scanned.  Raises :class:`WeightsRefused` before
    anything moves when a host lacks the disk space."""
    started = time.monotonic()
    progress = progress or Quiet()
    scanned = ([(m, ()) for m in expected] if expected is not None
               else _source_scan(needs, source, connector, inventory, revision, full=full))  # fmt: skip
    expected = tuple(m for m, _ in scanned)
    hosts, dirs = hosts_of(inventory, needs)
    stephook.reached("scan", [h.name for h in hosts])
    scans, bad = _host_scans(hosts, dirs, connector, full=full, forks=forks)
    jobs = {h.name: _Job(host=h) for h in hosts if h.name in scans}
    wants: dict[str, list[tuple[str, str]]] = {h: [] for h in jobs}
    holders: dict[tuple[str, str], list[str]] = {}
    extras: dict[str, list[str]] = {h: [] for h in jobs}
    rewrite: dict[str, list[str]] = {h: [] for h in jobs}  # dirs whose manifest must be (re)written
    space: dict[str, list[tuple[str, int, int, int]]] = {h: [] for h in jobs}
    sizes = {(n.model, f.path): f.size for n, m in zip(needs, expected) for f in m.files}
    for n, m in zip(needs, expected):
        for h, path in n.paths:
            if h not in jobs:
                continue
            lst = scans[h][path]
            problems = compare(m, lst)
            jobs[h].fixed.extend((path, p) for p in problems)
            broken = {p.path for p in problems if p.problem != "extra"}
            extras[h].extend(posixpath.join(path, p.path) for p in problems if p.problem == "extra")
            for f in m.files:
                if f.path in broken:
                    wants[h].append((n.model, f.path))
                else:
                    holders.setdefault((n.model, f.path), []).append(h)
            if problems or lst.manifest is None or not lst.manifest.same_content(m):
                rewrite[h].append(path)
            need = sum(sizes[(n.model, p)] for p in broken)
            space[h].append((path, lst.fs, lst.free, need))
            jobs[h].total += need
    refused = [line for h in jobs for line in disk.refusals(h, space[h])]
    if refused:
        raise WeightsRefused("not enough disk space, nothing was transferred: " + "; ".join(refused))
    run_id = secrets.token_hex(6)
    # A source host's daemon never sends through a symlink: a model it holds through links (a
    # Hugging Face cache snapshot) is sent from a view of regular files (hard links) in its dir.
    views = {n.model: (posixpath.join(source.dir_of(n), VIEW_PREFIX + run_id), [f.path for f in m.files])
             for n, (m, links) in zip(needs, scanned) if links and source.kind == "host"}  # fmt: skip
    leftovers = {source.host: [v for v, _ in views.values()]} if views else {}
    touched: set[str] = set()
    local_dir = tempfile.mkdtemp(prefix="fleet-weights-")
    try:
        stephook.reached("prepare", sorted(jobs))
        routes = _install_auth(inventory, needs, source, connector, jobs, wants, rewrite, extras, run_id,
                               local_dir, use_hosts, touched, forks, views)
        stephook.reached("spread", sorted(h for h in jobs if wants[h]))
        _spread(inventory, jobs, wants, holders, routes, connector, sizes, progress, forks, use_hosts,
                source.host or None)
        stephook.reached("verify", sorted(h for h in jobs if rewrite[h] and not jobs[h].error))
        _finish(inventory, jobs, needs, expected, rewrite, wants, scans, connector, progress, forks)
    except BaseException:
        # A Ctrl-C has closed the run's connections: the clean-up opens its own.
        with connector.reopened() as fresh:
            cleanup(inventory, touched, run_id, fresh, forks, leftovers)
        raise
    else:
        untouched = [jobs[h].host for h in sorted(jobs) if h not in touched]
        stephook.reached("cleanup", sorted({*touched, *(h.name for h in untouched)}))
        sweep(untouched, connector, forks)
        cleanup(inventory, touched, run_id, connector, forks, leftovers)
    finally:
        subprocess.run(auth.close_masters_argv(local_dir), capture_output=True, timeout=60)
        shutil.rmtree(local_dir, ignore_errors=True)
    results = [bad.get(h.name) or HostResult(
        host=h.name, status="failed" if jobs[h.name].error else "ok", files=jobs[h.name].files,
        bytes=jobs[h.name].bytes, mismatches=tuple(jobs[h.name].fixed), senders=tuple(sorted(jobs[h.name].senders.items())),
        error=jobs[h.name].error) for h in hosts]
    return Report(models=expected, hosts=tuple(results), seconds=time.monotonic() - started)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Routes:
    """How a transfer runs: per (model, receiver) its dest dir, per (model, sender) the remote
    spec rsync reads from, the control host's push options."""

    dest: Mapping[tuple[str, str], str]
    remote: Mapping[tuple[str, str], tuple[str, int]]  # (model, sender) -> ("user@ip::weights/", ssh port)
    keys: Mapping[tuple[str, str], str]  # (model, receiver) -> the run's key file on the receiver
    known_hosts: str  # on the receivers
    push: Mapping[str, tuple[str, str]]  # receiver -> (user@address:, rsync -e) for the control host
    source_dirs: Mapping[str, str]  # model -> its dir in the source


def reach_address(h: Host, end: Endpoint) -> str:
    """The address other hosts reach ``h`` at: its ``data_ip``, else the address fleet's own ssh
    connects to (``end``: ssh_config's HostName applied), as an IP when this host resolves it --
    authorized_keys' ``from=`` matches the client's IP, not a name."""
    if h.spec.data_ip:
        return h.spec.data_ip
    try:
        ipaddress.ip_address(end.address)
        return end.address
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(end.address, end.port, type=socket.SOCK_STREAM)[0][4][0])
    except (OSError, UnicodeError):
        return end.address  # resolvable only past a jump host: the receivers' ssh resolves it


def _install_auth(inventory: Inventory, needs: Sequence[ModelNeed], source: Source, connector: SshConnector,
                  jobs: Mapping[str, _Job], wants: Mapping[str, list[tuple[str, str]]],
                  rewrite: Mapping[str, list[str]], extras: Mapping[str, list[str]], run_id: str,
                  local_dir: str, use_hosts: bool, touched: set[str], forks: int,
                  views: Mapping[str, tuple[str, list[str]]]) -> _Routes:
    """Keys, known_hosts and authorized lines for this run's hops; stale manifests and files
    the source does not have removed; the source host's ``views`` (model -> view dir, files)
    made.  Every host it touches is added to ``touched`` first."""
    rdir = auth.run_dir(run_id)
    dest = {(n.model, h): p for n in needs for h, p in n.paths}
    source_dirs = {n.model: source.dir_of(n) for n in needs}
    receivers = sorted(h for h, items in wants.items() if items)
    authorize: dict[str, list[str]] = {}
    configs: dict[str, dict[str, bytes]] = {}  # sender -> daemon config file name -> text
    keys: dict[str, dict[str, bytes]] = {}  # receiver -> key file name -> private key
    known: dict[str, set[str]] = {}
    remote: dict[tuple[str, str], tuple[str, int]] = {}
    key_files: dict[tuple[str, str], str] = {}
    for i, n in enumerate(needs):
        takers = [h for h in receivers if any(m == n.model for m, _ in wants[h])]
        senders = [(h, h, p) for h, p in n.paths if h in jobs] if use_hosts else []
        if source.kind == "host":
            senders.append((SOURCE, source.host, views[n.model][0] if n.model in views else source_dirs[n.model]))
        if not takers or not senders:
            continue
        key = auth.new_key()
        ips = [reach_address(inventory.host(h), connector.endpoint(inventory.host(h))) for h in takers]
        for node, sender, path in senders:
            host = inventory.host(sender)
            end = connector.endpoint(host)
            # The source's host may also hold a copy of the same model: one config for each.
            name = f"rsyncd-{i}{'-source' if node == SOURCE else ''}.conf"
            configs.setdefault(sender, {})[name] = auth.daemon_config(path, end.user).encode()
            authorize.setdefault(sender, []).append(auth.authorized_line(key, posixpath.join(rdir, name), ips, run_id))
            address = reach_address(host, end)
            remote[(n.model, node)] = (f"{end.user}@{address}::{auth.MODULE}/", end.port)
            for t in takers:
                known.setdefault(t, set()).update(auth.known_hosts_lines(address, end.port,
                                                                         connector.known_keys(end)))
        for t in takers:
            keys.setdefault(t, {})[f"key-{i}"] = key.private
            key_files[(n.model, t)] = posixpath.join(rdir, f"key-{i}")
    push: dict[str, tuple[str, str]] = {}
    if source.kind == "dir" and receivers:
        kh = os.path.join(local_dir, "known_hosts")
        lines: set[str] = set()
        for h in receivers:
            end = connector.endpoint(inventory.host(h))
            if end.via is not None:
                raise UsageError(f"{h}: reached through a jump host; stage from HOST:PATH (a fleet host) "
                                 "instead of a directory on this host")
            lines.update(auth.known_hosts_lines(end.address, end.port, connector.known_keys(end)))
            push[h] = (f"{end.user}@{end.address}:", auth.ssh_command(end.key_files[0] if end.key_files else None,
                                                                      kh, end.port, control=os.path.join(local_dir, "push")))
        with open(kh, "w") as f:
            f.write("\n".join(sorted(lines)) + "\n")

    owner = owner_line()

    def prepare(h: Host, t: Transport) -> None:
        touched.add(h.name)
        # The run dir first: another run's sweep drops authorized lines whose run dir is gone.
        r = t.run(auth.begin_argv(run_id, owner, authorize.get(h.name, ())), timeout=180, check=True)
        dead = [run for run, who in auth.other_runs(r.stdout_text).items() if holder_state(who) == "dead"]
        if dead:  # runs of this control host that ended without their clean-up (SIGKILL)
            t.run(auth.cleanup_argv(dead), timeout=180, check=True)
        for model, (view, files) in views.items() if h.name == source.host else ():
            t.run(view_argv(source_dirs[model], view), stdin=json.dumps(files).encode(), timeout=SCAN_TIMEOUT_S,
                  check=True)  # fmt: skip
        for name, data in {**configs.get(h.name, {}), **keys.get(h.name, {})}.items():
            t.put(posixpath.join(rdir, name), data, 0o600)
        if h.name in known:
            t.put(posixpath.join(rdir, "known_hosts"), ("\n".join(sorted(known[h.name])) + "\n").encode(), 0o600)
        stale = [posixpath.join(d, MANIFEST_NAME) for d in rewrite.get(h.name, ())] + list(extras.get(h.name, ()))
        if stale:
            t.run(("rm", "-f", "--", *stale), timeout=120, check=True)
        # Made here, not by rsync: two transfers into a host run at once, and two rsyncs that
        # both find the destination missing race to create it (the loser exits "mkdir failed").
        into = sorted({dest[(m, h.name)] for m, _ in wants.get(h.name, ())})
        if into:
            t.run(("mkdir", "-p", "--", *into), timeout=120, check=True)

    busy = sorted(set(authorize) | set(keys) | {h for h, d in rewrite.items() if d} | ({source.host} if views else set()))
    _all_or_raise([inventory.host(h) for h in busy], prepare, connector, forks, "cannot prepare the transfer")
    return _Routes(dest=dest, remote=remote, keys=key_files, known_hosts=posixpath.join(rdir, "known_hosts"),
                   push=push, source_dirs=source_dirs)


def _all_or_raise(hosts: Sequence[Host], fn: Callable[[Host, Transport], None], connector: SshConnector,
                  forks: int, what: str) -> None:
    result = run_all(hosts, fn, connector=connector, forks=forks)
    problems = [f"{o.host.name}: {o.reason}" for o in result.unreachable] + [o.message for o in result.failed]
    if problems:
        raise FleetError(f"{what}: " + "; ".join(problems))


def _spread(inventory: Inventory, jobs: Mapping[str, _Job], wants: Mapping[str, list[tuple[str, str]]],
            holders: Mapping[tuple[str, str], list[str]], routes: _Routes, connector: SshConnector,
            sizes: Mapping[tuple[str, str], int], progress: Progress, forks: int, use_hosts: bool,
            source_host: str | None) -> None:
    """Runs the :class:`Spread` schedule; a failed transfer is blamed (:func:`blame`) and retried
    from another holder or the source; a host the schedule gives up gets its ``error``."""
    for name, job in jobs.items():
        if wants[name]:
            progress.begin(name, job.total)
    local = LocalTransport()

    def run(tr: Transfer) -> int:
        dst = routes.dest[(tr.model, tr.dst)] + "/"
        if tr.src == SOURCE and tr.dst in routes.push:
            where, e = routes.push[tr.dst]
            r = local.run(_rsync_argv(e, routes.source_dirs[tr.model] + "/", where + dst, follow=True), stdin=_file_list(tr),
                          timeout=TRANSFER_TIMEOUT_S, check=True)  # fmt: skip
            return _moved(r.stdout_text, "push")
        t = connector.connect(inventory.host(tr.dst))
        # The sender's sshd on its data address, at the port fleet reaches it on; the daemon's
        # module is the model dir.
        where, port = routes.remote[(tr.model, tr.src)]
        key = routes.keys[(tr.model, tr.dst)]
        e = auth.ssh_command(key, routes.known_hosts, port, control=key)
        r = t.run(_rsync_argv(e, where, dst), stdin=_file_list(tr), timeout=TRANSFER_TIMEOUT_S, check=True)
        return _moved(r.stdout_text, "pull")

    receivers = sum(1 for items in wants.values() if items)
    plan = Spread(wants, holders, use_hosts=use_hosts, source_host=source_host, sizes=sizes,
                  chunk=chunk_bytes({it: sizes[it] for items in wants.values() for it in items}, receivers))
    # Each host receives up to SLOTS transfers at once.  Not execute/fanout.each: that runs a key
    # set known up front, and this schedule learns its next transfers only as each one ends
    # (plan.done/plan.failed: a receiver that got a file becomes a holder, a failed source is
    # retired), so it submits to its own pool as slots free.
    pool = cf.ThreadPoolExecutor(max_workers=max(1, min(forks, SLOTS * len(jobs))), thread_name_prefix="fleet-weights")
    try:
        running = {pool.submit(run, tr): tr for tr in plan.start()}
        while running:
            finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                tr = running.pop(fut)
                job = jobs[tr.dst]
                try:
                    job.bytes += fut.result()
                except FleetError as err:
                    what = f"{tr.items[0][1]}{f' (+{len(tr.items) - 1} files)' if len(tr.items) > 1 else ''}"
                    why = f"{what} from {tr.src or 'the source'}: {err}"
                    nxt = plan.failed(tr, blame(err, push=tr.src == SOURCE and tr.dst in routes.push), why)
                else:
                    job.files += len(tr.items)
                    job.senders[tr.src or "source"] += len(tr.items)
                    job.done += sum(sizes[it] for it in tr.items)
                    if not job.error:
                        progress.advance(tr.dst, job.done)
                    nxt = plan.done(tr)
                for host, why in plan.given_up.items():
                    if not jobs[host].error:
                        jobs[host].error = why
                        progress.end(host, False)
                running.update({pool.submit(run, n): n for n in nxt})
    except KeyboardInterrupt:
        # Not waiting for the files under way: the caller's clean-up removes the run's keys now
        # (a transfer already running ends on its own; rsync keeps what it has for a re-run).
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _finish(inventory: Inventory, jobs: Mapping[str, _Job], needs: Sequence[ModelNeed],
            expected: Sequence[Manifest], rewrite: Mapping[str, list[str]], wants: Mapping[str, list[tuple[str, str]]],
            before: Mapping[str, Mapping[str, Listing]], connector: SshConnector, progress: Progress,
            forks: int) -> None:
    """Scans each changed copy again, hashing every file that arrived (not trusting the
    sender's hash); one that matches gets its manifest (written last).  A file that did not
    move is judged as the first scan judged it: against the mtime the copy's own manifest
    recorded (``before``; the manifest itself was removed when the copy began to change)."""
    by_path = {(h, p): m for n, m in zip(needs, expected) for h, p in n.paths}

    def one(h: Host, t: Transport) -> None:
        job = jobs[h.name]
        dirs = rewrite[h.name]
        arrived = sorted({rel for _, rel in wants[h.name]})
        for d, lst in scan(t, dirs, hash_files=True, hash_only=arrived).items():
            lst = replace(lst, manifest=before[h.name][d].manifest)
            m = by_path[(h.name, d)]
            left = compare(m, lst)
            if left:
                job.error = job.error or f"{d}: still differs after the transfer: " + ", ".join(x.line() for x in left)
                continue
            t.put(posixpath.join(d, MANIFEST_NAME), to_json(for_host(m, lst)).encode(), 0o644)
        progress.end(h.name, not job.error)

    todo = [jobs[h].host for h in jobs if rewrite[h] and not jobs[h].error]
    result = run_all(todo, one, connector=connector, forks=forks)
    for o in result.failed:
        jobs[o.host.name].error = o.message
    for u in result.unreachable:
        jobs[u.host.name].error = u.reason


def sweep(hosts: Sequence[Host], connector: SshConnector, forks: int) -> None:
    """Removes from ``hosts`` (which this run did not touch: those it touched were swept as it
    began) the keys and run dirs of runs of this control host that ended without their
    clean-up.  Best effort: a host that fails here is left as the last run left it."""

    def one(h: Host, t: Transport) -> None:
        listed = t.run(auth.runs_argv(), timeout=180, check=True).stdout_text
        dead = [run for run, who in auth.other_runs(listed).items() if holder_state(who) == "dead"]
        if dead:
            t.run(auth.cleanup_argv(dead), timeout=180, check=True)

    if hosts:
        run_all(hosts, one, connector=connector, forks=forks)


def cleanup(inventory: Inventory, touched: set[str], run_id: str, connector: SshConnector, forks: int,
            leftovers: Mapping[str, Sequence[str]] | None = None) -> None:
    """Removes the run's authorized_keys lines, keys and files from every host it touched
    (``leftovers``: host -> further dirs of the run to remove, the source's views)."""
    hosts = [h for h in inventory.hosts if h.name in touched]
    if not hosts:
        return
    def one(h: Host, t: Transport) -> None:
        t.run(auth.cleanup_argv([run_id], (leftovers or {}).get(h.name, ())), timeout=180, check=True)

    _all_or_raise(hosts, one, connector, forks, f"removing the run's keys ({auth.marker(run_id)}) failed")
