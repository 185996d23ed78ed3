"""Issue 29 item 4: the engine version a bench report states is what the running servers say
(vLLM's /version, SGLang's /server_info), read on the leaders' hosts with fleet's own fetch
script (run by a real sh) from real stand-in processes -- not the recipe's ``engine_version``;
with scaled lengths the recipe's full-shape figures are not printed beside the measurements;
throughput per 8 of the plan's GPUs per level."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Sequence

from launcher.bench import report, version
from launcher.bench.version import ServerVersion
from launcher.engines import registry
from launcher.execute.local import LocalTransport
from launcher.execute.transport import Transport
from launcher.model import Host, Unit
from launcher.sandbox.standin.server import engine_version
from launcher.config.recipes import open_catalog
from launcher.config.benchspec import Shape
from tests.fleetbench.test_report_store import GLM, run
from tests.observe.test_targets import sandbox_plan
from tests.plan.test_golden import sandbox_inventory
from tests.sandbox.test_standin import Proc, free_port, procs, wait_status  # noqa: F401 - procs: fixture


class Local:
    """Every host is this machine: the fetch script runs under a real sh here."""

    def connect(self, host: Host) -> Transport:
        return LocalTransport(host.name)

    def close(self) -> None:
        pass


def at(units: Sequence[Unit], ports: dict[str, int]) -> list[Unit]:
    """The plan's leaders moved to 127.0.0.1:port (unit name -> port): where the stand-ins run."""
    out = []
    for u in units:
        if u.name in ports and u.health is not None:
            u = replace(u, ports={**u.ports, "http": ports[u.name]},
                        health=replace(u.health, url=f"http://127.0.0.1:{ports[u.name]}/health"))  # fmt: skip
        out.append(u)
    return out


def test_version_of_reads_the_version_field_only() -> None:
    assert version.version_of('{"version": "0.32.0+cpu"}') == "0.32.0+cpu"
    assert version.version_of('{"tp_size": 2, "version": "0.5.23"}') == "0.5.23"
    for bad in ("not json", "[]", '{"version": 3}', '{"version": ""}', "{}"):
        assert version.version_of(bad) is None, bad


def test_engines_name_their_version_endpoints() -> None:
    assert registry.get("vllm").version_paths == ("/version",)
    assert registry.get("sglang").version_paths == ("/server_info", "/get_server_info")


def test_read_asks_every_leader_its_server_and_says_which_did_not_answer(procs: list[Proc]) -> None:  # noqa: F811
    """SGLang PD (two prefills, one decode): two leaders answered by a real SGLang stand-in
    (its /server_info), the third on a closed port -- its unit named with the error."""
    p = sandbox_plan("pd-2p1d.yaml")
    leaders = [u for u in p.units if u.role in ("prefill", "decode") and u.health is not None]
    assert len(leaders) == 3
    port, closed = free_port(), free_port()
    procs.append(Proc(["sglang-launch", "--model-path", "/models/m", "--port", str(port)], FLEET_ENGINE_VERSION="0.5.5"))
    wait_status(f"http://127.0.0.1:{port}/health", 200)
    units = at(p.units, {leaders[0].name: port, leaders[1].name: port, leaders[2].name: closed})
    got = version.read(sandbox_inventory().hosts, units, Local(), forks=2)
    assert got.versions == ("0.5.5 (fleet stand-in)",)
    assert got.text == "0.5.5 (fleet stand-in)"
    (unread,) = got.unread
    assert unread.startswith(f"{leaders[2].host}/{leaders[2].name}: ") and "127.0.0.1" in unread, unread


def test_standin_serves_vllms_version_endpoint(procs: list[Proc]) -> None:  # noqa: F811
    """The vLLM stand-in answers /version as vLLM does ({"version": ...}), with the version its
    argv is checked against (the newest option snapshot without FLEET_ENGINE_VERSION)."""
    p = sandbox_plan("single.yaml")
    port = free_port()
    procs.append(Proc(["vllm", "serve", "tiny", "--host", "127.0.0.1", "--port", str(port)]))
    wait_status(f"http://127.0.0.1:{port}/health", 200)
    leader = next(u for u in p.units if u.health is not None and u.role == "single")
    # the sandbox's single playbook runs SGLang or vLLM: point its leader at the vLLM stand-in
    vllm_units = [replace(u, argv=("vllm", "serve", "tiny")) if u.name == leader.name else u for u in p.units]
    got = version.read(sandbox_inventory().hosts, at(vllm_units, {leader.name: port}), Local(), forks=1)
    assert got == ServerVersion(versions=(f"{engine_version('vllm', {})} (fleet stand-in)",), unread=())
    assert engine_version("vllm", {}) and engine_version("vllm", {"FLEET_ENGINE_VERSION": "0.33.1"}) == "0.33.1"


def test_caveats_state_the_served_version_not_the_recipes() -> None:
    recipe = open_catalog().get(GLM)
    same = ServerVersion(versions=(f"{recipe.engine_version} (fleet stand-in)",), unread=())
    assert report.caveats(recipe, image=recipe.image, gpus=16, skus=["RTX-6000D"], scale=1.0, served=same) == ()
    other = ServerVersion(versions=("0.5.5",), unread=())
    assert report.caveats(recipe, image=recipe.image, gpus=16, skus=["RTX-6000D"], scale=1.0, served=other) == (
        f"engine sglang 0.5.5 (read from the server), the recipe's figures are for {recipe.engine_version}",
    )
    none = ServerVersion(versions=(), unread=("h1/u: connection refused",))
    assert report.caveats(recipe, image=recipe.image, gpus=16, skus=["RTX-6000D"], scale=1.0, served=none) == (
        f"engine version not read from the server (h1/u: connection refused); the recipe's figures are for "
        f"sglang {recipe.engine_version}",
    )


def test_markdown_states_version_gpus_and_per_8_gpus_and_hides_full_shape_figures_when_scaled() -> None:
    recipe = open_catalog().get(GLM)
    full = run(engine_version="0.5.23 (fleet stand-in)")
    md = report.markdown(full, report.figures(recipe, full.shape))
    assert "16 GPUs (the plan's engines); engine 0.5.23 (fleet stand-in) (read from the server);" in md
    # 130 output tok/s on 16 GPUs: 65.0 per 8
    assert "| 12 | 8 | 0 | 0 | 0.10 | 3900.0 | 130.0 | 65.0 |" in md
    assert "| 10 (measured at 12) |" in md
    scaled = dataclasses.replace(full, shape=Shape(label="50k+1.5k x0.01", input_len=500, output_len=15))
    md = report.markdown(scaled, report.figures(recipe, Shape(label="50k+1.5k", input_len=50000, output_len=1500)))
    assert "measured at" not in md
    assert "this run's lengths are scaled (50k+1.5k x0.01): not comparable, not shown beside its numbers." in md
    assert "engine ? (not read from the server)" in report.markdown(run(engine_version=""), ())
