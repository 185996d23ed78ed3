"""Preflight: catch before launch what engines otherwise fail on silently.

Pure: :func:`evaluate` takes a plan, the inventory, the recipe, each host's :class:`HostFacts`
and the results of the remote probes (:class:`ProbeResults`), and returns one :class:`Check` per
(unit or host, rule).  The probes are scripts built here (:func:`host_probe_script`,
:func:`listener_argv`, :func:`client_argv`, :func:`cleanup_argv`) with parsers for what they
print; :mod:`launcher.preflight.run` runs them, so this module never does I/O.

Why each rule exists (operator-pain-points.md): HCAs missing or down make NCCL fall back to TCP
without a word; the RoCE v2 GID index differs per host; NCCL/Gloo bind the wrong NIC when the
data IP is not on the named interface; mismatched MTUs stall RDMA; weights missing on one rank
show up only after rank 0 has loaded for ten minutes; a rank that cannot reach rank 0's
dist-init port hangs in rendezvous until the engine's own timeout.

Probes and what the hosts need (documented in ``fleet preflight --help`` too):
- ``sh``, ``ss`` (iproute2; ``netstat`` as fallback), ``du``, ``find``, ``docker`` where units
  run in containers, and ``python3`` (standard library only) for the reachability probes.
  A host without python3 gets a warning and no reachability verdict, never a false pass.
- Reachability: nothing listens on rank 0's dist-init / bootstrap / master ports before launch,
  so rank 0's host starts a short-lived listener (``python3``, detached, bound to its data IP,
  killed right after the round; it exits on its own after :data:`LISTENER_LIFE_S` anyway), then
  every other rank connects with its source address bound to its own data IP, with a timeout.
  A port our own running unit already holds is connected to as it is.
- /dev/infiniband inside the image: a real ``docker run --rm --network none --entrypoint ls``
  of the unit's image with the rendered ``--device``/``--cap-add``/``--ulimit`` flags and the
  playbook's raw docker args (nothing is pulled: an image not on the host yet is a warning).
  Verdict: visible → pass; not visible while the plan renders ``--device /dev/infiniband`` →
  fail (driver, device nodes or docker are broken); not visible because the playbook drops
  ``--device`` (``overrides.drop_docker_flags``, as the sandbox playbooks do) → warn, every
  time: RDMA is off by the operator's choice and NCCL/Mooncake run over TCP.
- Programs inside the images: every program a host's units run (``--entrypoint`` ``argv[0]``, or
  the package of ``python3 -m MODULE``) is looked up in its image on that host, one ``docker run
  --rm --network none --entrypoint sh`` per image per host (``hostscripts/image-programs.sh``),
  beside the other probe sections: a router or Mooncake master whose image lacks its program
  (they run from the engine image unless the recipe's or playbook's ``images`` say otherwise)
  fails preflight, naming host, image and program, instead of crash-looping after ``up``.  An
  image not on the host yet is a warning, as above.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Iterable, Literal, Mapping, Sequence

from launcher import hostscripts, network
from launcher.engines import flags
from launcher.engines.context import BOOTSTRAP, DIST_INIT, MASTER_PORT, NIXL_SIDE_CHANNEL, RAY
from launcher.model import Host, Inventory, Plan, Playbook, Recipe, Unit
from launcher.weights import manifest as weights_manifest
from launcher.preflight.facts import HostFacts, sections_script, split_sections
from launcher.render import rdma_flags

Status = Literal["pass", "warn", "fail"]
Level = Literal["cheap", "full"]

# Free space below which weights/caches are a warning (the recipe's weight size is not known
# for every entry, so this is a floor, not a fit check).
MIN_FREE_BYTES = 50 * 1024**3
CLOCK_TOLERANCE_S = 1.0
CONNECT_TIMEOUT_S = 3.0
LISTENER_LIFE_S = 60.0  # a listener left behind by a killed preflight exits by itself
LISTENER_MARK = "fleet-preflight-listener"
PROBE_CONTAINER_PREFIX = "fleet-preflight-"
MANIFEST = "fleet.sha256"
DU_TIMEOUT_S = 120
DOCKER_RUN_TIMEOUT_S = 60
NETWORK_ENV_PREFIXES = ("NCCL_", "GLOO_", "UCX_", "MC_", "MOONCAKE_", "HCCL_", "TP_SOCKET", "SGLANG_HOST_IP")
GID_ENV = ("NCCL_IB_GID_INDEX", "MC_GID_INDEX", "UCX_IB_GID_INDEX")
OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
STAGE_FIX = "fleet weights stage PLAYBOOK -i INVENTORY --source DIR|HOST:PATH"


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    host: str
    unit: str  # "" for host-wide checks; the group for group checks
    name: str
    status: Status
    message: str
    fix: str = ""

    def line(self) -> str:
        """One line for the operator: status, host[/unit], check, message, fix."""
        where = f"{self.host}/{self.unit}" if self.unit else self.host
        return f"{self.status}: {where}: {self.name}: {self.message}" + (f" (fix: {self.fix})" if self.fix else "")


# ---------------------------------------------------------------------------------------------
# Probe results
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PathProbe:
    exists: bool
    bytes: int | None = None  # None: unknown (du timed out)
    files: int | None = None
    manifest: str | None = None  # None: no fleet.sha256; "ok"; else what is wrong with it
    staged: str | None = None  # None: no fleet-weights.json; "ok"; else which files differ from it
    revision: str | None = None  # the fleet-weights.json revision


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageProbe:
    status: Literal["visible", "absent", "no-image", "error"]
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgramsProbe:
    """Which of the programs its units run an image on a host lacks."""

    status: Literal["checked", "no-image", "error"]
    missing: tuple[str, ...] = ()
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReachTarget:
    """A port some ranks must reach on another rank's host before they can start."""

    label: str  # dist-init, master-port, ray, bootstrap, nixl-side-channel, mooncake-master
    group: str  # the group whose port it is
    unit: str  # the unit that will listen there
    host: str
    ip: str  # the listener host's data IP
    port: int
    clients: tuple[tuple[str, str, str], ...]  # (host, unit, source IP)

    @property
    def key(self) -> str:
        return f"{self.ip}:{self.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Reach:
    target: ReachTarget
    client: str  # host
    unit: str
    error: str | None  # None: reached; else why not
    probed: bool = True  # False: the probe could not run (error says why)
    unreachable: str = ""  # not probed because SSH could not reach this host (error says how)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeResults:
    """What the remote probes found, per host (absent = not probed)."""

    listening_ports: Mapping[str, frozenset[int]] = field(default_factory=dict)
    running_units: Mapping[str, frozenset[str]] = field(default_factory=dict)  # our own units
    paths: Mapping[str, Mapping[str, PathProbe]] = field(default_factory=dict)
    images: Mapping[tuple[str, str], ImageProbe] = field(default_factory=dict)  # (host, unit)
    programs: Mapping[tuple[str, str], ProgramsProbe] = field(default_factory=dict)  # (host, image)
    reach: tuple[Reach, ...] = ()
    listener_errors: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (host, ip:port)
    clock_offset_s: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # (offset, ±)
    errors: Mapping[str, str] = field(default_factory=dict)  # host -> why its probe failed


# ---------------------------------------------------------------------------------------------
# What each unit needs (pure, from the plan)
# ---------------------------------------------------------------------------------------------


