"""Where the watch registers engine groups (launcher/watch/homes.py): a regular router is home of
every leader; a PD router of the workers its own command line lists, each with its type and
bootstrap port; vllm-router's PD mode takes none over its API."""

from __future__ import annotations

from dataclasses import replace

from launcher.engines.router import sglang_pd_argv, vllm_pd_argv
from launcher.model import Plan
from launcher.pipeline import load_target
from launcher.watch.homes import Entry, Home, homes, pd_workers
from tests.deploy.factory import target, unit

P0, P1, D0 = "http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000"


def test_a_pd_routers_workers_come_from_its_command_line() -> None:
    argv = sglang_pd_argv(((P0, 8998), (P1, 9000)), (D0,), 8000, 29000)
    assert pd_workers(argv) == {P0: Entry(worker_type="prefill", bootstrap_port=8998),
                                P1: Entry(worker_type="prefill", bootstrap_port=9000),
                                D0: Entry(worker_type="decode")}  # fmt: skip
    assert pd_workers(vllm_pd_argv((P0 + "/",), (D0,), 8000)) == {P0: Entry(worker_type="prefill"), D0: Entry(worker_type="decode")}


def test_a_regular_router_is_home_of_any_leader_and_a_pd_router_of_its_own_workers() -> None:
    assert Home(url="http://r:1").entry(P0) == Entry(worker_type="regular")
    pd = Home(url="http://r:1", pd=pd_workers(sglang_pd_argv(((P0, 8998),), (D0,), 8000, 29000)))
    assert (pd.entry(P0 + "/"), pd.entry(D0), pd.entry(P1)) == (Entry(worker_type="prefill", bootstrap_port=8998),
                                                             Entry(worker_type="decode"), None)  # fmt: skip


def test_the_pd_deployments_own_router_at_its_ssh_address() -> None:
    target = load_target("playbooks/pd-glm-2p1d-6000d.yaml", "inventories/example.yaml", None, None)
    (home,) = homes(target, ())
    assert (home.url, home.adds) == ("http://10.10.6.11:8000", True)  # ctl-01's ansible_host; sglang-router
    leaders = {d.unit.health.url.rsplit("/", 1)[0]: d.unit.role for d in target.units
               if d.unit.rank == 0 and d.unit.role in ("prefill", "decode") and d.unit.health is not None}  # fmt: skip
    assert {u: e.worker_type for u, e in (home.pd or {}).items()} == leaders
    assert all(e.bootstrap_port == 8998 for e in (home.pd or {}).values() if e.worker_type == "prefill")
    assert homes(target, ("http://front:1",))[0] == Home(url="http://front:1")


def test_vllm_routers_pd_mode_takes_no_worker_over_its_api() -> None:
    router = replace(unit("h3", "fleet-demo-router", "router", role="router", order=2),
                     argv=vllm_pd_argv((P0,), (D0,), 8000), ports={"router": 8000})  # fmt: skip
    plan = Plan(deployment="demo", recipe="fam/pd", units=(unit("h1", "p", "p0", role="prefill"),
                                                         unit("h2", "d", "d0", role="decode"), router))  # fmt: skip
    (home,) = homes(target(plan), ())
    assert (home.url, home.adds, sorted(home.pd or {})) == ("http://h3:8000", False, [P0, D0])
