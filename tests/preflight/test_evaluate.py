"""Preflight rules on hand-built plans and facts: each failure names the host and the fix
(exact messages)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from launcher.config.inventory import load_inventory
from launcher.config.recipes import load_catalog
from launcher.plan import auto_playbook
from launcher.plan import plan as make_plan
from launcher.preflight import checks as preflight
from launcher.facts.host import Disk, GidEntry, Gpu, HostFacts, IbPort, Interface
from launcher.model import (
    ContainerSpec, Hardware, Host, HostSpec, Inventory, Mount, Parallelism, Plan, Quantization,
    Recipe, Speculative, Unit,
)
from launcher.preflight.rules.base import ImageProbe, PathProbe, ProbeResults, Reach, ReachTarget, parse_size

RECIPE = Recipe(
    id="deepseek/sglang-tp8pp2-6000d", family="deepseek", catalog_entry=33, summary="s",
    model="deepseek-ai/DeepSeek-V3.2", served_model_name=None, engine="sglang",
    engine_version="0.5.23", image="img", topology="multinode",
    hardware=Hardware(skus=("RTX-6000D",), gpus_per_node=8, nodes=2),
    parallelism=Parallelism(tp=8, pp=2), quantization=Quantization(weight_format="fp8-e4m3"),
)
MODEL = "/models/deepseek-ai/DeepSeek-V3.2"


def host(name: str, ip: str, gid: int, ifname: str = "ens1f0", **kw: object) -> Host:
    spec = dict(gpu_model="RTX-6000D", gpu_count=8, fabric="roce", hcas=("mlx5_0",), gid_index=gid,
                nccl_ifname=ifname, data_ip=ip, models_dir="/models")
    spec.update(kw)
    return Host(name=name, address=ip, spec=HostSpec(**spec))  # type: ignore[arg-type]


def facts_for(ip: str, gid_at: int, mtu: int = 9000, hca: str = "mlx5_0", **kw: object) -> HostFacts:
    mapped = "0000:0000:0000:0000:0000:ffff:" + "".join(f"{int(o):02x}" for o in ip.split("."))
    mapped = mapped[:34] + ":" + mapped[34:]
    base = HostFacts(
        gpus=tuple(Gpu(index=i, name="NVIDIA RTX PRO 6000D", sku="RTX-6000D", memory_mib=83968,
                       driver="580.82.07") for i in range(8)),
        ib_ports=(IbPort(hca=hca, port=1, state="PORT_ACTIVE", link_layer="Ethernet", active_mtu=4096),),
        gids=(GidEntry(hca=hca, port=1, index=gid_at, gid=mapped, version="v2", ipv4=ip, netdev="ens1f0"),),
        interfaces=(Interface(name="ens1f0", mtu=mtu, up=True, ipv4=(ip,)),),
        docker_version="27.3.1", docker_runtimes=("nvidia", "runc"), dev_infiniband=("uverbs0",),
        python3="3.10.12",
        disks=(Disk(path="/models", mount="/models", total=8 * 1024**4, free=2 * 1024**4),
               Disk(path="/dev/shm", mount="/dev/shm", total=512 * 1024**3, free=512 * 1024**3)),
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def unit(h: Host, rank: int, gid: int, **kw: object) -> Unit:
    base = Unit(
        host=h.name, name=f"fleet-ds-rank0-r{rank}", deployment="ds", role="rank", group="ds/rank0",
        rank=rank, nnodes=2, gpus=tuple(range(8)), ports={"http": 30000, "dist_init": 20000} if rank == 0 else {},
        argv=("python3", "-m", "sglang.launch_server", "--model-path", MODEL),
        env={"NCCL_IB_GID_INDEX": str(gid), "NCCL_SOCKET_IFNAME": "=ens1f0"},
        container=ContainerSpec(image="img", gpus=tuple(range(8)), devices=("/dev/infiniband",),
                                cap_add=("IPC_LOCK",), ulimits=("memlock=-1",), shm_size="32g",
                                mounts=(Mount(host="/models", container="/models", read_only=True),)),
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def setup(gid_a: int = 3, gid_b: int = 5, facts_b: HostFacts | None = None,
          recipe: Recipe = RECIPE) -> tuple[Plan, Inventory, dict[str, HostFacts]]:
    a, b = host("gpu-01", "10.0.11.1", gid_a), host("gpu-02", "10.0.11.2", gid_b)
    inv = Inventory(path="inv.yaml", hosts=(a, b), groups={})
    plan = Plan(deployment="ds", recipe=recipe.id, units=(unit(a, 0, gid_a), unit(b, 1, gid_b)))
    facts = {"gpu-01": facts_for("10.0.11.1", 3), "gpu-02": facts_b or facts_for("10.0.11.2", 5)}
    return plan, inv, facts


def fails(checks: tuple[preflight.Check, ...]) -> list[str]:
    return [c.line() for c in preflight.failed(checks)]


def status_of(checks: tuple[preflight.Check, ...], name: str) -> list[tuple[str, str, str]]:
    return [(c.host, c.status, c.message) for c in checks if c.name == name]


def test_all_pass_with_per_host_gid_3_and_5() -> None:
    plan, inv, facts = setup()
    checks = preflight.evaluate(plan, inv, RECIPE, facts)
    assert fails(checks) == []
    assert status_of(checks, "gid mlx5_0") == [
        ("gpu-01", "pass", "NCCL_IB_GID_INDEX=3"), ("gpu-02", "pass", "NCCL_IB_GID_INDEX=5")]


def test_one_global_gid_index_fails_on_the_host_that_differs() -> None:
    plan, inv, facts = setup(gid_a=3, gid_b=3)
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == [
        "fail: gpu-02/fleet-ds-rank0-r1: gid mlx5_0: NCCL_IB_GID_INDEX=3 but mlx5_0's RoCE v2 IPv4 GID is at "
        "index 5 (fix: set gid_index: 5 (or auto) for gpu-02)",
    ]


def test_missing_hca_fails_naming_host_and_skips_its_gid_check() -> None:
    plan, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, hca="mlx5_7"))
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == [
        "fail: gpu-02: hca mlx5_0: HCA mlx5_0 not found (ibv_devinfo lists mlx5_7) (fix: fix hcas in the "
        "inventory or the RDMA driver; without it NCCL silently falls back to TCP)",
    ]


def test_no_hca_at_all_and_no_device_nodes() -> None:
    plan, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, ib_ports=(), gids=(), dev_infiniband=()))
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == [
        "fail: gpu-02: hca mlx5_0: HCA mlx5_0 not found (ibv_devinfo lists none) (fix: fix hcas in the "
        "inventory or the RDMA driver; without it NCCL silently falls back to TCP)",
        "fail: gpu-02: /dev/infiniband: /dev/infiniband is missing on the host (fix: load the RDMA drivers "
        "(ib_uverbs, rdma_ucm))",
    ]


def test_port_down_and_port_init() -> None:
    down = IbPort(hca="mlx5_0", port=1, state="PORT_DOWN", link_layer="Ethernet")
    plan, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, ib_ports=(down,)))
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == [
        "fail: gpu-02: hca mlx5_0: mlx5_0 port 1 is PORT_DOWN (Ethernet), want PORT_ACTIVE (Ethernet) "
        "(fix: bring the port up / check cabling and fabric)",
    ]
    ib = dataclasses.replace(inv.hosts[1], spec=dataclasses.replace(inv.hosts[1].spec, fabric="ib", gid_index=None))
    inv = dataclasses.replace(inv, hosts=(inv.hosts[0], ib))
    init = IbPort(hca="mlx5_0", port=1, state="PORT_INIT", link_layer="InfiniBand")
    facts["gpu-02"] = facts_for("10.0.11.2", 5, ib_ports=(init,))
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts))[0] == (
        "fail: gpu-02: hca mlx5_0: mlx5_0 port 1 is PORT_INIT (InfiniBand), want PORT_ACTIVE (InfiniBand) "
        "(fix: start a subnet manager (opensm) on the fabric)")


def test_mtu_mismatch_across_ranks() -> None:
    plan, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, mtu=1500))
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == [
        "fail: gpu-01/ds/rank0: mtu: MTU differs across the ranks of ds/rank0: gpu-01=9000, gpu-02=1500 "
        "(fix: set the same MTU on every rank's data-plane NIC)",
    ]


def test_data_ip_on_another_nic_and_missing_interface() -> None:
    ifs = (Interface(name="ens1f0", mtu=9000, up=True, ipv4=("10.0.12.2",)),
           Interface(name="eno1", mtu=1500, up=True, ipv4=("10.0.11.2",)))
    plan, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, interfaces=ifs))
    assert "fail: gpu-02: data-ip: data_ip 10.0.11.2 is not on ens1f0 (it has 10.0.12.2; 10.0.11.2 is on eno1) " \
        "(fix: fix data_ip or nccl_ifname so NCCL/Gloo bind the right NIC)" in fails(preflight.evaluate(plan, inv, RECIPE, facts))
    facts["gpu-02"] = facts_for("10.0.11.2", 5, interfaces=ifs[1:])
    assert "fail: gpu-02: interface: interface ens1f0 not found (host has eno1) (fix: set nccl_ifname to the " \
        "data-plane NIC (ip -br addr))" in fails(preflight.evaluate(plan, inv, RECIPE, facts))


def test_driver_problems_are_named() -> None:
    plan, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, gpus=(), gpu_error="No devices were found"))
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == [
        "fail: gpu-02: driver: nvidia-smi: No devices were found (fix: install/load the NVIDIA driver; "
        "nvidia-smi must list the GPUs)",
    ]
    facts["gpu-02"] = facts_for("10.0.11.2", 5, gpus=(), missing_tools=("gpus",))
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts))[0].startswith(
        "fail: gpu-02: driver: nvidia-smi not found: no NVIDIA driver installed")


def test_mig_and_sku_and_count() -> None:
    plan, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, mig_enabled=(0, 3)))
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == [
        "fail: gpu-02: mig: MIG is enabled on GPU 0, 3: engines would see MIG slices, not whole GPUs "
        "(fix: nvidia-smi -i 0 -mig 0 on each such GPU, then reset it (nvidia-smi -r))",
    ]
    h100 = tuple(Gpu(index=i, name="NVIDIA H100 80GB HBM3", sku="H100", memory_mib=81559, driver="550")
                 for i in range(4))
    facts["gpu-02"] = facts_for("10.0.11.2", 5, gpus=h100)
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == [
        "fail: gpu-02: gpu-sku: GPUs are H100; recipe deepseek/sglang-tp8pp2-6000d needs RTX-6000D "
        "(fix: place the recipe on matching hosts (fleet recipes fit))",
        "fail: gpu-02: gpu-count: 4 GPUs found, units use indices up to 7 (fix: fix gpu_count in the "
        "inventory or the placement)",
    ]


def test_docker_problems() -> None:
    err = "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock"
    plan, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, docker_version=None, docker_error=err))
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == [
        f"fail: gpu-02: docker: docker daemon not answering: {err} (fix: connect as root or add the SSH "
        "user to the docker group)",
    ]
    facts["gpu-02"] = facts_for("10.0.11.2", 5, docker_runtimes=("runc",))
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == [
        "fail: gpu-02: nvidia-runtime: docker cannot pass GPUs (--gpus): no nvidia runtime and no NVIDIA "
        "container toolkit on the host (fix: install nvidia-container-toolkit, run nvidia-ctk runtime "
        "configure --runtime=docker and restart docker)",
    ]
    facts["gpu-02"] = facts_for("10.0.11.2", 5, docker_runtimes=("runc",),
                                nvidia_toolkit=("/usr/bin/nvidia-container-runtime-hook",))
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == []


def test_small_shm_and_low_disk_warn() -> None:
    disks = (Disk(path="/models", mount="/", total=2 * 1024**4, free=20 * 1024**3),
             Disk(path="/dev/shm", mount="/dev/shm", total=8 * 1024**3, free=8 * 1024**3))
    plan, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, disks=disks))
    checks = preflight.evaluate(plan, inv, RECIPE, facts)
    warns = [c.line() for c in checks if c.status == "warn"]
    assert warns == [
        "warn: gpu-02: disk /models: only 20.0 GiB free on / (models dir /models) (fix: free space for "
        "weights under /models)",
        "warn: gpu-02: /dev/shm: /dev/shm is 8.0 GiB, units want 32.0 GiB: with --ipc host the container "
        "uses the host's /dev/shm and --shm-size does not apply (fix: mount -o remount,size=32G /dev/shm "
        "(and in /etc/fstab))",
    ]


def test_unreachable_and_no_facts() -> None:
    plan, inv, facts = setup()
    del facts["gpu-02"]
    (c,) = preflight.failed(preflight.evaluate(plan, inv, RECIPE, facts))
    assert c.line() == "fail: gpu-02: facts: no facts gathered (fix: run: fleet facts -i INVENTORY --limit gpu-02)"
    (c,) = preflight.failed(preflight.evaluate(plan, inv, RECIPE, facts, unreachable={"gpu-02": "no SSH banner"}))
    assert c.line() == "fail: gpu-02: ssh: unreachable: no SSH banner (fix: check SSH to gpu-02: fleet run -i INVENTORY gpu-02 -- true)"


# --- probes ----------------------------------------------------------------------------------


def probes(**kw: object) -> ProbeResults:
    base = ProbeResults(
        listening_ports={"gpu-01": frozenset({22}), "gpu-02": frozenset({22})},
        running_units={"gpu-01": frozenset(), "gpu-02": frozenset()},
        paths={h: {MODEL: PathProbe(exists=True, bytes=1000, files=3)} for h in ("gpu-01", "gpu-02")},
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_probe_port_taken_and_weights_missing() -> None:
    plan, inv, facts = setup()
    p = probes(listening_ports={"gpu-01": frozenset({22, 30000}), "gpu-02": frozenset()},
               paths={"gpu-01": {MODEL: PathProbe(exists=True, bytes=1000, files=3)},
                      "gpu-02": {MODEL: PathProbe(exists=False)}})
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts, p)) == [
        "fail: gpu-01/fleet-ds-rank0-r0: ports: port 30000 (http) already in use (fix: stop what listens "
        "there (ss -ltnp) or change the playbook's ports)",
        "fail: gpu-02/fleet-ds-rank0-r1: weights: weights missing: /models/deepseek-ai/DeepSeek-V3.2 (fix: "
        "fleet weights stage PLAYBOOK -i INVENTORY --source DIR|HOST:PATH)",
    ]


def test_our_own_running_unit_does_not_count_as_a_taken_port() -> None:
    plan, inv, facts = setup()
    p = probes(listening_ports={"gpu-01": frozenset({30000})}, running_units={"gpu-01": frozenset({"fleet-ds-rank0-r0"})})
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts, p)) == []


def test_weights_sizes_differ_and_manifest_problems() -> None:
    plan, inv, facts = setup()
    p = probes(paths={"gpu-01": {MODEL: PathProbe(exists=True, bytes=1000, files=3, manifest="ok")},
                      "gpu-02": {MODEL: PathProbe(exists=True, bytes=900, files=2,
                                                  manifest="1 of 3 files listed in fleet.sha256 are missing (b.safetensors)")}})
    checks = preflight.evaluate(plan, inv, RECIPE, facts, p)
    assert [c.line() for c in checks if c.name.startswith("weights")] == [
        "pass: gpu-01/fleet-ds-rank0-r0: weights: /models/deepseek-ai/DeepSeek-V3.2 (1000 B, 3 files; fleet.sha256 ok)",
        "fail: gpu-02/fleet-ds-rank0-r1: weights: /models/deepseek-ai/DeepSeek-V3.2: 1 of 3 files listed in "
        "fleet.sha256 are missing (b.safetensors) (fix: re-sync the weights; fleet.sha256 lists what must be there)",
        "warn: gpu-01/ds/rank0: weights-size: weights differ in size across ranks: gpu-01=1000, gpu-02=900 "
        "(fix: fleet weights stage PLAYBOOK -i INVENTORY --source DIR|HOST:PATH: a truncated shard loads "
        "silently)",
    ]


def _repo_setup(**env: str) -> tuple[Plan, Inventory, dict[str, HostFacts], str, str]:
    plan, inv, facts = setup()
    mounts = (Mount(host="/models", container="/models", read_only=True), Mount(host="/cache", container="/root/.cache"))
    units = tuple(dataclasses.replace(
        u, argv=("python3", "-m", "sglang.launch_server", "--model-path", "org/model"), env={**u.env, **env},
        container=dataclasses.replace(u.container, mounts=mounts) if u.container else None) for u in plan.units)
    return dataclasses.replace(plan, units=units), inv, facts, "/models/org/model", "/cache/huggingface/hub/models--org--model"


def test_repo_id_weights_in_hf_cache_staged_or_absent() -> None:
    plan, inv, facts, staged, hf = _repo_setup()
    assert preflight.probe_paths(plan, inv, RECIPE) == {"gpu-01": (hf, staged), "gpu-02": (hf, staged)}
    cached = probes(paths={"gpu-01": {hf: PathProbe(exists=True, bytes=5, files=1), staged: PathProbe(exists=False)},
                           "gpu-02": {hf: PathProbe(exists=False), staged: PathProbe(exists=True, bytes=5, files=1)}})
    checks = [c.line() for c in preflight.evaluate(plan, inv, RECIPE, facts, cached) if c.name == "weights"]
    assert checks == [
        f"pass: gpu-01/fleet-ds-rank0-r0: weights: {hf} (5 B, 1 files)",
        f"warn: gpu-02/fleet-ds-rank0-r1: weights: org/model is staged at {staged}, but the engine is given "
        f"the repo id and will download it into the HF cache ({hf}) (fix: give the engine the local path in "
        "overrides.engine_args (e.g. --model-path /models/org/model))",
    ]
    absent = probes(paths={h: {hf: PathProbe(exists=False), staged: PathProbe(exists=False)} for h in ("gpu-01", "gpu-02")})
    line = [c.line() for c in preflight.evaluate(plan, inv, RECIPE, facts, absent) if c.name == "weights"][0]
    assert line == (f"warn: gpu-01/fleet-ds-rank0-r0: weights: weights org/model not staged: neither {staged} nor "
                    f"{hf} exists; every rank downloads it at start (fix: pre-download it on every rank: "
                    "HF_HUB_CACHE=/cache/huggingface/hub huggingface-cli download org/model)")
    plan, inv, facts, staged, hf = _repo_setup(HF_HUB_OFFLINE="1")
    line = [c.line() for c in preflight.evaluate(plan, inv, RECIPE, facts, absent) if c.name == "weights"][0]
    assert line.startswith("fail: gpu-01/fleet-ds-rank0-r0: weights: weights org/model not staged") and \
        "HF_HUB_OFFLINE is set, so the engine cannot download it" in line


def test_a_dspark_draft_given_as_a_repo_id_is_fetched_like_the_target() -> None:
    """Issue 30 item 2: in download mode the draft is a repo id the engine fetches beside the
    target in its cache: not finding it staged is the target's warning, not a failure."""
    recipe = dataclasses.replace(RECIPE, speculative=Speculative(algorithm="DSPARK", draft_model="org/draft",
                                                                 draft_beside_target=True))
    plan, inv, facts = setup(recipe=recipe)
    units = tuple(dataclasses.replace(u, argv=(*u.argv, "--speculative-draft-model-path", "org/draft")) for u in plan.units)
    plan = dataclasses.replace(plan, units=units)
    draft = "/models/org/draft"
    assert preflight.probe_paths(plan, inv, recipe)["gpu-01"] == (MODEL, draft)
    p = probes(paths={h: {MODEL: PathProbe(exists=True, bytes=9, files=1), draft: PathProbe(exists=False)}
                      for h in ("gpu-01", "gpu-02")})
    checks = preflight.evaluate(plan, inv, recipe, facts, p)
    assert fails(checks) == []
    assert [c.line() for c in checks if c.name == "draft"][0] == (
        "warn: gpu-01/fleet-ds-rank0-r0: draft: draft weights org/draft not staged: neither /models/org/draft "
        "exists; every rank downloads it at start (fix: fleet weights stage PLAYBOOK -i INVENTORY --source "
        "DIR|HOST:PATH (puts it at /models/org/draft on every rank))")


