"""Scrape targets from real plans: which units have a metrics endpoint, on which port, with
which labels; the file_sd file's merge and atomic replacement; the metric-name map."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from launcher.config.playbook import load_playbook
from launcher.config.recipes import load_catalog
from launcher.engines import flags
from launcher.errors import InputError
from launcher.observe import sdfile
from launcher.observe.names import NAMES, kind_of, names_for
from launcher.observe.targets import LABELS, endpoints, target_groups
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
    assert names_for("sglang-router").running == "smg_worker_requests_active"
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
    from launcher.observe import publish as pub
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
    assert {g["labels"]["generation"] for g in pub.publish(path, target, lambda h: None)} == {"1"}  # type: ignore[arg-type, return-value]
    monkeypatch.setattr(pub, "status", lambda t, c, f: rows(2, "h2"))
    groups = pub.publish(path, target, lambda h: None)  # type: ignore[arg-type, return-value]
    by_host = {g["labels"]["host"]: g["labels"]["generation"] for g in groups}
    assert by_host == {"h1": "2", "h2": "1", "h3": "2", "h4": "2", "h5": "2"}  # h2 unread: its last known target stays
