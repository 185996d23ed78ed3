"""Scrape targets from real plans: which units have a metrics endpoint, on which port, with
which labels; the file_sd file's merge and atomic replacement; the metric-name map."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.config.inventory import load_inventory
from launcher.config.playbook import load_playbook
from launcher.config.recipes import load_catalog
from launcher.engines import flags
from launcher.errors import InputError
from launcher.observe import sdfile
from launcher.observe.names import NAMES, kind_of, names_for
from launcher.observe.targets import LABELS, endpoints, scrape_endpoints, target_groups
from launcher.plan import plan
from tests.plan.test_catalog import ROOT, auto_plan
from tests.plan.test_golden import sandbox_inventory


def sandbox_plan(name: str):  # type: ignore[no-untyped-def]
    inventory, catalog = sandbox_inventory(), load_catalog(ROOT / "recipes")
    return plan(inventory, catalog, load_playbook(ROOT / "playbooks" / "sandbox" / name, catalog, inventory))


def test_sglang_pd_targets_are_leaders_and_router_at_data_ips() -> None:
    p = sandbox_plan("pd-2p1d.yaml")
    eps = {e.unit: e for e in endpoints(p.units)}
    # 3 instances x 2 nodes: only each instance's rank 0 serves HTTP (and so /metrics); + the router
    assert sorted((e.role, e.rank, e.kind) for e in eps.values()) == [
        ("decode", 0, "sglang"), ("prefill", 0, "sglang"), ("prefill", 0, "sglang"), ("router", 0, "sglang-router"),
    ]
    units = {u.name: u for u in p.units}
    for e in eps.values():
        u = units[e.unit]
        port = u.ports["router_metrics"] if e.role == "router" else u.ports["http"]
        assert u.health is not None and e.address == f"{u.health.url.split('//')[1].split(':')[0]}:{port}"
        assert e.url == f"http://{e.address}/metrics"
    # SGLang serves /metrics only with --enable-metrics: fleet renders it on every SGLang rank
    assert all(flags.has(u.argv, ("--enable-metrics",)) for u in p.units if u.role in ("prefill", "decode"))


def test_vllm_pd_targets_include_vllm_router_and_mooncake_master_not_gateway() -> None:
    p = auto_plan("deepseek/vllm-pd-tp8-6000d-nvfp4")
    got = {(e.role, e.kind, e.address.rsplit(":", 1)[1]) for e in endpoints(p.units)}
    assert got == {
        ("mooncake-master", "mooncake-master", "9003"), ("decode", "vllm", "8000"), ("prefill", "vllm", "8000"),
        ("router", "vllm-router", "29000"),
    }
    assert "gateway" in {u.role for u in p.units}


def test_a_router_names_the_leaders_it_routes_to() -> None:
    """From the router's own argv (--prefill / --decode / --worker-urls URLs): what ``fleet top``
    adds up for the router's load."""
    for p in (sandbox_plan("pd-2p1d.yaml"), sandbox_plan("rolling-router.yaml"),
              auto_plan("deepseek/vllm-pd-tp8-6000d-nvfp4")):  # fmt: skip
        eps = endpoints(p.units)
        (router,) = [e for e in eps if e.role == "router"]
        leaders = {e.address for e in eps if e.kind in ("sglang", "vllm")}
        assert router.workers and set(router.workers) == leaders, p.deployment
        assert all(e.workers == () for e in eps if e is not router)


DP_ATTENTION = """\
name: deepseek-adp
recipe: deepseek/sglang-tp8pp2-6000d-fp8
placement:
  rank:
    hosts: rtx6000d_rack1[0:1]
overrides:
  parallelism: {tp: 16, pp: 1, attn_dp: 2}
"""