def test_the_catalogs_dspark_draft_follows_its_target() -> None:
    """Issue 30 item 2 (entry 5): downloaded, the draft is the hub repo id like the target (it was
    a /models path nothing fetched); staged, it is the mounted local copy beside the target and
    preflight checks that path on the host."""
    root = Path(__file__).resolve().parents[2]
    catalog, inv = load_catalog(root / "recipes"), load_inventory(root / "inventories" / "example.yaml")
    recipe = catalog.get("kimi/sglang-tp8-b300-dcp8-dspark-hicache-tuned")

    def weights_args(weights: str) -> tuple[str, str]:
        (u,) = make_plan(inv, catalog, dataclasses.replace(auto_playbook(recipe, inv), weights=weights)).units
        return (u.argv[u.argv.index("--speculative-draft-model-path") + 1], u.argv[u.argv.index("--model-path") + 1])

    assert weights_args("download") == ("RadixArk/Kimi-K3-DSpark", "moonshotai/Kimi-K3")
    assert weights_args("staged") == ("/models/RadixArk/Kimi-K3-DSpark", "/models/moonshotai/Kimi-K3")
    the_plan = make_plan(inv, catalog, dataclasses.replace(auto_playbook(recipe, inv), weights="staged"))
    (u,) = the_plan.units
    host_path = "/data/models/RadixArk/Kimi-K3-DSpark"  # b300-01's models_dir, mounted at /models
    assert host_path in preflight.probe_paths(the_plan, inv, recipe)[u.host]
    missing = ProbeResults(listening_ports={u.host: frozenset()}, running_units={u.host: frozenset()},
                           paths={u.host: {host_path: PathProbe(exists=False)}})  # fmt: skip
    checks = preflight.evaluate(the_plan, inv, recipe, {}, missing)
    assert [c.line() for c in checks if c.name == "draft"] == [
        f"fail: {u.host}/{u.name}: draft: draft weights missing: {host_path} (must sit beside the target on every "
        "rank) (fix: fleet weights stage PLAYBOOK -i INVENTORY --source DIR|HOST:PATH)",
    ]


