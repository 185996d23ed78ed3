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
  runs), ``journalctl``/``systemctl status`` for systemd units, and the rendered files under
  ``/etc/fleet/<name>/<unit>/`` — never ``secrets.env``.

The control node rewrites that into ``<root>/<host>/...`` and ``<root>/<host>/<unit>/...``
(``<root>`` = ``fleet-collect-<deployment>-<UTC time>``), adds ``facts.json`` per host,
``plan.json`` and ``manifest.json`` (what was collected from where, and which hosts were
unreachable or failed: recorded, never fatal).  Secret hygiene on the way: members named
``secrets.env*`` are dropped even if the host sent them, and in ``docker inspect`` the values of
the playbook's secrets and of env names that look secret (TOKEN, SECRET, PASSWORD, ...) are
masked.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from launcher import hostscripts
from launcher.config.recipes import Catalog
from launcher.errors import ExitCode, FleetError
from launcher.execute.fanout import DEFAULT_FORKS, Connector, Ok, Unreachable, run_all
from launcher.execute.transport import Transport
from launcher.model import Host, Inventory, Plan, Playbook
from launcher.output import MASK
from launcher.pipeline import Inputs, claimed_hosts, planned
from launcher.plan import deployment_name, to_jsonable
from launcher.preflight import facts
from launcher.preflight.run import failure, outcome_reason
from launcher.render import FLEET_ROOT, SYSTEMD_DIR

DEFAULT_TAIL = 2000
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


def redact_inspect(text: str, secret_names: frozenset[str]) -> str:
    """``docker inspect`` JSON with the values of secret env entries masked."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    if not isinstance(doc, list):
        return text
    for item in doc:
        config = item.get("Config") if isinstance(item, dict) else None
        if not isinstance(config, dict):
            continue
        env = config.get("Env")
        if isinstance(env, list):
            masked = []
            for entry in env:
                name, sep, _ = str(entry).partition("=")
                masked.append(f"{name}={MASK}" if sep and (name in secret_names or _SECRETISH.search(name)) else entry)
            config["Env"] = masked
    return json.dumps(doc, indent=1)


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


def _unpack_host(tar: tarfile.TarFile, root: str, host: str, blob: bytes, secret_names: frozenset[str],
                 now: float) -> tuple[tuple[str, ...], int]:
    """Adds one host's stream under ``root/host``; returns (units found, files added)."""
    units: set[str] = set()
    files = 0
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as remote:
        for member in remote:
            parts = _member_path(member.name)
            if parts is None or not member.isfile():
                continue
            if parts[-1].startswith("secrets.env"):
                continue  # never, whatever the host sent
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
            data = src.read()
            if dest[-1] == "docker-inspect.json":
                data = redact_inspect(data.decode("utf-8", "replace"), secret_names).encode()
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
                FLEET_ROOT, SYSTEMD_DIR)  # fmt: skip
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
) -> CollectReport:
    """Collect from every host the playbook's placements match and write ``out_path``."""
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
    secret_names = frozenset(s.name for s in playbook.secrets)
    result = run_all(hosts, _collect_one(deployment, tail), connector=connector, forks=forks)
    outcomes: list[HostOutcome] = []
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    with tarfile.open(tmp, "w:gz") as tar:
        for o in result.outcomes:
            name = o.host.name
            if isinstance(o, Ok):
                try:
                    units, count = _unpack_host(tar, root, name, o.value, secret_names, now)
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


