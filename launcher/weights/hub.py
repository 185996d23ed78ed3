"""``fleet weights stage --source hub``: one host downloads with the hub's own client, checks
every file against the hub's own hashes, and the copy spreads host to host like any source.

In this order (nothing is downloaded before step 2 passed):
1. the fetcher is the first host (inventory order) that needs every model; the token (the
   playbook's ``HF_TOKEN`` secret, if it declares one) goes to a 0600 file in the run dir there,
   never into argv or logs, and only there; the client reads it into ``HF_TOKEN``;
2. the client lists the pinned revision and reports what the fetcher still lacks against its
   free space (refusal names host, path, need and have);
3. ``snapshot_download`` into the fetcher's model dir (resumable), after the dir's manifest is
   removed; then every file of the revision is checked against the hub's own hash -- an LFS
   file's sha256, any other file's git blob id -- in the same read that hashes it (sha256).  A
   file that differs is named and nothing spreads: the hub is the reference, never a vote
   among hosts;
4. :func:`launcher.weights.stage.stage` spreads from the fetcher (``HOST:PATH`` with the
   measured manifests): every other host's disk is checked, files go host to host, each
   receiver hashes what arrived, every copy gets its manifest with the pinned revision.
The fetcher's python3 needs ``huggingface_hub`` (the engine images carry it; on the host:
``pip install huggingface_hub``).  ``HF_ENDPOINT`` (a mirror) is passed on from fleet's own
environment when set.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import secrets
from typing import Any, Mapping, Sequence

from launcher import hostscripts
from launcher.deploy.lock import owner_line
from launcher.errors import FleetError, RemoteError, UsageError
from launcher.execute.fanout import DEFAULT_FORKS
from launcher.execute.ssh import SshConnector
from launcher.execute.transport import Transport
from launcher.model import Inventory
from launcher.weights import auth, disk
from launcher.weights.manifest import MANIFEST_NAME, FileEntry, Manifest
from launcher.weights.needs import ModelNeed
from launcher.weights.stage import Progress, Report, Source, WeightsRefused, cleanup, hosts_of, stage

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


def _client(t: Transport, argv: tuple[str, ...], env: Mapping[str, str], timeout: float) -> dict[str, Any]:
    r = t.run(argv, timeout=timeout, env=env)
    if not r.ok:
        tail = (r.stderr_text.strip().splitlines() or ["no output"])[-1]
        raise RemoteError(t.host, "the hub client", r.exit_status, tail)
    try:
        out = json.loads(r.stdout)
        if not isinstance(out, dict):
            raise ValueError("not an object")
        return out
    except ValueError as err:
        raise RemoteError(t.host, "the hub client", r.exit_status, f"unreadable answer: {err}") from None


def stage_hub(inventory: Inventory, needs: Sequence[ModelNeed], connector: SshConnector, *, revision: str | None,
              token: str | None, full: bool = False, forks: int = DEFAULT_FORKS,
              progress: Progress | None = None) -> Report:
    """Download every model once, check it against the hub, spread it (see the module doc)."""
    if not revision:
        raise UsageError("--source hub needs --revision (a commit hash or tag): every rank must get the same files")
    for n in needs:
        if not _REPO_ID.fullmatch(n.model):
            raise UsageError(f"--source hub: {n.what} {n.model} is a path, not a repo id; stage it from a "
                             "directory or HOST:PATH")
    hosts, _ = hosts_of(inventory, needs)
    fetcher = next((h for h in hosts if all(h.name in dict(n.paths) for n in needs)), None)
    if fetcher is None:
        raise UsageError("--source hub: no host needs every model (" + ", ".join(n.model for n in needs)
                         + "); stage them from a directory or HOST:PATH")
    run_id = secrets.token_hex(6)
    token_file = posixpath.join(auth.run_dir(run_id), _TOKEN_FILE) if token else None
    env = {"HF_ENDPOINT": os.environ["HF_ENDPOINT"]} if os.environ.get("HF_ENDPOINT") else {}
    dirs = {n.model: dict(n.paths)[fetcher.name] for n in needs}
    touched: set[str] = set()
    try:
        t = connector.connect(fetcher)
        touched.add(fetcher.name)
        t.run(auth.begin_argv(run_id, owner_line()), timeout=180, check=True)
        if token is not None and token_file is not None:
            t.put(token_file, token.encode(), 0o600)
        wants = []
        for n in needs:
            s = _client(t, hub_argv("size", n.model, revision, dirs[n.model], token_file), env, 600)
            wants.append((dirs[n.model], int(s["fs"]), int(s["free"]), int(s["need"])))
        refused = disk.refusals(fetcher.name, wants)
        if refused:
            raise WeightsRefused("not enough disk space, nothing was downloaded: " + "; ".join(refused))
        expected = []
        for n in needs:
            path = dirs[n.model]
            t.run(("rm", "-f", "--", posixpath.join(path, MANIFEST_NAME)), timeout=60, check=True)
            got = _client(t, hub_argv("download", n.model, revision, path, token_file), env, DOWNLOAD_TIMEOUT_S)
            bad = [f"{p}: {why}" for p, why in got["bad"]]
            if bad:
                raise FleetError(f"{fetcher.name}: {path}: {'; '.join(bad[:3])}{f' (+{len(bad) - 3})' if len(bad) > 3 else ''}: "
                                 f"the download differs from the hub's own hashes of {n.model}@{revision}; nothing "
                                 "was spread")
            files = tuple(FileEntry(path=p, size=int(v[0]), sha256=str(v[2]), mtime=int(v[1]))
                          for p, v in sorted(got["files"].items()))  # fmt: skip
            expected.append(Manifest(model=n.model, revision=revision, files=files))
    except BaseException:
        with connector.reopened() as fresh:  # a Ctrl-C has closed the run's connections
            cleanup(inventory, touched, run_id, fresh, forks)
        raise
    cleanup(inventory, touched, run_id, connector, forks)
    source = Source(kind="host", root="", host=fetcher.name, dirs=tuple(dirs.items()))
    return stage(inventory, needs, source, connector, revision=revision, full=full, forks=forks, progress=progress,
                 expected=expected)