def test_rdma_in_image_verdicts() -> None:
    plan, inv, facts = setup()
    r0, r1 = plan.units
    verdicts = {
        ("gpu-01", r0.name): ImageProbe(status="visible", detail="rdma_cm uverbs0"),
        ("gpu-02", r1.name): ImageProbe(status="error", detail='error gathering device information while adding '
                                        'custom device "/dev/infiniband": no such file or directory'),
    }
    checks = preflight.evaluate(plan, inv, RECIPE, facts, probes(images=verdicts))
    assert [c.line() for c in checks if c.name == "rdma-in-container"] == [
        "pass: gpu-01/fleet-ds-rank0-r0: rdma-in-container: /dev/infiniband visible inside img (rdma_cm uverbs0)",
        "fail: gpu-02/fleet-ds-rank0-r1: rdma-in-container: /dev/infiniband not visible inside img with the "
        'rendered flags: docker run failed: error gathering device information while adding custom device '
        '"/dev/infiniband": no such file or directory (fix: load the RDMA drivers on the host and keep --device '
        "/dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1; otherwise NCCL falls back to TCP silently)",
    ]
    # The playbook dropped --device: the same absence is a warning, every time.
    dropped = dataclasses.replace(r1, container=dataclasses.replace(r1.container, devices=()) if r1.container else None)
    plan = dataclasses.replace(plan, units=(r0, dropped))
    absent = {("gpu-02", r1.name): ImageProbe(status="absent", detail="no /dev/infiniband in the container")}
    (c,) = [c for c in preflight.evaluate(plan, inv, RECIPE, facts, probes(images=absent)) if c.name == "rdma-in-container"]
    assert c.line() == ("warn: gpu-02/fleet-ds-rank0-r1: rdma-in-container: /dev/infiniband is not visible inside "
                        "img: the playbook drops --device (overrides.drop_docker_flags), so NCCL/Mooncake run over "
                        "TCP (fix: remove --device from overrides.drop_docker_flags to use RDMA)")
    no_image = {("gpu-02", r1.name): ImageProbe(status="no-image")}
    (c,) = [c for c in preflight.evaluate(plan, inv, RECIPE, facts, probes(images=no_image)) if c.name == "rdma-in-container"]
    assert c.line() == ("warn: gpu-02/fleet-ds-rank0-r1: rdma-in-container: image img is not on the host yet; "
                        "/dev/infiniband inside it not checked (fix: docker pull img, then run fleet preflight again)")


