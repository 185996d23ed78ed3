"""Every catalog recipe, auto-placed on inventories/example.yaml as ``fleet plan`` places it,
exports and validates: the CRDs' schemas and CEL rules, the core objects' Kubernetes 1.36
schemas, the kustomization; and the router's rewritten argv passes its parser snapshot."""

from __future__ import annotations

import pytest

from launcher.engines.argcheck import check_argv, known_versions, split_command
from launcher.export.k8s import run
from launcher.export.k8s.podcheck import pod_templates
from launcher.export.k8s.pods import shown_argv
from tests.export.helpers import exported, objects
from tests.plan.test_catalog import CATALOG_SIZE, recipe_ids


def test_the_whole_catalog_is_covered() -> None:
    assert len(recipe_ids()) == CATALOG_SIZE == 55


@pytest.mark.parametrize("recipe_id", recipe_ids())
def test_recipe_exports_and_validates(recipe_id: str) -> None:
    written = exported(recipe_id)
    assert run.check(written) == []
    kinds = sorted(o["kind"] for o in objects(written).values())
    assert ("DisaggregatedSet" in kinds) == ("/" in recipe_id and "-pd-" in recipe_id)
    for o in objects(written).values():
        for _, pod in pod_templates(o):
            for c in pod["spec"]["containers"]:
                if c["name"] != "router":
                    continue
                engine, args = split_command(shown_argv(c))
                assert check_argv(engine, known_versions(engine)[-1], args) == ()