def data_plane(unit: Unit) -> bool:
    """Ranks that talk to other hosts over the data plane (multi-node ranks, PD workers)."""
    return unit.role in ("rank", "prefill", "decode") and (unit.nnodes > 1 or unit.role != "rank")


def _to_host(unit: Unit, container_path: str) -> str | None:
    """A container path mapped back to the host through the unit's mounts (native: as is)."""
    if unit.container is None:
        return container_path
    for m in sorted(unit.container.mounts, key=lambda m: -len(m.container)):
        root = m.container.rstrip("/")
        if container_path == m.container or container_path.startswith(root + "/"):
            return m.host.rstrip("/") + container_path[len(root):] if root else m.host
    return None


def _hf_cache(unit: Unit, repo: str) -> str | None:
    """Host path of ``repo`` in the Hugging Face hub cache the unit's process uses."""
    env = unit.env
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not hub:
        home = env.get("HF_HOME") or ("/root/.cache/huggingface" if unit.container else None)
        if home is None:
            return None
        hub = posixpath.join(home, "hub")
    host = _to_host(unit, hub)
    return posixpath.join(host, "models--" + repo.replace("/", "--")) if host else None


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightNeed:
    what: str  # "weights" / "draft weights"
    value: str  # as the engine gets it: a path, or a Hugging Face repo id
    local: str | None = None  # host path when the engine is given a path
    staged: str | None = None  # repo id: where the fleet convention stages it ({models_dir}/<repo>)
    hf_cache: str | None = None  # repo id: the HF cache entry the engine will use
    beside: bool = False  # must sit beside the target on every rank (DSPARK draft)
    offline: bool = False  # HF_HUB_OFFLINE: nothing can be downloaded


def _model_value(unit: Unit, recipe: Recipe) -> str | None:
    argv = unit.argv
    if recipe.engine == "sglang":
        return flags.value(argv, ("--model-path", "--model"))
    head, _ = flags.split_items(argv)
    if "serve" in head and head.index("serve") + 1 < len(head):
        return head[head.index("serve") + 1]
    return flags.value(argv, ("--model",))


def _draft_value(unit: Unit, recipe: Recipe) -> str | None:
    if recipe.engine == "sglang":
        return flags.value(unit.argv, ("--speculative-draft-model-path",))
    raw = flags.value(unit.argv, ("--speculative-config",))
    try:
        config = json.loads(raw) if raw else None
    except ValueError:
        return None
    model = config.get("model") if isinstance(config, dict) else None
    return model if isinstance(model, str) else None


def _need(unit: Unit, host: Host, what: str, value: str, beside: bool = False) -> WeightNeed:
    offline = any(unit.env.get(k, "").lower() in ("1", "true", "yes") for k in OFFLINE_ENV)
    if value.startswith("/"):
        return WeightNeed(what=what, value=value, local=_to_host(unit, value), beside=beside, offline=offline)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", value):
        return WeightNeed(what=what, value=value, staged=posixpath.join(host.spec.models_dir, value),
                          hf_cache=_hf_cache(unit, value), beside=beside, offline=offline)
    return WeightNeed(what=what, value=value, offline=offline)


def weight_needs(unit: Unit, host: Host, recipe: Recipe) -> tuple[WeightNeed, ...]:
    """The weights an engine unit reads: target, draft when the recipe has one, tokenizer when
    the engine is given a separate one."""
    if unit.role not in ("single", "rank", "prefill", "decode"):
        return ()
    out = []
    # A Ray node loads the weights for the one `vllm serve` on rank 0: vLLM's model is the
    # positional argument, which overrides cannot change, so the recipe's model is the final one.
    model = recipe.model if unit.argv[:1] == ("ray",) else _model_value(unit, recipe)
    if model:
        out.append(_need(unit, host, "weights", model))
    draft = None if unit.argv[:1] == ("ray",) else _draft_value(unit, recipe)
    if draft:
        beside = bool(recipe.speculative and recipe.speculative.draft_beside_target)
        out.append(_need(unit, host, "draft weights", draft, beside))
    tokenizer = None if unit.argv[:1] == ("ray",) else flags.value(
        unit.argv, ("--tokenizer-path",) if recipe.engine == "sglang" else ("--tokenizer",))
    if tokenizer and tokenizer != model:
        out.append(_need(unit, host, "tokenizer", tokenizer))
    return tuple(out)


def probe_paths(plan: Plan, inventory: Inventory, recipe: Recipe) -> dict[str, tuple[str, ...]]:
    """Per host, every path the weight checks look at."""
    out: dict[str, set[str]] = {}
    for u in plan.units:
        for need in weight_needs(u, inventory.host(u.host), recipe):
            for p in (need.local, need.staged, need.hf_cache):
                if p:
                    out.setdefault(u.host, set()).add(p)
    return {h: tuple(sorted(ps)) for h, ps in out.items()}


def _rdma_container(u: Unit, inventory: Inventory) -> bool:
    """A containerised data-plane rank on a host with an RDMA fabric."""
    return u.container is not None and data_plane(u) and inventory.host(u.host).spec.fabric != "none"


def _device_dropped(u: Unit) -> bool:
    """The rendered flags pass no /dev/infiniband and nothing else that could (no extra docker
    args): the container cannot see it, so there is nothing to run to find out."""
    return u.container is not None and "/dev/infiniband" not in u.container.devices and not u.container.extra_args


def image_units(plan: Plan, inventory: Inventory) -> tuple[Unit, ...]:
    """Units whose image gets the /dev/infiniband probe (a ``docker run`` on the host):
    containerised data-plane ranks on hosts with an RDMA fabric whose flags pass the device (one
    per host and image/flags)."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    out = []
    for u in plan.units:
        if not _rdma_container(u, inventory) or _device_dropped(u):
            continue
        key = (u.host, rdma_probe_flags(u))
        if key not in seen:
            seen.add(key)
            out.append(u)
    return tuple(out)


def program_of(argv: Sequence[str]) -> str:
    """The program a unit's image must provide: ``argv[0]`` (docker's ``--entrypoint``), or
    ``python3 -m MODULE`` for a module the image's python3 runs."""
    if len(argv) > 2 and tuple(argv[:2]) == ("python3", "-m"):
        return f"python3 -m {argv[2]}"
    return argv[0]


ImagePrograms = tuple[tuple[str, tuple[str, ...]], ...]  # (image, programs run from it), by image


def image_programs(plan: Plan) -> dict[str, ImagePrograms]:
    """host -> the images its containerised units run and the programs each must provide (one
    probe per image per host)."""
    found: dict[str, dict[str, set[str]]] = {}
    for u in plan.units:
        if u.container is not None and u.argv:
            found.setdefault(u.host, {}).setdefault(u.container.image, set()).add(program_of(u.argv))
    return {h: tuple((i, tuple(sorted(p))) for i, p in sorted(imgs.items())) for h, imgs in found.items()}


_IMAGE_PROGRAMS = hostscripts.text("image-programs.sh")


def rdma_probe_flags(unit: Unit) -> tuple[str, ...]:
    """The rendered docker flags that decide what the container sees of RDMA (render's
    :func:`launcher.render.rdma_flags`), the unit's extra docker args, and the image."""
    c = unit.container
    assert c is not None
    return (*rdma_flags(c), *c.extra_args, c.image)