def test_dropped_device_is_judged_from_the_plan_without_a_docker_run() -> None:
    plan, inv, facts = setup()
    r0, r1 = plan.units
    assert r1.container is not None and "/dev/infiniband" in r1.container.devices
    assert [u.name for u in preflight.image_units(plan, inv)] == [r0.name, r1.name]
    dropped = dataclasses.replace(r1, container=dataclasses.replace(r1.container, devices=()))
    plan = dataclasses.replace(plan, units=(r0, dropped))
    assert [u.name for u in preflight.image_units(plan, inv)] == [r0.name]
    (c,) = [c for c in preflight.evaluate(plan, inv, RECIPE, facts, probes()) if c.name == "rdma-in-container"]
    assert c.line() == ("warn: gpu-02/fleet-ds-rank0-r1: rdma-in-container: /dev/infiniband is not visible inside "
                        "img: the playbook drops --device (overrides.drop_docker_flags), so NCCL/Mooncake run over "
                        "TCP (fix: remove --device from overrides.drop_docker_flags to use RDMA)")
    # Extra docker args could pass the device some other way (--privileged, -v /dev:/dev): probe it.
    sneaky = dataclasses.replace(dropped, container=dataclasses.replace(dropped.container, extra_args=("--privileged",)))
    plan = dataclasses.replace(plan, units=(r0, sneaky))
    assert [u.name for u in preflight.image_units(plan, inv)] == [r0.name, r1.name]


