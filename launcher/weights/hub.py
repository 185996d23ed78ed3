"""``fleet weights stage --source hub``: each host downloads with the hub's own client.

Per host, in this order (nothing is downloaded before step 2 passed on every host):
1. the token (the playbook's ``HF_TOKEN`` secret, if it declares one) goes to a 0600 file in the
   run dir on the host, never into argv or logs; the client reads it into ``HF_TOKEN`` there;
2. the client lists the pinned revision and reports what it still lacks against free space
   (refusal names host, path, need and have);
3. ``snapshot_download`` into the model dir (resumable), after the dir's manifest is removed;
4. every host hashes its copy (in parallel); copies must agree -- the content most hosts got is
   the reference, a host that differs is named with its files -- and each matching copy gets its
   manifest with the pinned revision.
The hosts' python3 needs ``huggingface_hub`` (the engine images carry it; on the host:
``pip install huggingface_hub``).  ``HF_ENDPOINT`` (a mirror) is passed on from fleet's own
environment when set.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import secrets
import time
from collections import Counter
from typing import Mapping, Sequence

from launcher import hostscripts
from launcher.errors import FleetError, RemoteError, UsageError
from launcher.execute.fanout import DEFAULT_FORKS, run_all
from launcher.execute.ssh import SshConnector
from launcher.execute.transport import Transport
from launcher.model import Host, Inventory
from launcher.weights import auth, disk
from launcher.weights.manifest import MANIFEST_NAME, Manifest, Mismatch, compare, for_host, from_listing, to_json
from launcher.weights.needs import ModelNeed
from launcher.weights.stage import (
    HostResult, Progress, Quiet, Report, WeightsRefused, cleanup, hosts_of, scan,
)  # fmt: skip

DOWNLOAD_TIMEOUT_S = 24 * 3600.0
_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")
_TOKEN_FILE = "hf_token"
# Runs the client with the token read from its 0600 file into the environment: argv holds the path.
_WITH_TOKEN = 'HF_TOKEN=$(cat -- "$1") && export HF_TOKEN && shift && exec "$@"'


def hub_argv(mode: str, repo: str, revision: str, path: str, token_file: str | None) -> tuple[str, ...]:
    """The client's command line on a host (the token only as the path of its file)."""
    opts = json.dumps({"mode": mode, "repo": repo, "revision": revision, "dir": path})
    argv = ("python3", "-c", hostscripts.text("weights-hub.py"), opts)
    return ("sh", "-c", _WITH_TOKEN, "fleet-hub", token_file, *argv) if token_file else argv


def _client(t: Transport, argv: tuple[str, ...], env: Mapping[str, str], timeout: float) -> dict[str, int]:
    r = t.run(argv, timeout=timeout, env=env)
    if not r.ok:
        tail = (r.stderr_text.strip().splitlines() or ["no output"])[-1]
        raise RemoteError(t.host, "the hub client", r.exit_status, tail)
    try:
        out = json.loads(r.stdout)
        return {str(k): int(v) for k, v in out.items()}
    except (ValueError, AttributeError) as err:
        raise RemoteError(t.host, "the hub client", r.exit_status, f"unreadable answer: {err}") from None


