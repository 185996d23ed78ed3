"""Hand-built plans for render tests: every unit shape the planner produces (single, multi-node
ranks, PD prefill/decode, router, mooncake master, gateway with config files, native)."""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from launcher.model import ContainerSpec, HealthCheck, Mount, Plan, SecretRef, Unit

IMAGE = "lmsysorg/sglang:v0.5.4.post1-cu129"
GATEWAY_IMAGE = "openresty/openresty:1.27.1.2-0-bookworm"


def container(**kw: object) -> ContainerSpec:
    base = ContainerSpec(
        image=IMAGE,
        shm_size="32g",
        gpus=(0, 1, 2, 3, 4, 5, 6, 7),
        devices=("/dev/infiniband",),
        cap_add=("IPC_LOCK",),
        ulimits=("memlock=-1", "stack=67108864"),
        mounts=(Mount(host="/models", container="/models", read_only=True), Mount(host="/var/cache/fleet", container="/root/.cache")),
        labels={"team": "inference"},
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def unit(name: str = "fleet-demo-single-r0", **kw: object) -> Unit:
    base = Unit(
        host="gpu-a1",
        name=name,
        deployment="demo",
        role="single",
        group="demo-single",
        gpus=(0, 1, 2, 3, 4, 5, 6, 7),
        ports={"http": 30000},
        argv=("python3", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-8B", "--tp", "8", "--port", "30000"),
        env={"NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"},
        secrets=(SecretRef(name="HF_TOKEN", from_env="HF_TOKEN"),),
        container=container(),
        health=HealthCheck(url="http://10.0.0.1:30000/health", timeout_s=1800),
        start_order=1,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def plan(*units: Unit, files: Mapping[str, str] | None = None, deployment: str = "demo") -> Plan:
    return Plan(deployment=deployment, recipe="qwen3/8b-h100", units=units or (unit(),), files=dict(files or {}))


def multinode_plan() -> Plan:
    ranks = tuple(
        unit(
            f"fleet-demo-rank-r{r}",
            host=f"gpu-a{r + 1}",
            role="rank",
            group="demo-g0",
            rank=r,
            nnodes=2,
            argv=("python3", "-m", "sglang.launch_server", "--nnodes", "2", "--node-rank", str(r), "--dist-init-addr", "10.0.0.1:20000"),
            health=HealthCheck(url="http://10.0.0.1:30000/health", timeout_s=2400) if r == 0 else None,
        )
        for r in range(2)
    )
    return plan(*ranks)


def full_plan() -> Plan:
    """PD with router, Mooncake master, gateway (config files), a native unit and JSON flags."""
    units = (
        unit(
            "fleet-demo-mooncake-master-r0",
            host="cpu-1",
            role="mooncake-master",
            group="demo-mooncake",
            gpus=(),
            argv=("/usr/local/bin/mooncake_master", "--port", "50051", "--enable_http_metadata_server=true"),
            env={},
            secrets=(),
            container=None,
            runtime="systemd",
            start_order=0,
            health=None,
        ),
        unit(
            "fleet-demo-prefill-0-r0",
            role="prefill",
            group="demo-prefill-0",
            argv=(
                "python3", "-m", "sglang.launch_server", "--disaggregation-mode", "prefill",
                "--json-model-override-args", '{"rope_scaling": {"type": "yarn", "factor": 4.0}}',
                "--speculative-algorithm", "EAGLE",
            ),
        ),
        unit(
            "fleet-demo-decode-0-r0",
            host="gpu-a2",
            role="decode",
            group="demo-decode-0",
            container=container(gpus=(4, 5), extra_args=("--ulimit", "nofile=1048576:1048576"), restart_policy="on-failure:5"),
            argv=("python3", "-m", "sglang.launch_server", "--disaggregation-mode", "decode"),
        ),
        unit(
            "fleet-demo-router-r0",
            host="cpu-1",
            role="router",
            group="demo-router",
            gpus=(),
            container=container(gpus=(), devices=(), cap_add=(), ulimits=(), mounts=(), labels={}),
            argv=("python3", "-m", "sglang_router.launch_router", "--pd-disaggregation", "--port", "8000"),
            env={},
            secrets=(),
            start_order=2,
        ),
        unit(
            "fleet-demo-gateway-r0",
            host="cpu-1",
            role="gateway",
            group="demo-gateway",
            gpus=(),
            container=container(
                image=GATEWAY_IMAGE,
                gpus=(),
                devices=(),
                cap_add=(),
                ulimits=(),
                shm_size=None,
                ipc_host=False,
                mounts=(Mount(host="/etc/fleet/gateway/demo.conf", container="/etc/nginx/conf.d/default.conf", read_only=True),),
                labels={},
            ),
            argv=("openresty", "-g", "daemon off;"),
            env={},
            secrets=(),
            start_order=3,
        ),
    )
    return plan(*units, files={"gateway/demo.conf": "worker_processes 1;\nevents {}\nhttp { server { listen 9080; } }\n"})