def test_reach_verdicts() -> None:
    plan, inv, facts = setup()
    t = ReachTarget(label="dist-init", group="ds/rank0", unit="fleet-ds-rank0-r0", host="gpu-01", ip="10.0.11.1",
                    port=20000, clients=(("gpu-02", "fleet-ds-rank0-r1", "10.0.11.2"),))
    cases = [
        (Reach(target=t, client="gpu-02", unit="fleet-ds-rank0-r1", error=None),
         "pass: gpu-02/fleet-ds-rank0-r1: reach dist-init: reaches dist-init 10.0.11.1:20000 on gpu-01"),
        (Reach(target=t, client="gpu-02", unit="fleet-ds-rank0-r1", error="timed out after 3s (from 10.0.11.2)"),
         "fail: gpu-02/fleet-ds-rank0-r1: reach dist-init: cannot reach dist-init 10.0.11.1:20000 on gpu-01 "
         "(ds/rank0): timed out after 3s (from 10.0.11.2) (fix: open tcp/20000 from this host's data IP to "
         "10.0.11.1 (routes, firewall))"),
        (Reach(target=t, client="gpu-02", unit="fleet-ds-rank0-r1", error="python3 is not on PATH on gpu-02", probed=False),
         "warn: gpu-02/fleet-ds-rank0-r1: reach dist-init: dist-init 10.0.11.1:20000 on gpu-01 not probed: python3 "
         "is not on PATH on gpu-02 (fix: install python3 on both hosts (the probe uses its standard library))"),
        (Reach(target=t, client="gpu-02", unit="fleet-ds-rank0-r1", error="timed out connecting to 10.0.0.2:22",
               probed=False, unreachable="gpu-02"),
         "warn: gpu-02/fleet-ds-rank0-r1: reach dist-init: dist-init 10.0.11.1:20000 on gpu-01 not probed: gpu-02 is "
         "unreachable over SSH (timed out connecting to 10.0.0.2:22) (fix: check SSH to gpu-02: fleet run -i "
         "INVENTORY gpu-02 -- true)"),
    ]
    for reach, line in cases:
        (c,) = [c for c in preflight.evaluate(plan, inv, RECIPE, facts, probes(reach=(reach,))) if c.name.startswith("reach")]
        assert c.line() == line
    listen = probes(listener_errors={("gpu-01", "10.0.11.1:20000"): "Cannot assign requested address"})
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts, listen)) == [
        "fail: gpu-01: listen: cannot listen on 10.0.11.1:20000 for the reachability probe: Cannot assign requested "
        "address (fix: the data IP must be on this host and the port free)",
    ]


