"""``fleet collect``: one evidence bundle (tar.gz) from every host of a deployment.

Per host, one SSH command runs :data:`COLLECT_SCRIPT`, which writes everything into a private
temp dir on the host and streams it back as a tar.gz on stdout (binary-safe, one round trip):

- ``host/``: the facts gather output, ``show_gids``, ``ibv_devinfo -v``, ``nvidia-smi`` and
  ``nvidia-smi topo -m``, ``npu-smi info``, ``ip -d addr``, ``ip route``, the deployment's
  containers (``docker ps -a``), the kernel log tail (Xid and link errors live there);
- ``units/<unit>/`` for every unit of the deployment found on the host (containers labelled
  ``fleet.deployment=<name>`` and directories under ``/etc/fleet/<name>/``, so units gone from
  the plan are collected too): ``docker logs --tail N``, ``docker inspect``, NCCL's debug lines
  when the unit's env sets ``NCCL_DEBUG`` (and its ``NCCL_DEBUG_FILE`` files when the container
  runs: only in the value's own directory, which must resolve under /tmp, /var/tmp, /var/log or
  be the container's working directory, with NCCL's ``%h``/``%p`` the only wildcards),
  ``journalctl``/``systemctl status`` for systemd units, and the rendered files under
  ``/etc/fleet/<name>/<unit>/`` — never ``secrets.env``, and of ``env`` only its names
  (``env.names``).

The control node rewrites that into ``<root>/<host>/...`` and ``<root>/<host>/<unit>/...``
(``<root>`` = ``fleet-collect-<deployment>-<UTC time>``), adds ``facts.json`` per host,
``plan.json`` and ``manifest.json`` (what was collected from where, and which hosts were
unreachable or failed: recorded, never fatal).  Secret hygiene on the way: members named
``secrets.env*`` are dropped even if the host sent them, and in ``docker inspect`` the values of
the playbook's secrets and of env names that look secret (TOKEN, SECRET, PASSWORD, ...) are
masked, and so is any value equal to one of the deployment's secrets as this control host reads
them (under any name, and wherever else it occurs: Cmd, labels, logs, rendered files).  The bundle is written 0600; at most :data:`MAX_HOST_BYTES` of one host's stream is
read there and unpacked here (a gzip bomb stops at the bound, noted in ``TRUNCATED.txt``).
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

from launcher import hostscripts
from launcher.config.recipes import Catalog
from launcher.errors import ExitCode, FleetError
from launcher.execute.fanout import DEFAULT_FORKS, Connector, Ok, Unreachable, run_all
from launcher.execute.transport import Transport
from launcher.limit import limit_hosts
from launcher.model import Host, Inventory, Plan, Playbook
from launcher.output import MASK, mask
from launcher.pipeline import Inputs, claimed_hosts, planned
from launcher.plan import deployment_name, to_jsonable
from launcher.facts import host as facts
from launcher.facts.gather import failure, outcome_reason
from launcher.render import FLEET_ROOT
from launcher.runtimes.systemd import SYSTEMD_DIR

DEFAULT_TAIL = 2000
MAX_HOST_BYTES = 256 << 20  # unpacked from one host's stream; the host's own stream is cut at the same size
NCCL_LINES = 20000
COLLECT_TIMEOUT_S = 600.0
_SECRETISH = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL", re.I)
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

COLLECT_SCRIPT = hostscripts.text("collect.sh")  # arguments: see _collect_one and the script's header


@dataclass(frozen=True, slots=True, kw_only=True)
class HostOutcome:
    host: str
    status: str  # ok / unreachable / failed
    error: str = ""
    units: tuple[str, ...] = ()
    files: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectReport:
    path: str
    root: str
    deployment: str
    hosts: tuple[HostOutcome, ...]
    plan_error: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> ExitCode:
        good = sum(1 for h in self.hosts if h.status == "ok")
        if good == len(self.hosts):
            return ExitCode.OK
        return ExitCode.FAILED if good == 0 else ExitCode.PARTIAL


def redact_inspect(text: str, secret_names: frozenset[str], secret_values: Collection[str] = ()) -> str:
    """``docker inspect`` JSON with the values of secret env entries masked: by name (the
    playbook's secrets, names that look secret) and by value (an entry whose value is one of
    ``secret_values``, whatever its name); any other string holding such a value (Cmd, Args,
    Labels) has it masked where it occurs."""
    try:
        doc = json.loads(text)
    except ValueError:
        return mask(text, secret_values)
    if not isinstance(doc, list):
        return mask(text, secret_values)
    values = frozenset(v for v in secret_values if v)
    for item in doc:
        config = item.get("Config") if isinstance(item, dict) else None
        if not isinstance(config, dict):
            continue
        env = config.get("Env")
        if isinstance(env, list):
            masked = []
            for entry in env:
                name, sep, value = str(entry).partition("=")
                secret = name in secret_names or _SECRETISH.search(name) or value in values
                masked.append(f"{name}={MASK}" if sep and secret else entry)
            config["Env"] = masked
    return json.dumps(_masked_strings(doc, values), indent=1)


def _masked_strings(node: Any, values: frozenset[str]) -> Any:
    """``node`` (parsed JSON) with every secret value inside its strings (keys too) masked."""
    if isinstance(node, str):
        return mask(node, values)
    if isinstance(node, list):
        return [_masked_strings(v, values) for v in node]
    if isinstance(node, dict):
        return {mask(k, values): _masked_strings(v, values) for k, v in node.items()}
    return node


def _masked_bytes(data: bytes, values: Collection[str]) -> bytes:
    """``data`` with every secret value (as UTF-8, longest first) replaced by the mask."""
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        data = data.replace(value.encode(), MASK.encode())
    return data


def _member_path(name: str) -> tuple[str, ...] | None:
    """A remote tar member name as safe path parts (None: refuse it)."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        return None
    return tuple(parts)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(mtime)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def env_names(text: str) -> str:
    """An env file (``NAME=<shell-quoted value>`` lines, values may span lines) as its names,
    one a line: what the bundle keeps of it."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return "(unreadable env file)\n"
    return "".join(f"{w.partition('=')[0]}\n" for w in words if "=" in w)


def _unpack_host(tar: tarfile.TarFile, root: str, host: str, blob: bytes, secret_names: frozenset[str],
                 secret_values: Collection[str], now: float) -> tuple[tuple[str, ...], int]:
    """Adds one host's stream under ``root/host``; returns (units found, files added).  At most
    :data:`MAX_HOST_BYTES` of it is unpacked (a gzip bomb stops there, noted in the bundle)."""
    units: set[str] = set()
    files = 0
    budget = MAX_HOST_BYTES
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as remote:
        for member in remote:
            parts = _member_path(member.name)
            if parts is None or not member.isfile():
                continue
            if parts[-1].startswith("secrets.env"):
                continue  # never, whatever the host sent
            if member.size > budget:
                _add_bytes(tar, f"{root}/{host}/TRUNCATED.txt", f"{member.name} and what followed it: over the "
                           f"{MAX_HOST_BYTES} bytes fleet unpacks per host\n".encode(), now)  # fmt: skip
                files += 1
                break
            budget -= member.size
            if parts[0] == "units" and len(parts) >= 3 and _SAFE_NAME.fullmatch(parts[1]):
                units.add(parts[1])
                dest = (parts[1], *parts[2:])
            elif parts[0] == "host" and len(parts) >= 2:
                dest = parts[1:]
            else:
                dest = parts
            src = remote.extractfile(member)
            if src is None:
                continue
            data = src.read(member.size)
            if dest[-1] == "env":  # the unit's env file: names only, never a value
                dest = (*dest[:-1], "env.names")
                data = env_names(data.decode("utf-8", "replace")).encode()
            if dest[-1] == "docker-inspect.json":
                data = redact_inspect(data.decode("utf-8", "replace"), secret_names, secret_values).encode()
            else:  # logs, NCCL lines, rendered files: a secret's value is masked wherever it shows
                data = _masked_bytes(data, secret_values)
            if dest == ("facts.txt",):
                parsed = facts.parse_facts(data.decode("utf-8", "replace"))
                _add_bytes(tar, f"{root}/{host}/facts.json",
                           json.dumps(facts.to_json(parsed), indent=1, sort_keys=True).encode(), now)
                files += 1
            _add_bytes(tar, "/".join((root, host, *dest)), data, member.mtime or now, member.mode & 0o755 or 0o644)
            files += 1
    return tuple(sorted(units)), files


def _collect_one(deployment: str, tail: int) -> Callable[[Host, Transport], bytes]:
    def one(host: Host, transport: Transport) -> bytes:
        gather = facts.gather_script((host.spec.models_dir, host.spec.cache_dir))
        argv = ("sh", "-c", COLLECT_SCRIPT, "fleet-collect", deployment, str(tail), str(NCCL_LINES), gather,
                FLEET_ROOT, SYSTEMD_DIR, str(MAX_HOST_BYTES))  # fmt: skip
        result = transport.run(argv, timeout=COLLECT_TIMEOUT_S)
        if not result.stdout.startswith(b"\x1f\x8b"):
            raise failure(result, "collect script")
        return result.stdout
    return one


def collect(
    inventory: Inventory,
    catalog: Catalog,
    playbook: Playbook,
    connector: Connector,
    out_path: str | Path,
    *,
    tail: int = DEFAULT_TAIL,
    forks: int = DEFAULT_FORKS,
    now: float | None = None,
    limit: str | None = None,
    secret_values: Collection[str] = (),
) -> CollectReport:
    """Collect from every host the playbook's placements match (``limit``: those of them a
    ``--limit`` pattern matches; parts of groups too) and write ``out_path``.  ``secret_values``:
    the deployment's secrets as this control host reads them, masked wherever they occur in what
    the hosts send (env entries of any name, logs, rendered files)."""
    now = time.time() if now is None else now
    deployment = deployment_name(playbook.name)
    root = f"fleet-collect-{deployment}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}"
    the_plan: Plan | None = None
    plan_error: str | None = None
    try:
        the_plan = planned(Inputs(inventory=inventory, catalog=catalog, playbook=playbook))
    except FleetError as err:
        plan_error = str(err)
    plan_doc = to_jsonable(the_plan) if the_plan is not None else None
    hosts = claimed_hosts(inventory, playbook, the_plan)  # without a plan: the placement hosts
    hosts = limit_hosts(inventory, hosts, limit, what=f"deployment {deployment}")
    secret_names = frozenset(s.name for s in playbook.secrets)
    result = run_all(hosts, _collect_one(deployment, tail), connector=connector, forks=forks)
    outcomes: list[HostOutcome] = []
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    # 0600 from the start: the bundle holds logs, env names and inspect output of every unit.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # a leftover .partial of another mode
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for o in result.outcomes:
            name = o.host.name
            if isinstance(o, Ok):
                try:
                    units, count = _unpack_host(tar, root, name, o.value, secret_names, secret_values, now)
                    outcomes.append(HostOutcome(host=name, status="ok", units=units, files=count))
                except (tarfile.TarError, OSError, EOFError) as err:
                    outcomes.append(HostOutcome(host=name, status="failed", error=f"bad archive: {err}"))
            else:
                status = "unreachable" if isinstance(o, Unreachable) else "failed"
                reason = outcome_reason(o)
                outcomes.append(HostOutcome(host=name, status=status, error=reason))
                _add_bytes(tar, f"{root}/{name}/{status.upper()}.txt", (reason + "\n").encode(), now)
        if plan_doc is not None:
            _add_bytes(tar, f"{root}/plan.json", json.dumps(plan_doc, indent=1, sort_keys=True).encode(), now)
        manifest: dict[str, Any] = {
            "fleet_collect": 1,
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "deployment": deployment,
            "recipe": playbook.recipe,
            "playbook": playbook.path,
            "inventory": inventory.path,
            "tail_lines": tail,
            "plan_error": plan_error,
            "hosts": {h.host: {"status": h.status, "error": h.error or None, "units": list(h.units), "files": h.files}
                      for h in outcomes},
        }
        _add_bytes(tar, f"{root}/manifest.json", json.dumps(manifest, indent=1, sort_keys=True).encode(), now)
    tmp.replace(path)
    return CollectReport(path=str(path), root=root, deployment=deployment, hosts=tuple(outcomes), plan_error=plan_error)


def manifest_of(path: str | Path) -> Mapping[str, Any]:
    """The manifest of a bundle (for tests and tools)."""
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            if member.name.endswith("/manifest.json") and member.name.count("/") == 1:
                src = tar.extractfile(member)
                if src is not None:
                    doc: Mapping[str, Any] = json.loads(src.read())
                    return doc
    raise FleetError(f"{path}: no manifest.json in the bundle")