def test_dp_attention_renders_metrics_for_all_schedulers_and_every_node_is_scraped(tmp_path: Path) -> None:
    """SGLang 0.5.23 under attention DP: every scheduler reports (the flag), and the second node's
    schedulers, a DP group of their own, are read at that node's /metrics (--port, its data IP)."""
    (tmp_path / "pb.yaml").write_text(DP_ATTENTION)
    inventory, catalog = load_inventory(ROOT / "inventories" / "example.yaml"), load_catalog(ROOT / "recipes")
    p = plan(inventory, catalog, load_playbook(tmp_path / "pb.yaml", catalog, inventory))
    r0, r1 = p.units
    for u in (r0, r1):
        assert flags.has(u.argv, ("--enable-metrics-for-all-schedulers",)) and flags.value(u.argv, ("--attn-dp-size",)) == "2"
    assert [e.unit for e in endpoints(p.units)] == [r0.name]  # leaders only: what bench and k8s read
    eps = scrape_endpoints(p.units)
    assert [(e.unit, e.rank, e.kind, e.group) for e in eps] == [(r0.name, 0, "sglang", r0.group), (r1.name, 1, "sglang", r0.group)]
    assert eps[1].address == f"{r1.env['SGLANG_HOST_IP']}:{flags.value(r1.argv, ('--port',))}" == "10.10.4.12:30000"
    # without --enable-metrics no node serves /metrics: the second node is not scraped
    no_metrics = replace(r1, argv=flags.remove(r1.argv, ("--enable-metrics",)))
    assert [e.unit for e in scrape_endpoints((r0, no_metrics))] == [r0.name]


def test_without_attention_dp_no_flag_and_only_leaders_are_scraped() -> None:
    """TP/PP across nodes: a node > 0 holds peers of rank 0's schedulers, which rank 0 reports."""
    for p in (sandbox_plan("pp2.yaml"), sandbox_plan("pd-2p1d.yaml"), auto_plan("kimi/sglang-tp8pp2-h100")):
        assert scrape_endpoints(p.units) == endpoints(p.units)
        assert not any(flags.has(u.argv, ("--enable-metrics-for-all-schedulers",)) for u in p.units)


def test_removing_enable_metrics_is_an_operator_choice() -> None:
    from dataclasses import replace

    inventory, catalog = sandbox_inventory(), load_catalog(ROOT / "recipes")
    pb = load_playbook(ROOT / "playbooks" / "sandbox" / "single.yaml", catalog, inventory)
    pb = replace(pb, overrides=replace(pb.overrides, remove_args=("--enable-metrics",)))
    (u,) = plan(inventory, catalog, pb).units
    assert not flags.has(u.argv, ("--enable-metrics",))


def test_target_groups_label_every_deployed_endpoint_and_skip_undeployed() -> None:
    p = sandbox_plan("rolling-router.yaml")
    eps = endpoints(p.units)
    gens = {(e.host, e.unit): 3 for e in eps[1:]}  # the first one is not deployed
    groups = target_groups(p.deployment, p.recipe, eps, gens)
    assert len(groups) == len(eps) - 1 == 4  # 4 replicas + router - the undeployed one
    for g, e in zip(groups, eps[1:]):
        assert g["targets"] == [e.address]
        assert tuple(g["labels"]) == LABELS
        assert g["labels"] == {
            "deployment": "sb-rr", "recipe": "qwen/sglang-tp2-h100-tuned", "role": e.role, "rank": "0",
            "host": e.host, "generation": "3", "group": e.group, "unit": e.unit, "kind": e.kind,
        }


def _group(deployment: str, unit: str) -> dict[str, object]:
    return {"targets": ["198.18.0.1:1"], "labels": {"deployment": deployment, "unit": unit, "group": "g", "rank": "0"}}


def test_sdfile_update_replaces_one_deployment_keeps_others(tmp_path: Path) -> None:
    path = tmp_path / "sd" / "fleet.json"
    sdfile.update(path, {"a"}, [_group("a", "u1"), _group("a", "u2")])
    sdfile.update(path, {"b"}, [_group("b", "u1")])
    sdfile.update(path, {"a"}, [_group("a", "u3")])
    doc = json.loads(path.read_text())
    assert [(g["labels"]["deployment"], g["labels"]["unit"]) for g in doc] == [("a", "u3"), ("b", "u1")]
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    sdfile.update(path, {"a", "b"}, [])  # down of both
    assert json.loads(path.read_text()) == []
    assert sorted(p.name for p in path.parent.iterdir()) == ["fleet.json", "fleet.json.lock"]  # no temp left