def test_clock_offset_warns_only_when_surely_off() -> None:
    plan, inv, facts = setup()
    checks = preflight.evaluate(plan, inv, RECIPE, facts, probes(clock_offset_s={"gpu-01": (1.6, 0.7), "gpu-02": (2.5, 0.2)}))
    assert [c.line() for c in checks if c.name == "clock"] == [
        "pass: gpu-01: clock: clock offset +1.60s (±0.70s)",
        "warn: gpu-02: clock: clock is +2.50s (±0.20s) off the control node (fix: run chrony/ntp on every host)",
    ]


def test_evaluate_hosts_without_a_plan() -> None:
    _, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, hca="mlx5_7"))
    assert fails(preflight.evaluate_hosts(inv.hosts, RECIPE, facts)) == [
        "fail: gpu-02: hca mlx5_0: HCA mlx5_0 not found (ibv_devinfo lists mlx5_7) (fix: fix hcas in the "
        "inventory or the RDMA driver; without it NCCL silently falls back to TCP)",
    ]


def test_network_env_and_parse_size() -> None:
    plan, _, _ = setup()
    assert preflight.network_env(plan.units[1]) == {"NCCL_IB_GID_INDEX": "5", "NCCL_SOCKET_IFNAME": "=ens1f0"}
    assert [parse_size(s) for s in ("32g", "512m", "1gb", "2", "x")] == [32 * 1024**3, 512 * 1024**2, 1024**3, 2, None]