def stage_hub(inventory: Inventory, needs: Sequence[ModelNeed], connector: SshConnector, *, revision: str | None,
              token: str | None, forks: int = DEFAULT_FORKS, progress: Progress | None = None) -> Report:
    """Download every model on the hosts that need it, at ``revision`` (see the module doc)."""
    started = time.monotonic()
    progress = progress or Quiet()
    if not revision:
        raise UsageError("--source hub needs --revision (a commit hash or tag): every rank must get the same files")
    for n in needs:
        if not _REPO_ID.fullmatch(n.model):
            raise UsageError(f"--source hub: {n.what} {n.model} is a path, not a repo id; stage it from a "
                             "directory or HOST:PATH")
    run_id = secrets.token_hex(6)
    rdir = auth.run_dir(run_id)
    token_file = posixpath.join(rdir, _TOKEN_FILE) if token else None
    env = {"HF_ENDPOINT": os.environ["HF_ENDPOINT"]} if os.environ.get("HF_ENDPOINT") else {}
    hosts, dirs = hosts_of(inventory, needs)
    by_host: dict[str, list[ModelNeed]] = {}
    for n in needs:
        for h, _ in n.paths:
            by_host.setdefault(h, []).append(n)
    touched: set[str] = set()
    try:
        def size(h: Host, t: Transport) -> list[tuple[str, int, int, int]]:
            touched.add(h.name)
            if token is not None and token_file is not None:
                t.put(token_file, token.encode(), 0o600)
            out = []
            for n in by_host[h.name]:
                path = dict(n.paths)[h.name]
                s = _client(t, hub_argv("size", n.model, revision, path, token_file), env, 600)
                out.append((path, s["fs"], s["free"], s["need"]))
                progress.begin(h.name, sum(x[3] for x in out))
            return out

        sized = run_all(hosts, size, connector=connector, forks=forks)
        problems = [f"{o.host.name}: {o.reason}" for o in sized.unreachable] + [o.message for o in sized.failed]
        if problems:
            raise FleetError("the hub client failed before downloading: " + "; ".join(problems))
        refused = [line for h, wants in sized.values().items() for line in disk.refusals(h, wants)]
        if refused:
            raise WeightsRefused("not enough disk space, nothing was downloaded: " + "; ".join(refused))

        def download(h: Host, t: Transport) -> None:
            for n in by_host[h.name]:
                path = dict(n.paths)[h.name]
                t.run(("rm", "-f", "--", posixpath.join(path, MANIFEST_NAME)), timeout=60, check=True)
                _client(t, hub_argv("download", n.model, revision, path, token_file), env, DOWNLOAD_TIMEOUT_S)

        fetched = run_all(hosts, download, connector=connector, forks=forks)
    except BaseException:
        with connector.reopened() as fresh:  # a Ctrl-C has closed the run's connections
            cleanup(inventory, touched, run_id, fresh, forks)
        raise
    cleanup(inventory, touched, run_id, connector, forks)
    errors = {o.host.name: o.message for o in fetched.failed} | {o.host.name: o.reason for o in fetched.unreachable}
    return _record(inventory, needs, revision, [h for h in hosts if h.name not in errors], errors, connector,
                   forks, progress, started, dirs)


def _record(inventory: Inventory, needs: Sequence[ModelNeed], revision: str, hosts: Sequence[Host],
            errors: Mapping[str, str], connector: SshConnector, forks: int, progress: Progress, started: float,
            dirs: Mapping[str, list[str]]) -> Report:
    """Hashes every downloaded copy, takes the content most hosts got as the reference and
    writes the manifest of each copy that matches it."""
    hashed = run_all(hosts, lambda h, t: scan(t, dirs[h.name], hash_files=True), connector=connector, forks=forks)
    scans = hashed.values()
    failed = dict(errors) | {o.host.name: o.message for o in hashed.failed}
    mismatches: dict[str, list[tuple[str, Mismatch]]] = {}
    refs: list[Manifest] = []
    writes: dict[str, list[tuple[str, str]]] = {}
    for n in needs:
        got = {name: from_listing(n.model, revision, scans[name][p]) for name, p in n.paths if name in scans}
        if not got:
            continue
        counts = Counter(m.content_key() for m in got.values())
        ref = next(m for m in got.values() if counts[m.content_key()] == max(counts.values()))
        refs.append(ref)
        for name, p in n.paths:
            if name not in scans:
                continue
            bad = compare(ref, scans[name][p])
            if bad:
                mismatches.setdefault(name, []).extend((p, b) for b in bad)
            else:
                writes.setdefault(name, []).append((p, to_json(for_host(ref, scans[name][p]))))

    def write(h: Host, t: Transport) -> None:
        for path, text in writes.get(h.name, ()):
            t.put(posixpath.join(path, MANIFEST_NAME), text.encode(), 0o644)

    wrote = run_all([h for h in hosts if h.name in writes], write, connector=connector, forks=forks)
    failed |= {o.host.name: o.message for o in wrote.failed}
    results = []
    for h in inventory.hosts:
        if h.name not in dirs:
            continue
        differs = tuple(mismatches.get(h.name, ()))
        error = failed.get(h.name, "") or ("differs from the copy most hosts downloaded" if differs else "")
        progress.end(h.name, not error)
        results.append(HostResult(host=h.name, status="failed" if error else "ok", mismatches=differs, error=error))
    return Report(models=tuple(refs), hosts=tuple(results), seconds=time.monotonic() - started)
