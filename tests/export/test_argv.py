"""The exported LeaderWorkerSet / DisaggregatedSet runs exactly ``fleet render``'s argv on every
rank: each planned engine unit's argv, read from the ``docker run`` line of its rendered run.sh,
equals its pod template's argv once LWS's own values are put in (``$(LWS_WORKER_INDEX)`` = the
rank, ``$(LWS_LEADER_ADDRESS)`` = the leader's address); and the template differs from the
rendered argv in those rank/leader fields alone."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from launcher.export.k8s.manifests import ROLE_LABEL
from launcher.export.k8s.podcheck import pod_templates
from launcher.export.k8s.pods import shown_argv
from launcher.export.k8s.templates import LEADER_ADDRESS, WORKER_INDEX
from launcher.model import Plan
from launcher.network import data_ip
from launcher.render import render
from tests.export.helpers import exported, objects
from tests.plan.test_catalog import auto_plan, inputs, recipe_ids

LWS_RECIPES = [r for r in recipe_ids() if "pp" in r.split("/")[1] or "-pd-" in r]


def rendered_argv(plan: Plan) -> dict[str, tuple[str, ...]]:
    """Unit name -> the engine argv its rendered run.sh starts (after the image)."""
    out: dict[str, tuple[str, ...]] = {}
    for host in render(plan).hosts.values():
        for f in host.files:
            if not f.path.endswith("/run.sh"):
                continue
            line = next(x for x in f.content.splitlines() if x.startswith('exec "$docker" run '))
            tokens = shlex.split(line)
            entry = tokens[tokens.index("--entrypoint") + 1]
            unit = tokens[tokens.index("--name") + 1]
            image = next(u.container.image for u in plan.units if u.name == unit and u.container)
            out[unit] = (entry, *tokens[tokens.index(image, tokens.index("--entrypoint")) + 1 :])
    return out


def templates(recipe_id: str) -> dict[tuple[str, str], tuple[str, ...]]:
    """(role, leaderTemplate|workerTemplate) -> the engine argv of that template."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for obj in objects(exported(recipe_id)).values():
        if obj["kind"] not in ("LeaderWorkerSet", "DisaggregatedSet"):
            continue
        for path, pod in pod_templates(obj):
            role = pod["metadata"]["labels"][ROLE_LABEL]
            out[(role, path.rsplit(".", 1)[1])] = shown_argv(pod["spec"]["containers"][0])
    return out


def expand(argv: tuple[str, ...], rank: int, leader: str) -> tuple[str, ...]:
    return tuple(a.replace(WORKER_INDEX, str(rank)).replace(LEADER_ADDRESS, leader).replace("$$(", "$(") for a in argv)


def test_the_lws_recipes_are_the_multinode_and_pd_ones() -> None:
    catalog = inputs()[0]
    assert LWS_RECIPES == [r for r in recipe_ids() if catalog.get(r).topology in ("multinode", "pd")]
    assert len(LWS_RECIPES) >= 10


@pytest.mark.parametrize("recipe_id", LWS_RECIPES)
def test_every_rank_runs_the_rendered_argv(recipe_id: str) -> None:
    plan = auto_plan(recipe_id)
    hosts = {h.name: h for h in inputs()[1].hosts}
    by_template = templates(recipe_id)
    rendered = rendered_argv(plan)
    checked = 0
    for u in plan.units:
        if u.role not in ("rank", "prefill", "decode"):
            continue
        key = "workerTemplate" if u.rank > 0 or u.nnodes == 1 else "leaderTemplate"
        leader = next(x for x in plan.units if x.group == u.group and x.rank == 0)
        template = by_template[(u.role, key)]
        assert expand(template, u.rank, data_ip(hosts[leader.host])) == rendered[u.name] == u.argv
        if u.nnodes > 1:
            differ = [(t, r) for t, r in zip(template, rendered[u.name]) if t != r]
            assert differ and all(WORKER_INDEX == t or LEADER_ADDRESS in t for t, _ in differ), differ
            i = template.index(WORKER_INDEX)
            assert template[i - 1] == "--node-rank"
        checked += 1
    assert checked == sum(1 for u in plan.units if u.role in ("rank", "prefill", "decode")) > 1


def _first(objs: dict[str, dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(o for o in objs.values() if o["kind"] == kind)


def test_a_pp_recipe_maps_to_one_lws_group_of_its_nodes() -> None:
    lws = _first(objects(exported("kimi/vllm-tp8pp4-6000d")), "LeaderWorkerSet")
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert (lws["spec"]["replicas"], lwt["size"], lwt["restartPolicy"], lws["spec"]["startupPolicy"]) == (
        1, 4, "RecreateGroupOnPodRestart", "LeaderCreated")  # fmt: skip
    leader = shown_argv(lwt["leaderTemplate"]["spec"]["containers"][0])
    worker = shown_argv(lwt["workerTemplate"]["spec"]["containers"][0])
    assert "--headless" in worker and "--headless" not in leader  # vLLM's mp executor: workers serve no HTTP
    assert leader[leader.index("--master-addr") + 1] == LEADER_ADDRESS


def test_pd_roles_carry_the_recipes_xpyd() -> None:
    ds = _first(objects(exported("glm/sglang-pd-tp8pp2ep8-6000d")), "DisaggregatedSet")
    shape = {r["name"]: (r["spec"]["replicas"], r["spec"]["leaderWorkerTemplate"]["size"]) for r in ds["spec"]["roles"]}
    recipe = inputs()[0].get("glm/sglang-pd-tp8pp2ep8-6000d")
    assert recipe.pd is not None
    assert shape == {"prefill": (recipe.pd.prefill.replicas, recipe.pd.prefill.nodes),
                     "decode": (recipe.pd.decode.replicas, recipe.pd.decode.nodes)}  # fmt: skip