def test_measured_weights_per_card_must_fit() -> None:
    from launcher.model import Measured

    recipe = dataclasses.replace(RECIPE, measured=Measured(weights_gib_per_card=90.0))
    plan, inv, facts = setup(recipe=recipe)
    assert fails(preflight.evaluate(plan, inv, recipe, facts)) == [
        f"fail: {h}: gpu-memory: 82 GiB per GPU cannot hold the recipe's 90 GiB of weights per card (fix: place the "
        "recipe on hosts with larger GPUs)" for h in ("gpu-01", "gpu-02")]


def test_the_rdma_probe_passes_exactly_the_rdma_flags_the_unit_runs_with() -> None:
    """Preflight's /dev/infiniband probe container and the unit's own ``docker run`` get the
    device / capability / ulimit flags from one place (render); a flag added to the unit
    reaches the probe too."""
    from launcher.runtimes.container import docker_run_args

    a = host("gpu-01", "10.0.11.1", 3)
    u = unit(a, 0, 3)
    assert u.container is not None
    u = dataclasses.replace(u, container=dataclasses.replace(u.container, devices=("/dev/infiniband", "/dev/gdrdrv"),
                                                              extra_args=("--privileged",)))  # fmt: skip
    probe = preflight.rdma_probe_flags(u)
    run = docker_run_args(u, detached=True, render_hash="h")
    rdma = probe[:-2]
    assert rdma == ("--device", "/dev/infiniband", "--device", "/dev/gdrdrv", "--cap-add", "IPC_LOCK",
                    "--ulimit", "memlock=-1")  # fmt: skip
    start = run.index("--device")
    assert run[start:start + len(rdma)] == rdma
    assert probe[-2:] == ("--privileged", "img") and "--privileged" in run