def test_sdfile_refuses_a_file_that_is_not_file_sd(tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    path.write_text('{"targets": []}')
    with pytest.raises(InputError) as err:
        sdfile.update(path, {"a"}, [_group("a", "u1")])
    assert str(err.value) == (
        f"{path}:1:1: not a Prometheus file_sd targets file (a JSON list of {{targets, labels}} groups)"
    )
    assert path.read_text() == '{"targets": []}'  # untouched


def test_sdfile_concurrent_updates_lose_nothing_and_readers_never_see_partial(tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    sdfile.update(path, {"x"}, [_group("x", f"u{i}") for i in range(200)])
    bad: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            text = path.read_text()
            try:
                json.loads(text)
            except ValueError:
                bad.append(text[:80])

    t = threading.Thread(target=reader)
    t.start()
    writers = [threading.Thread(target=sdfile.update, args=(path, {f"d{i}"}, [_group(f"d{i}", "u")])) for i in range(8)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    t.join()
    assert bad == []
    deployments = {g["labels"]["deployment"] for g in json.loads(path.read_text())}
    assert deployments == {"x", *(f"d{i}" for i in range(8))}
    assert sorted(os.listdir(tmp_path)) == ["fleet.json", "fleet.json.lock"]  # no temporary file left


def test_names_for_picks_the_newest_entry_not_newer_than_the_version() -> None:
    assert names_for("vllm", "0.32.0").kv_usage == "vllm:kv_cache_usage_perc"
    assert names_for("sglang", "0.5.23").running == "sglang:num_running_reqs"
    assert names_for("sglang-router").requests == "smg_router_requests_total"
    assert names_for("sglang-router").running is None  # moves under some --policy values only (names.py)
    assert names_for("mooncake-master").running is None
    assert {k for k, _, _ in NAMES} == {"sglang", "vllm", "sglang-router", "vllm-router", "mooncake-master"}


def test_kind_of_reads_the_entry_points_fleet_renders() -> None:
    assert kind_of(("python3", "-m", "sglang.launch_server", "--model-path", "m")) == "sglang"
    assert kind_of(("python3", "-m", "sglang_router.launch_router", "--worker-urls")) == "sglang-router"
    assert kind_of(("vllm", "serve", "m")) == "vllm"
    assert kind_of(("vllm-router", "--port", "1")) == "vllm-router"
    assert kind_of(("mooncake_master", "--rpc_port", "1")) == "mooncake-master"
    assert kind_of(("openresty", "-g", "daemon off;")) is None


def test_publish_keeps_the_groups_of_a_host_it_cannot_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.deploy.status import UnitStatus
    from launcher.deploy import publish as pub
    from launcher.pipeline import load_target
    from launcher.sandbox.inventory import preview

    inv = tmp_path / "inventory.yaml"
    inv.write_text(preview(15))
    target = load_target(ROOT / "playbooks" / "sandbox" / "rolling-router.yaml", inv, None, None)
    path = tmp_path / "fleet.json"

    def rows(gen: int, unreachable: str | None) -> tuple[UnitStatus, ...]:
        return tuple(
            UnitStatus(host=d.host, unit=d.name, role=d.unit.role, rank=d.unit.rank, group=d.unit.group,
                       state="unreachable" if d.host == unreachable else "running", health="ok",
                       generation=None if d.host == unreachable else gen, drift="none")
            for d in target.units
        )  # fmt: skip

    monkeypatch.setattr(pub, "status", lambda t, c, f: rows(1, None))
    groups, missed = pub.publish(path, target, lambda h: None)  # type: ignore[arg-type, return-value]
    assert {g["labels"]["generation"] for g in groups} == {"1"} and missed == ()
    monkeypatch.setattr(pub, "status", lambda t, c, f: rows(2, "h2"))
    groups, missed = pub.publish(path, target, lambda h: None)  # type: ignore[arg-type, return-value]
    assert missed == ("h2",)
    by_host = {g["labels"]["host"]: g["labels"]["generation"] for g in groups}
    assert by_host == {"h1": "2", "h2": "1", "h3": "2", "h4": "2", "h5": "2"}  # h2 unread: its last known target stays


def test_the_bench_reads_prefix_caches_where_the_prompts_are_processed() -> None:
    """fleet bench's prefix-cache hit rate (issue 29 item 1) reads the engines that run the
    prompts: a prefill/decode deployment's prefills, else every instance leader (no router)."""
    from launcher.bench.prefix import engine_endpoints

    pd = engine_endpoints(sandbox_plan("pd-2p1d.yaml").units)
    assert sorted((e.role, e.rank, e.kind) for e in pd) == [("prefill", 0, "sglang"), ("prefill", 0, "sglang")]
    routed = engine_endpoints(sandbox_plan("rolling-router.yaml").units)
    assert routed and all(e.role in ("single", "rank") and e.rank == 0 for e in routed)
    assert len(routed) == len([e for e in endpoints(sandbox_plan("rolling-router.yaml").units) if e.role != "router"])