def _leader_ports(unit: Unit) -> list[tuple[str, int]]:
    out = []
    for name, label in ((DIST_INIT, "dist-init"), (MASTER_PORT, "master-port"), (RAY, "ray")):
        if name in unit.ports and unit.nnodes > 1:
            out.append((label, unit.ports[name]))
    return out


def reach_targets(plan: Plan, inventory: Inventory) -> tuple[ReachTarget, ...]:
    """Every (listener, port, clients) the ranks need before launch: each group's rank 0
    dist-init (SGLang) / master port (vLLM mp) / Ray head from its other ranks; every PD prefill
    leader's bootstrap port (and vLLM's NIXL side channel) from the other prefill ranks of its
    instance and every decode rank; the Mooncake master from every engine rank using it."""

    def ip(host: str) -> str:
        return network.data_ip(inventory.host(host))

    by_group: dict[str, list[Unit]] = {}
    for u in plan.units:
        by_group.setdefault(u.group, []).append(u)
    decode = [u for u in plan.units if u.role == "decode"]
    engines = [u for u in plan.units if u.role in ("single", "rank", "prefill", "decode")]
    out: list[ReachTarget] = []

    position = {h.name: i for i, h in enumerate(inventory.hosts)}

    def add(label: str, leader: Unit, port: int, clients: Iterable[Unit]) -> None:
        seen: dict[str, tuple[str, str, str]] = {}
        for c in clients:
            if c.host != leader.host and c.host not in seen:
                seen[c.host] = (c.host, c.name, ip(c.host))
        if seen:
            ordered = tuple(sorted(seen.values(), key=lambda c: position[c[0]]))
            out.append(ReachTarget(label=label, group=leader.group, unit=leader.name, host=leader.host,
                                   ip=ip(leader.host), port=port, clients=ordered))

    for group, members in by_group.items():
        leader = min(members, key=lambda u: u.rank)
        for label, port in _leader_ports(leader):
            add(label, leader, port, [m for m in members if m.rank > 0])
        if leader.role == "prefill":
            for name, label in ((BOOTSTRAP, "bootstrap"), (NIXL_SIDE_CHANNEL, "nixl-side-channel")):
                if name in leader.ports:
                    add(label, leader, leader.ports[name], [m for m in members if m.rank > 0] + decode)
    for master in (u for u in plan.units if u.role == "mooncake-master"):
        for name in ("mooncake_master", "mooncake_metadata"):
            if name in master.ports:
                add(name.replace("_", "-"), master, master.ports[name], engines)
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Probe scripts and parsers
# ---------------------------------------------------------------------------------------------