def _catalog_plan(recipe_id: str, **spec: object) -> tuple[Plan, Inventory, Recipe]:
    root = Path(__file__).resolve().parents[2]
    catalog, inv = load_catalog(root / "recipes"), load_inventory(root / "inventories" / "example.yaml")
    if spec:
        inv = dataclasses.replace(inv, hosts=tuple(
            dataclasses.replace(h, spec=dataclasses.replace(h.spec, **spec)) for h in inv.hosts))  # type: ignore[arg-type]
    recipe = catalog.get(recipe_id)
    return make_plan(inv, catalog, auto_playbook(recipe, inv)), inv, recipe


def test_the_mooncake_stores_segments_are_checked_against_host_ram() -> None:
    """Issue 30 item 6: entry 43's 100 GB global segment per GPU is 800 GiB of host RAM on each
    eight-GPU node: more than the host has fails, more than 80% of it warns."""
    the_plan, inv, recipe = _catalog_plan("glm/sglang-pd-tp8pp2-6000d-fp8-mooncakestore")
    host = next(u.host for u in the_plan.units if u.role == "prefill")

    def memory_line(gib: int) -> str:
        facts = {host: HostFacts(mem_total=gib * 1024**3)}
        (check,) = [c for c in preflight.evaluate(the_plan, inv, recipe, facts) if c.name == "host-memory"]
        return check.line()

    need = f"{host}: host-memory: Mooncake store segments need 800.0 GiB of host RAM (8 GPUs x 100gb)"
    assert memory_line(512) == (
        f"fail: {need}; the host has 512.0 GiB (fix: use hosts with more RAM, or a recipe of your own with a "
        "smaller mooncake_store.global_segment_size (per GPU))")
    assert memory_line(900).startswith(f"warn: {need}; the host has 900.0 GiB: less than 20% left")
    assert memory_line(1536) == f"pass: {need}; the host has 1.5 TiB"


def test_a_fabric_other_than_the_measured_one_warns() -> None:
    """Issue 30 item 4: entry 38 was measured over RoCE; on IB hosts preflight says the figures
    do not carry over (a warning: it runs)."""
    the_plan, inv, recipe = _catalog_plan("glm/sglang-tp8pp2ep8-6000d", fabric="ib")
    lines = [c.line() for c in preflight.evaluate(the_plan, inv, recipe, {}) if c.name == "fabric"]
    assert lines[0] == (
        "warn: rtx-01: fabric: fabric ib; glm/sglang-tp8pp2ep8-6000d's figures were measured over roce (fix: "
        "compare against the catalog's numbers with care, or place it on hosts with fabric roce)")
    assert len(lines) == 2
    the_plan, inv, recipe = _catalog_plan("glm/sglang-tp8pp2ep8-6000d")
    assert [c for c in preflight.evaluate(the_plan, inv, recipe, {}) if c.name == "fabric"] == []
