"""Hand-built plans for deploy tests: a 2-node PP group, a router, optionally a secret."""

from __future__ import annotations

from typing import Mapping

from launcher.deploy.desired import Desired, from_rendered
from launcher.deploy.session import Target
from launcher.model import ContainerSpec, HealthCheck, Host, Plan, SecretRef, Unit
from launcher.render import render


def unit(host: str, name: str, group: str, *, rank: int = 0, nnodes: int = 1, role: str = "rank",
         order: int = 1, image: str = "engine:1", args: tuple[str, ...] = (), health: bool = True,
         secrets: tuple[SecretRef, ...] = ()) -> Unit:
    return Unit(
        host=host, name=name, deployment="demo", role=role, group=group, rank=rank, nnodes=nnodes,  # type: ignore[arg-type]
        argv=("python3", "-m", "engine", *args), env={"NCCL_SOCKET_IFNAME": "veth0"},
        secrets=secrets,
        container=ContainerSpec(image=image),
        health=HealthCheck(url=f"http://{host}:30000/health", timeout_s=60) if health else None,
        start_order=order,
    )


def pp_plan(*, args: tuple[str, ...] = (), router_args: tuple[str, ...] = (), secret: bool = False) -> Plan:
    secrets = (SecretRef(name="HF_TOKEN", from_env="HF_TOKEN"),) if secret else ()
    return Plan(deployment="demo", recipe="fam/pp", units=(
        unit("h1", "fleet-demo-rank-r0", "g0", rank=0, nnodes=2, args=args, secrets=secrets),
        unit("h2", "fleet-demo-rank-r1", "g0", rank=1, nnodes=2, args=args, health=False, secrets=secrets),
        unit("h3", "fleet-demo-router", "router", role="router", order=2, image="router:1", args=router_args),
    ))


def target(plan: Plan, secrets: Mapping[str, str] | None = None, hosts: tuple[str, ...] = ()) -> Target:
    """``hosts``: the hosts in scope (default: those of the plan's units)."""
    desired: tuple[Desired, ...] = from_rendered(plan, render(plan))
    names = hosts or tuple(sorted({u.host for u in plan.units}))
    return Target(deployment=plan.deployment, recipe=plan.recipe, hosts=tuple(Host(name=h, address=h) for h in names), units=desired,
                  secrets=dict(secrets or {}))