def host_probe_script(paths: Sequence[str], images: Sequence[Unit] = (), level: Level = "cheap",
                      programs: ImagePrograms = (), deployment: str = "") -> str:
    """One shell script per host: listening TCP ports, our running units, each path's size
    and file count with its fleet.sha256 verdict, the /dev/infiniband probe per image unit, and
    the programs each image of ``programs`` lacks (its probe container named after
    ``deployment``, so a leftover of a killed run is removed by the next one).

    Sections: ``ports``, ``units``, ``path:<i>`` (``exists bytes files``), ``manifest:<i>``,
    ``image:<unit>``, ``programs:<j>`` (``i`` indexes ``paths``, ``j`` ``programs``)."""
    parts = [
        ("ports", "(ss -Htln 2>/dev/null || netstat -tln 2>/dev/null) | awk '{print $4}'"),
        ("units", "docker ps --format '{{.Names}}' 2>/dev/null; "
                 "systemctl list-units --type=service --state=active --plain --no-legend 'fleet-*' "
                 "2>/dev/null | awk '{print $1}'; true"),
    ]
    for i, p in enumerate(paths):
        q = shlex.quote(p)
        parts.append((
            f"path:{i}",
            f"if [ -e {q} ]; then b=$(fleet_t {DU_TIMEOUT_S} du -sbL {q} 2>/dev/null | cut -f1); "
            f"n=$(find -L {q} -type f 2>/dev/null | wc -l); echo \"1 ${{b:--}} $n\"; else echo '0 - -'; fi",
        ))
        m = shlex.quote(posixpath.join(p, MANIFEST))
        if level == "full":
            verify = (f"cd {q} && o=$(sha256sum -c --quiet {MANIFEST} 2>&1); r=$?; "
                      f"printf '%s\\n' \"$o\" | head -n 20; echo \"listed $(grep -c . {MANIFEST})\"; exit $r")
        else:
            verify = (f"cd {q} && n=0; while read -r s f; do f=${{f#\\*}}; n=$((n+1)); "
                      f"[ -f \"$f\" ] || echo \"$f: missing\"; done < {MANIFEST}; echo \"listed $n\"")
        parts.append((f"manifest:{i}", f"if [ -f {m} ]; then ( {verify} ); else echo none; fi"))
        w = shlex.quote(posixpath.join(p, weights_manifest.MANIFEST_NAME))
        parts.append((f"weights:{i}", f"if [ -f {w} ]; then cat {w}; echo {_FILES_MARK}; "
                                      f"find {q} -type f -printf '%s %Ts %P\\n'; fi"))
    for u in images:
        name = PROBE_CONTAINER_PREFIX + u.name
        assert u.container is not None
        run = shlex.join(("docker", "run", "--rm", "--name", name, "--network", "none",
                          *rdma_probe_flags(u)[:-1], "--entrypoint", "ls", u.container.image,
                          "-1", "/dev/infiniband"))
        image = shlex.quote(u.container.image)
        parts.append((
            f"image:{u.name}",
            f"docker rm -f {shlex.quote(name)} >/dev/null 2>&1; "
            f"if ! docker image inspect {image} >/dev/null 2>&1; then echo 'fleet: image not present'; exit 3; fi; "
            f"fleet_t {DOCKER_RUN_TIMEOUT_S} {run}",
        ))
    for j, (image, progs) in enumerate(programs):
        name = f"{PROBE_CONTAINER_PREFIX}{deployment}-programs-{j}"
        run = shlex.join(("docker", "run", "--rm", "--name", name, "--network", "none", "--entrypoint", "sh",
                          image, "-c", _IMAGE_PROGRAMS, "image-programs", *progs))
        parts.append((
            f"programs:{j}",
            f"docker rm -f {shlex.quote(name)} >/dev/null 2>&1; "
            f"if ! docker image inspect {shlex.quote(image)} >/dev/null 2>&1; then echo 'fleet: image not present'; "
            f"exit 3; fi; fleet_t {DOCKER_RUN_TIMEOUT_S} {run}",
        ))
    return sections_script(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostProbe:
    listening: frozenset[int]
    running: frozenset[str]
    paths: Mapping[str, PathProbe]
    images: Mapping[str, ImageProbe]  # unit name -> verdict
    programs: Mapping[str, ProgramsProbe] = field(default_factory=dict)  # image -> verdict


def _manifest_verdict(rc: int, text: str, level: Level) -> str | None:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines == ["none"]:
        return None
    listed = next((int(ln.split()[1]) for ln in lines if re.fullmatch(r"listed \d+", ln)), 0)
    bad = [ln for ln in lines if not re.fullmatch(r"listed \d+", ln)]
    if level == "cheap":
        missing = [ln.rsplit(": missing", 1)[0] for ln in bad if ln.endswith(": missing")]
        if not missing:
            return "ok"
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        return f"{len(missing)} of {listed} files listed in {MANIFEST} are missing ({shown})"
    if rc == 0:
        return "ok"
    failed = [ln.rsplit(":", 1)[0] for ln in bad if ln.endswith("FAILED") or ln.endswith("FAILED open or read")]
    shown = ", ".join(failed[:3]) + (", ..." if len(failed) > 3 else "")
    return f"{len(failed)} of {listed} files fail {MANIFEST} ({shown})" if failed else (bad[-1] if bad else f"sha256sum exited {rc}")


def _image_verdict(rc: int, text: str) -> ImageProbe:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if rc == 0:
        devices = [ln for ln in lines if not ln.startswith(("WARNING", "ls:"))]
        if any(d.startswith("uverbs") for d in devices):
            return ImageProbe(status="visible", detail=" ".join(devices))
        return ImageProbe(status="absent", detail="no uverbs device" + (f" (lists {' '.join(devices)})" if devices else ""))
    if rc == 3 and "fleet: image not present" in lines:
        return ImageProbe(status="no-image")
    if rc == 124:
        return ImageProbe(status="error", detail=f"docker run did not finish within {DOCKER_RUN_TIMEOUT_S}s")
    if any("/dev/infiniband" in ln and "No such file" in ln and ln.startswith("ls:") for ln in lines):
        return ImageProbe(status="absent", detail="no /dev/infiniband in the container")
    err = next((ln for ln in lines if ln.startswith("docker:")), lines[0] if lines else f"docker run exited {rc}")
    err = err.removeprefix("docker: ").removeprefix("Error response from daemon: ")
    return ImageProbe(status="error", detail=err)


def _programs_verdict(rc: int, text: str) -> ProgramsProbe:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if rc == 0 and lines[-1:] == ["checked"]:
        return ProgramsProbe(status="checked", missing=tuple(ln[len("missing "):] for ln in lines
                                                            if ln.startswith("missing ")))
    if rc == 3 and "fleet: image not present" in lines:
        return ProgramsProbe(status="no-image")
    if rc == 124:
        return ProgramsProbe(status="error", detail=f"docker run did not finish within {DOCKER_RUN_TIMEOUT_S}s")
    err = next((ln for ln in lines if ln.startswith("docker:")), lines[-1] if lines else f"docker run exited {rc}")
    return ProgramsProbe(status="error", detail=err.removeprefix("docker: ").removeprefix("Error response from daemon: "))


_FILES_MARK = "--fleet-weights-files--"


def _staged_verdict(text: str) -> tuple[str | None, str | None]:
    """(verdict, revision) of a ``weights:<i>`` section: the dir's fleet-weights.json and its
    files (size, mtime), compared the way ``fleet weights verify`` does without --full."""
    if not text.strip():
        return None, None
    doc, _, listing = text.partition(_FILES_MARK)
    try:
        manifest = weights_manifest.from_json(json.loads(doc))
    except ValueError as err:
        return f"{weights_manifest.MANIFEST_NAME}: {err}", None
    files: dict[str, tuple[int, int]] = {}
    for line in listing.splitlines():
        cells = line.split(" ", 2)
        if len(cells) == 3 and cells[0].isdigit() and cells[1].isdigit() and cells[2].split("/")[0] not in weights_manifest.SKIP:
            files[cells[2]] = (int(cells[0]), int(cells[1]))
    bad = weights_manifest.compare(manifest, weights_manifest.Listing(exists=True, files=files, manifest=manifest))
    if not bad:
        return "ok", manifest.revision
    shown = ", ".join(m.line() for m in bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
    return f"{len(bad)} file(s) differ from {weights_manifest.MANIFEST_NAME}: {shown}", manifest.revision


def parse_host_probe(text: str, paths: Sequence[str], level: Level = "cheap", programs: ImagePrograms = ()) -> HostProbe:
    s = split_sections(text)
    ports: set[int] = set()
    for line in s.get("ports", (0, ""))[1].splitlines():
        port = line.rsplit(":", 1)[-1] if ":" in line else ""
        if port.isdigit():
            ports.add(int(port))
    running = frozenset(
        ln.strip().removesuffix(".service") for ln in s.get("units", (0, ""))[1].splitlines() if ln.strip()
    )
    found: dict[str, PathProbe] = {}
    for i, p in enumerate(paths):
        cells = s.get(f"path:{i}", (0, ""))[1].split()
        if len(cells) != 3:
            continue
        exists = cells[0] == "1"
        m_rc, m_text = s.get(f"manifest:{i}", (0, "none"))
        staged, revision = _staged_verdict(s.get(f"weights:{i}", (0, ""))[1]) if exists else (None, None)
        found[p] = PathProbe(
            exists=exists,
            bytes=int(cells[1]) if cells[1].isdigit() else None,
            files=int(cells[2]) if cells[2].isdigit() else None,
            manifest=_manifest_verdict(m_rc, m_text, level) if exists else None,
            staged=staged,
            revision=revision,
        )
    images = {name.split(":", 1)[1]: _image_verdict(rc, body) for name, (rc, body) in s.items() if name.startswith("image:")}
    progs = {image: _programs_verdict(*s[f"programs:{j}"]) for j, (image, _) in enumerate(programs)
             if f"programs:{j}" in s}
    return HostProbe(listening=frozenset(ports), running=running, paths=found, images=images, programs=progs)


# Reachability: a detached listener on the leader's host and a client per other host.  Both are
# python3 with the standard library only; argv carries the data, the code is fixed.

_LISTENER = hostscripts.text("reach-listener.py")
_CLIENT = hostscripts.text("reach-client.py")


def listener_argv(targets: Sequence[ReachTarget], life_s: float = LISTENER_LIFE_S) -> tuple[str, ...]:
    spec = json.dumps([[t.ip, t.port] for t in targets])
    return ("python3", "-c", _LISTENER, LISTENER_MARK, spec, f"{life_s:g}")


def _last_json(text: str, who: str) -> dict[str, object]:
    """The JSON object on the last line a reachability script printed (ValueError otherwise)."""
    try:
        doc = json.loads(text.strip().splitlines()[-1]) if text.strip() else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise ValueError(f"{who} printed {text.strip()[:200]!r}")
    return doc


def parse_listener(text: str) -> tuple[int | None, dict[str, str]]:
    """(pid of the detached listener or None, ``ip:port`` -> bind error)."""
    doc = _last_json(text, "listener")
    pid = doc.get("pid")
    errors = doc.get("errors")
    return (pid if isinstance(pid, int) else None), ({str(k): str(v) for k, v in errors.items()}
                                                     if isinstance(errors, dict) else {})  # fmt: skip


def client_argv(jobs: Sequence[tuple[str, str, int]], timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[str, ...]:
    """``jobs``: (source IP, destination IP, port)."""
    return ("python3", "-c", _CLIENT, "fleet-preflight-client",
            json.dumps([[src, dst, port, timeout_s] for src, dst, port in jobs]))


def parse_client(text: str) -> dict[str, str | None]:
    """``dst_ip:port`` -> None (connected) or why not."""
    return {str(k): (None if v is None else str(v)) for k, v in _last_json(text, "client").items()}


def cleanup_argv(pid: int) -> tuple[str, ...]:
    """Kill our listener ``pid`` only if that pid still runs our listener (pids are reused)."""
    script = (f"p=$1; if tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q {LISTENER_MARK}; "
              "then kill \"$p\"; fi; true")
    return ("sh", "-c", script, "fleet-preflight-cleanup", str(pid))


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------


def _check(host: str, unit: str, name: str, ok: bool, good: str, bad: str, fix: str,
           bad_status: Status = "fail") -> Check:
    return Check(host=host, unit=unit, name=name, status="pass" if ok else bad_status,
                 message=good if ok else bad, fix="" if ok else fix)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def parse_size(text: str) -> int | None:
    """Docker's size spelling (``32g``, ``512m``, ``1gb``) in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([bkmgt]?)b?", text.strip().lower())
    if not m:
        return None
    scale = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}[m.group(2)]
    return int(float(m.group(1)) * scale)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Needs:
    """What a host must offer, from its planned units (or from the recipe when planning failed)."""

    gpus: int  # device indices used: 0..gpus-1
    containers: bool
    docker_gpus: bool  # some unit passes --gpus
    data_plane: bool
    shm: int | None  # bytes wanted in the host's /dev/shm (units with --ipc host)


def _needs_of(units: Sequence[Unit]) -> _Needs:
    shm = [parse_size(u.container.shm_size) for u in units
           if u.container is not None and u.container.ipc_host and u.container.shm_size]
    return _Needs(
        gpus=max((max(u.gpus) + 1 for u in units if u.gpus), default=0),
        containers=any(u.container is not None for u in units),
        docker_gpus=any(u.container is not None and u.container.gpus for u in units),
        data_plane=any(data_plane(u) for u in units),
        shm=max((s for s in shm if s), default=None),
    )


def recipe_needs(recipe: Recipe, host: Host, playbook: Playbook | None = None) -> _Needs:
    """What a host of ``recipe`` needs when there is no plan to tell (the playbook's dropped
    docker flags still apply)."""
    runtime = (playbook.runtime if playbook else None) or host.spec.runtime
    dropped = playbook.overrides.drop_docker_flags if playbook else ()
    shm = (playbook.overrides.shm_size if playbook else None) or recipe.shm_size
    return _Needs(gpus=recipe.hardware.gpus_per_node, containers=runtime == "docker",
                  docker_gpus=runtime == "docker" and recipe.engine != "vllm-ascend" and "--gpus" not in dropped,
                  data_plane=recipe.topology != "single",
                  shm=parse_size(shm) if "--shm-size" not in dropped and "--ipc" not in dropped else None)


def _docker_fix(error: str) -> str:
    if "permission denied" in error:
        return "connect as root or add the SSH user to the docker group"
    return "start the docker daemon (systemctl start docker) and check it answers: docker info"


def _accelerator_checks(h: str, recipe: Recipe, hf: HostFacts, need: int) -> list[Check]:
    if recipe.engine == "vllm-ascend":
        if hf.npu_error:
            return [Check(host=h, unit="", name="npus", status="fail", message=f"npu-smi: {hf.npu_error}",
                          fix="check the Ascend driver and that no other process holds the NPUs")]
        return [_check(h, "", "npus", len(hf.npus) >= need, f"{len(hf.npus)} NPUs",
                       f"{len(hf.npus)} NPUs found, units need {need}",
                       "check npu-smi info and the Ascend driver")]
    out: list[Check] = []
    if not hf.gpus:
        if hf.gpu_error:
            message = f"nvidia-smi: {hf.gpu_error}"
        elif "gpus" in hf.missing_tools:
            message = "nvidia-smi not found: no NVIDIA driver installed"
        else:
            message = "nvidia-smi found no GPU"
        return [Check(host=h, unit="", name="driver", status="fail", message=message,
                      fix="install/load the NVIDIA driver; nvidia-smi must list the GPUs")]
    out.append(Check(host=h, unit="", name="driver", status="pass",
                     message=f"driver {hf.gpus[0].driver}" + (f", CUDA {hf.cuda_version}" if hf.cuda_version else "")))
    skus = sorted({g.sku or g.name for g in hf.gpus})
    ok_sku = all(g.sku in recipe.hardware.skus for g in hf.gpus)
    out.append(_check(h, "", "gpu-sku", ok_sku, f"{len(hf.gpus)}x {', '.join(skus)}",
                      f"GPUs are {', '.join(skus)}; recipe {recipe.id} needs {' or '.join(recipe.hardware.skus)}",
                      "place the recipe on matching hosts (fleet recipes fit)"))
    out.append(_check(h, "", "gpu-count", len(hf.gpus) >= need, f"{len(hf.gpus)} GPUs",
                      f"{len(hf.gpus)} GPUs found, units use indices up to {need - 1}",
                      "fix gpu_count in the inventory or the placement"))
    want = recipe.hardware.min_gpu_memory_gib
    weights = recipe.measured.weights_gib_per_card
    known = [g.memory_mib for g in hf.gpus if g.memory_mib]
    if want is not None and known:
        have = min(known) // 1024
        out.append(_check(h, "", "gpu-memory", have >= want, f"{have} GiB per GPU",
                          f"{have} GiB per GPU, recipe needs {want} GiB",
                          "place the recipe on hosts with larger GPUs"))
    elif weights is not None and known:
        have_gib = min(known) / 1024
        out.append(_check(h, "", "gpu-memory", have_gib > weights, f"{have_gib:.0f} GiB per GPU",
                          f"{have_gib:.0f} GiB per GPU cannot hold the recipe's {weights:g} GiB of weights per card",
                          "place the recipe on hosts with larger GPUs"))
    mig = sorted(i for i in hf.mig_enabled if i < need)
    if mig:
        shown = ", ".join(map(str, mig))
        out.append(Check(host=h, unit="", name="mig", status="fail",
                         message=f"MIG is enabled on GPU {shown}: engines would see MIG slices, not whole GPUs",
                         fix=f"nvidia-smi -i {mig[0]} -mig 0 on each such GPU, then reset it (nvidia-smi -r)"))
    return out


def _host_checks(host: Host, needs: _Needs, recipe: Recipe, hf: HostFacts | None,
                 unreachable: str | None = None) -> list[Check]:
    h = host.name
    if hf is None:
        if unreachable:
            return [Check(host=h, unit="", name="ssh", status="fail", message=f"unreachable: {unreachable}",
                          fix=f"check SSH to {h}: fleet run -i <inventory> {h} -- true")]
        return [Check(host=h, unit="", name="facts", status="fail",
                      message="no facts gathered", fix=f"run: fleet facts -i <inventory> --limit {h}")]
    out: list[Check] = []
    if needs.gpus:
        out += _accelerator_checks(h, recipe, hf, needs.gpus)
    if needs.containers:
        if "docker" in hf.missing_tools:
            out.append(Check(host=h, unit="", name="docker", status="fail", message="docker is not installed",
                             fix="install docker (docker-ce or docker.io)"))
        elif hf.docker_version is None:
            err = hf.docker_error or "docker daemon not answering"
            out.append(Check(host=h, unit="", name="docker", status="fail",
                             message=f"docker daemon not answering: {err}", fix=_docker_fix(err)))
        else:
            out.append(Check(host=h, unit="", name="docker", status="pass", message=f"docker {hf.docker_version}"))
            if needs.docker_gpus:
                ok = "nvidia" in hf.docker_runtimes or bool(hf.nvidia_toolkit)
                have = "nvidia runtime registered" if "nvidia" in hf.docker_runtimes else "nvidia-container-toolkit installed"
                out.append(_check(h, "", "nvidia-runtime", ok, have,
                                  "docker cannot pass GPUs (--gpus): no nvidia runtime and no NVIDIA container "
                                  "toolkit on the host",
                                  "install nvidia-container-toolkit, run nvidia-ctk runtime configure "
                                  "--runtime=docker and restart docker"))
    spec = host.spec
    if needs.data_plane:
        out.extend(_fabric_checks(host, hf))
    for label, d in (("models", spec.models_dir), ("cache", spec.cache_dir)):
        disk = hf.disk(d)
        if disk is not None:
            out.append(_check(h, "", f"disk {d}", disk.free >= MIN_FREE_BYTES,
                              f"{_size(disk.free)} free on {disk.mount}",
                              f"only {_size(disk.free)} free on {disk.mount} ({label} dir {d})",
                              f"free space for {'weights' if label == 'models' else 'caches'} under {d}",
                              bad_status="warn"))
    shm = hf.disk("/dev/shm")
    if needs.shm and shm is not None:
        out.append(_check(h, "", "/dev/shm", shm.total >= needs.shm, f"/dev/shm is {_size(shm.total)}",
                          f"/dev/shm is {_size(shm.total)}, units want {_size(needs.shm)}: with --ipc host "
                          "the container uses the host's /dev/shm and --shm-size does not apply",
                          f"mount -o remount,size={needs.shm // 1024**3 or 1}G /dev/shm (and in /etc/fstab)",
                          bad_status="warn"))
    return out


def _fabric_checks(host: Host, hf: HostFacts) -> list[Check]:
    h, spec = host.name, host.spec
    out: list[Check] = []
    if spec.nccl_ifname:
        iface = hf.interface(spec.nccl_ifname)
        if iface is None:
            names = ", ".join(i.name for i in hf.interfaces if i.name != "lo") or "none"
            out.append(Check(host=h, unit="", name="interface", status="fail",
                             message=f"interface {spec.nccl_ifname} not found (host has {names})",
                             fix="set nccl_ifname to the data-plane NIC (ip -br addr)"))
        else:
            out.append(_check(h, "", "interface", iface.up, f"{spec.nccl_ifname} up, MTU {iface.mtu}",
                              f"interface {spec.nccl_ifname} is down", f"ip link set {spec.nccl_ifname} up"))
            if spec.data_ip:
                elsewhere = hf.interface_with(spec.data_ip)
                where = f"; {spec.data_ip} is on {elsewhere.name}" if elsewhere and elsewhere is not iface else ""
                out.append(_check(h, "", "data-ip", spec.data_ip in iface.ipv4,
                                  f"{spec.data_ip} on {spec.nccl_ifname}",
                                  f"data_ip {spec.data_ip} is not on {spec.nccl_ifname} "
                                  f"(it has {', '.join(iface.ipv4) or 'no IPv4'}{where})",
                                  "fix data_ip or nccl_ifname so NCCL/Gloo bind the right NIC"))
            if spec.mtu is not None:
                # The inventory's mtu may be the NIC's or, on InfiniBand, the HCA ports' MTU.
                hca_mtus = {p.active_mtu for p in hf.ib_ports if p.hca in spec.hcas and p.active_mtu}
                out.append(_check(h, "", "mtu", spec.mtu == iface.mtu or spec.mtu in hca_mtus,
                                  f"MTU {spec.mtu} as the inventory says",
                                  f"{spec.nccl_ifname} has MTU {iface.mtu}"
                                  + (f" (HCA ports {', '.join(map(str, sorted(hca_mtus)))})" if hca_mtus else "")
                                  + f", the inventory says {spec.mtu}",
                                  f"ip link set {spec.nccl_ifname} mtu {spec.mtu} (and in the host's network "
                                  "config), or fix mtu in the inventory", bad_status="warn"))
    if spec.fabric == "none":
        return out
    layer = "Ethernet" if spec.fabric == "roce" else "InfiniBand"
    listed = ", ".join(sorted({p.hca for p in hf.ib_ports})) or "none"
    for hca in spec.hcas:
        port = next((p for p in hf.ib_ports if p.hca == hca), None)
        if port is None:
            out.append(Check(host=h, unit="", name=f"hca {hca}", status="fail",
                             message=f"HCA {hca} not found (ibv_devinfo lists {listed})",
                             fix="fix hcas in the inventory or the RDMA driver; without it NCCL "
                             "silently falls back to TCP"))
            continue
        ok = port.state == "PORT_ACTIVE" and port.link_layer == layer
        fix = ("start a subnet manager (opensm) on the fabric" if port.state == "PORT_INIT"
               else "bring the port up / check cabling and fabric")
        out.append(_check(h, "", f"hca {hca}", ok, f"{hca} port {port.port} ACTIVE ({layer})",
                          f"{hca} port {port.port} is {port.state} ({port.link_layer}), want "
                          f"PORT_ACTIVE ({layer})", fix))
    if spec.hcas:
        out.append(_check(h, "", "/dev/infiniband", bool(hf.dev_infiniband),
                          f"/dev/infiniband: {' '.join(hf.dev_infiniband)}",
                          "/dev/infiniband is missing on the host",
                          "load the RDMA drivers (ib_uverbs, rdma_ucm)"))
    return out


def _gid_checks(host: Host, units: Sequence[Unit], hf: HostFacts | None) -> list[Check]:
    """Per data-plane unit: its GID index env equals this host's RoCE v2 IPv4 GID index."""
    spec = host.spec
    if hf is None or spec.fabric != "roce":
        return []
    out: list[Check] = []
    for hca in spec.hcas:
        if not any(p.hca == hca for p in hf.ib_ports) and not any(g.hca == hca for g in hf.gids):
            continue  # the hca check already failed this host
        found = hf.roce_v2_gid_index(hca, spec.data_ip)
        for u in units:
            present = [k for k in GID_ENV if k in u.env]
            if not present:
                continue
            if found is None:
                out.append(Check(host=host.name, unit=u.name, name=f"gid {hca}", status="fail",
                                 message=f"{hca} has no RoCE v2 IPv4 GID"
                                 + (f" for {spec.data_ip}" if spec.data_ip else ""),
                                 fix="assign the data IP to the HCA's netdev; check show_gids"))
                continue
            wrong = [k for k in present if u.env[k] != str(found)]
            if wrong:
                k = wrong[0]
                out.append(Check(host=host.name, unit=u.name, name=f"gid {hca}", status="fail",
                                 message=f"{k}={u.env[k]} but {hca}'s RoCE v2 IPv4 GID is at index {found}",
                                 fix=f"set gid_index: {found} (or auto) for {host.name}"))
            else:
                out.append(Check(host=host.name, unit=u.name, name=f"gid {hca}", status="pass",
                                 message=f"{present[0]}={found}"))
    return out


def _group_checks(plan: Plan, inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Check]:
    out: list[Check] = []
    groups: dict[str, list[Unit]] = {}
    for u in plan.units:
        if data_plane(u):
            groups.setdefault(u.group, []).append(u)
    for g, units in sorted(groups.items()):
        mtus: dict[str, int] = {}
        for u in units:
            spec = inventory.host(u.host).spec
            hf = facts.get(u.host)
            iface = hf.interface(spec.nccl_ifname) if hf and spec.nccl_ifname else None
            if iface is not None:
                mtus[u.host] = iface.mtu
        if len(set(mtus.values())) > 1:
            detail = ", ".join(f"{h}={m}" for h, m in sorted(mtus.items()))
            out.append(Check(host=units[0].host, unit=g, name="mtu", status="fail",
                             message=f"MTU differs across the ranks of {g}: {detail}",
                             fix="set the same MTU on every rank's data-plane NIC"))
        elif len(mtus) > 1:
            out.append(Check(host=units[0].host, unit=g, name="mtu", status="pass",
                             message=f"MTU {next(iter(mtus.values()))} on every rank"))
    return out


def _weight_checks(u: Unit, host: Host, recipe: Recipe, paths: Mapping[str, PathProbe]) -> list[Check]:
    out: list[Check] = []
    for need in weight_needs(u, host, recipe):
        name = {"draft weights": "draft", "tokenizer": "tokenizer"}.get(need.what, "weights")
        if need.local is not None:
            p = paths.get(need.local)
            if p is None:
                continue
            if not p.exists:
                out.append(Check(host=u.host, unit=u.name, name=name, status="fail",
                                 message=f"{need.what} missing: {need.local}"
                                 + (" (must sit beside the target on every rank)" if need.beside else ""),
                                 fix=STAGE_FIX))
                continue
            out.append(_present(u, name, need.what, need.local, p))
            continue
        if need.staged is None:
            continue
        hf_probe = paths.get(need.hf_cache) if need.hf_cache else None
        staged = paths.get(need.staged)
        if hf_probe is not None and hf_probe.exists:
            out.append(_present(u, name, need.what, need.hf_cache or "", hf_probe))
        elif staged is not None and staged.exists and need.beside:
            out.append(_present(u, name, need.what, need.staged, staged))
        elif staged is not None and staged.exists:
            out.append(Check(host=u.host, unit=u.name, name=name, status="warn",
                             message=f"{need.value} is staged at {need.staged}, but the engine is given the "
                             f"repo id and will download it into the HF cache"
                             + (f" ({need.hf_cache})" if need.hf_cache else ""),
                             fix="give the engine the local path in overrides.engine_args (e.g. "
                             f"--model-path {posixpath.join('/models', need.value)})"))
        elif hf_probe is not None or staged is not None:
            where = " nor ".join(p for p in (need.staged, need.hf_cache) if p)
            bad: Status = "fail" if (need.offline or need.beside) else "warn"
            consequence = ("HF_HUB_OFFLINE is set, so the engine cannot download it" if need.offline
                           else "every rank downloads it at start")
            if need.beside:
                consequence = "the recipe needs it beside the target on every rank"
            hub = posixpath.dirname(need.hf_cache) if need.hf_cache else None
            fix = (f"pre-download it on every rank: HF_HUB_CACHE={hub} huggingface-cli download {need.value}"
                   if hub and not need.beside else
                   f"{STAGE_FIX} (puts it at {need.staged} on every rank)")
            out.append(Check(host=u.host, unit=u.name, name=name, status=bad,
                             message=f"{need.what} {need.value} not staged: neither {where} exists; {consequence}",
                             fix=fix))
    return out


def _present(u: Unit, name: str, what: str, path: str, p: PathProbe) -> Check:
    size = f"{_size(p.bytes)}, {p.files} files" if p.bytes is not None else "size unknown (du timed out)"
    if p.manifest not in (None, "ok"):
        return Check(host=u.host, unit=u.name, name=name, status="fail", message=f"{path}: {p.manifest}",
                     fix=f"re-sync the weights; {MANIFEST} lists what must be there")
    if p.files == 0:
        return Check(host=u.host, unit=u.name, name=name, status="fail", message=f"{what} at {path} are empty",
                     fix="stage the weights at the same path on every rank")
    if p.staged not in (None, "ok"):
        return Check(host=u.host, unit=u.name, name=name, status="fail", message=f"{path}: {p.staged}",
                     fix=STAGE_FIX + " (moves only the differing files)")
    checked = f"; {MANIFEST} ok" if p.manifest == "ok" else ""
    if p.staged == "ok":
        checked += f"; staged revision {p.revision}"
    return Check(host=u.host, unit=u.name, name=name, status="pass", message=f"{path} ({size}{checked})")


def _dropped_check(u: Unit) -> Check:
    assert u.container is not None
    return Check(host=u.host, unit=u.name, name="rdma-in-container", status="warn",
                 message=f"/dev/infiniband is not visible inside {u.container.image}: the playbook drops --device "
                 "(overrides.drop_docker_flags), so NCCL/Mooncake run over TCP",
                 fix="remove --device from overrides.drop_docker_flags to use RDMA")


def _image_check(u: Unit, probe: ImageProbe) -> Check:
    assert u.container is not None
    image = u.container.image
    rendered = "/dev/infiniband" in u.container.devices
    if probe.status == "visible":
        return Check(host=u.host, unit=u.name, name="rdma-in-container", status="pass",
                     message=f"/dev/infiniband visible inside {image} ({probe.detail})")
    if probe.status == "no-image":
        return Check(host=u.host, unit=u.name, name="rdma-in-container", status="warn",
                     message=f"image {image} is not on the host yet; /dev/infiniband inside it not checked",
                     fix=f"docker pull {image}, then run fleet preflight again")
    if probe.status == "absent" and not rendered:
        return _dropped_check(u)
    what = probe.detail if probe.status == "absent" else f"docker run failed: {probe.detail}"
    return Check(host=u.host, unit=u.name, name="rdma-in-container", status="fail",
                 message=f"/dev/infiniband not visible inside {image} with the rendered flags: {what}",
                 fix="load the RDMA drivers on the host and keep --device /dev/infiniband --cap-add IPC_LOCK "
                 "--ulimit memlock=-1; otherwise NCCL falls back to TCP silently")


_IMAGE_SETTING = {"router": "images.router", "mooncake-master": "images.mooncake_master", "gateway": "gateway.image"}


def _program_checks(plan: Plan, probes: ProbeResults) -> list[Check]:
    """Per host and image: each program its units run is in it (fail naming host, image and
    program), or the image is not there to look into (warn)."""
    out: list[Check] = []
    for (host, image), probe in sorted(probes.programs.items()):
        users = [u for u in plan.units if u.host == host and u.container is not None and u.container.image == image]
        if not users:
            continue
        unit = users[0].name
        if probe.status == "no-image":
            out.append(Check(host=host, unit=unit, name="programs", status="warn",
                             message=f"image {image} is not on the host yet; the programs it must run are not checked",
                             fix=f"docker pull {image}, then run fleet preflight again"))
        elif probe.status == "error":
            out.append(Check(host=host, unit=unit, name="programs", status="warn",
                             message=f"could not look into image {image}: {probe.detail}",
                             fix="see the error (the check runs sh inside the image)"))
        elif not probe.missing:
            programs = sorted({program_of(u.argv) for u in users})
            out.append(Check(host=host, unit=unit, name="programs", status="pass",
                             message=f"image {image} has {', '.join(programs)}"))
        for program in probe.missing:
            u = next(u for u in users if program_of(u.argv) == program)
            setting = _IMAGE_SETTING.get(u.role, "image")
            where = "the recipe's gateway.image" if u.role == "gateway" else \
                f"{setting} in the recipe, or overrides.{setting} in the playbook"
            out.append(Check(host=host, unit=u.name, name="programs", status="fail",
                             message=f"image {image} on {host} has no {program} (the {u.role} runs it)",
                             fix=f"use an image that provides it: {where}"))
    return out


def _reach_checks(probes: ProbeResults) -> list[Check]:
    out: list[Check] = []
    for (host, key), err in sorted(probes.listener_errors.items()):
        out.append(Check(host=host, unit="", name="listen", status="fail",
                         message=f"cannot listen on {key} for the reachability probe: {err}",
                         fix="the data IP must be on this host and the port free"))
    for r in probes.reach:
        t = r.target
        name = f"reach {t.label}"
        if r.unreachable:
            down = r.unreachable
            out.append(Check(host=r.client, unit=r.unit, name=name, status="warn",
                             message=f"{t.label} {t.key} on {t.host} not probed: {down} is unreachable over SSH "
                             f"({r.error})", fix=f"check SSH to {down}: fleet run -i <inventory> {down} -- true"))
        elif not r.probed:
            out.append(Check(host=r.client, unit=r.unit, name=name, status="warn",
                             message=f"{t.label} {t.key} on {t.host} not probed: {r.error}",
                             fix="install python3 on both hosts (the probe uses its standard library)"))
        elif r.error is None:
            out.append(Check(host=r.client, unit=r.unit, name=name, status="pass",
                             message=f"reaches {t.label} {t.key} on {t.host}"))
        else:
            out.append(Check(host=r.client, unit=r.unit, name=name, status="fail",
                             message=f"cannot reach {t.label} {t.key} on {t.host} ({t.group}): {r.error}",
                             fix=f"open tcp/{t.port} from this host's data IP to {t.ip} (routes, firewall)"))
    return out


def _probe_checks(plan: Plan, inventory: Inventory, recipe: Recipe, probes: ProbeResults) -> list[Check]:
    out: list[Check] = []
    for name, err in sorted(probes.errors.items()):
        out.append(Check(host=name, unit="", name="probe", status="fail", message=f"host probe failed: {err}",
                         fix="see the error; the probe needs sh, ss, du, find and docker"))
    sizes: dict[str, dict[str, int | None]] = {}
    revisions: dict[str, dict[str, str]] = {}  # "weights"/"draft weights" -> host -> staged revision
    for u in plan.units:
        host = inventory.host(u.host)
        running = u.name in probes.running_units.get(u.host, frozenset())
        busy = probes.listening_ports.get(u.host)
        if busy is not None and not running and u.ports:
            taken = sorted(p for p in set(u.ports.values()) if p in busy)
            names = {p: n for n, p in u.ports.items()}
            out.append(_check(u.host, u.name, "ports", not taken,
                              "ports free: " + ", ".join(str(p) for p in sorted(set(u.ports.values()))),
                              "port " + ", ".join(f"{p} ({names[p]})" for p in taken) + " already in use",
                              "stop what listens there (ss -ltnp) or change the playbook's ports"))
        host_paths = probes.paths.get(u.host)
        if host_paths is not None:
            checks = _weight_checks(u, host, recipe, host_paths)
            out.extend(checks)
            for i, need in enumerate(weight_needs(u, host, recipe)):
                p = host_paths.get(need.local or need.hf_cache or "")
                if p is not None and p.exists and data_plane(u) and i == 0:
                    sizes.setdefault(u.group, {})[u.host] = p.bytes
                if p is not None and p.revision is not None:
                    revisions.setdefault(need.what, {})[u.host] = p.revision
        image = probes.images.get((u.host, u.name))
        if image is not None:
            out.append(_image_check(u, image))
        elif _rdma_container(u, inventory) and _device_dropped(u):
            out.append(_dropped_check(u))  # known from the plan: image_units probes nothing for it
    out.extend(_program_checks(plan, probes))
    out.extend(_reach_checks(probes))
    for g, per_host in sorted(sizes.items()):
        present = {s for s in per_host.values() if s is not None}
        if len(present) > 1:
            detail = ", ".join(f"{h}={s}" for h, s in sorted(per_host.items()))
            out.append(Check(host=sorted(per_host)[0], unit=g, name="weights-size", status="warn",
                             message=f"weights differ in size across ranks: {detail}",
                             fix=STAGE_FIX + ": a truncated shard loads silently"))
    for what, revs in sorted(revisions.items()):
        if len(set(revs.values())) > 1:
            detail = ", ".join(f"{h}={r}" for h, r in sorted(revs.items()))
            out.append(Check(host=sorted(revs)[0], unit=plan.deployment, name="weights-revision", status="fail",
                             message=f"staged {what} differ in revision across ranks: {detail}",
                             fix=STAGE_FIX + ": every rank gets the source's copy"))
    for name, (off, unc) in sorted(probes.clock_offset_s.items()):
        ok = abs(off) - unc <= CLOCK_TOLERANCE_S
        out.append(_check(name, "", "clock", ok, f"clock offset {off:+.2f}s (±{unc:.2f}s)",
                          f"clock is {off:+.2f}s (±{unc:.2f}s) off the control node",
                          "run chrony/ntp on every host", bad_status="warn"))
    return out


def evaluate(plan: Plan, inventory: Inventory, recipe: Recipe, facts: Mapping[str, HostFacts],
             probes: ProbeResults | None = None, unreachable: Mapping[str, str] | None = None) -> tuple[Check, ...]:
    """All checks, host by host in inventory order, then groups, then probes."""
    by_host: dict[str, list[Unit]] = {}
    for u in plan.units:
        by_host.setdefault(u.host, []).append(u)
    unreachable = unreachable or {}
    out: list[Check] = []
    for host in inventory.hosts:
        if host.name in by_host:
            units = by_host[host.name]
            hf = facts.get(host.name)
            out.extend(_host_checks(host, _needs_of(units), recipe, hf, unreachable.get(host.name)))
            out.extend(_gid_checks(host, [u for u in units if data_plane(u)], hf))
    out.extend(_group_checks(plan, inventory, facts))
    if probes is not None:
        out.extend(_probe_checks(plan, inventory, recipe, probes))
    return tuple(out)


def evaluate_hosts(hosts: Sequence[Host], recipe: Recipe, facts: Mapping[str, HostFacts],
                   unreachable: Mapping[str, str] | None = None, playbook: Playbook | None = None) -> tuple[Check, ...]:
    """Host checks from the recipe alone, for when the plan itself cannot be made (it names the
    hosts that would have run units, so a missing HCA is still reported as such)."""
    unreachable = unreachable or {}
    out: list[Check] = []
    for host in hosts:
        out.extend(_host_checks(host, recipe_needs(recipe, host, playbook), recipe, facts.get(host.name),
                                unreachable.get(host.name)))
    return tuple(out)


def failed(checks: Iterable[Check]) -> tuple[Check, ...]:
    return tuple(c for c in checks if c.status == "fail")


def network_env(unit: Unit) -> dict[str, str]:
    """The unit's per-host network env (what preflight compared with the facts)."""
    return {k: v for k, v in sorted(unit.env.items()) if k.startswith(NETWORK_ENV_PREFIXES)}
