"""Which model dirs a deployment needs where: exactly the hosts running its engine units, at
the path the units read (repo ids at fleet's {models_dir}/<repo> convention), draft included."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.inventory import load_inventory
from launcher.errors import UsageError
from launcher.config.playbook import load_playbook
from launcher.config.recipes import open_catalog
from launcher.plan import plan
from launcher.sandbox.inventory import preview
from launcher.weights.needs import ModelNeed, model_needs

HERE = Path(__file__).parent


def _needs(tmp_path: Path, playbook: str) -> tuple[ModelNeed, ...]:
    inv_path = tmp_path / "inv.yaml"
    inv_path.write_text(preview(8))
    pb = tmp_path / "pb.yaml"
    pb.write_text(playbook)
    inventory = load_inventory(inv_path)
    catalog = open_catalog()
    playbook_obj = load_playbook(pb, catalog, inventory)
    return model_needs(plan(inventory, catalog, playbook_obj), inventory, catalog.get(playbook_obj.recipe))


def test_target_and_draft_on_every_placed_host_only(tmp_path: Path) -> None:
    text = (HERE / "eagle.yaml").read_text().replace("hosts: h100", "hosts: h2:h4")
    target, draft = _needs(tmp_path, text)
    assert target == ModelNeed(model="openai/gpt-oss-120b", what="weights", rel="openai/gpt-oss-120b",
                               paths=(("h2", "/srv/models/openai/gpt-oss-120b"), ("h4", "/srv/models/openai/gpt-oss-120b")))
    assert draft.what == "draft weights" and draft.rel == "lmsys/EAGLE3-gpt-oss-120b-bf16"
    assert [h for h, _ in draft.paths] == ["h2", "h4"]


def test_a_path_given_to_the_engine_is_staged_where_its_mount_puts_it(tmp_path: Path) -> None:
    text = (HERE / "eagle.yaml").read_text().replace("hosts: h100", "hosts: h1") + (
        "  engine_args: [--model-path, /models/local/gpt-fp8]\n")
    target, _ = _needs(tmp_path, text)
    assert (target.model, target.rel, target.paths) == ("/models/local/gpt-fp8", "local/gpt-fp8",
                                                         (("h1", "/srv/models/local/gpt-fp8"),))


def test_a_separate_tokenizer_is_needed_too(tmp_path: Path) -> None:
    text = (HERE / "eagle.yaml").read_text().replace("hosts: h100", "hosts: h1") + (
        "  engine_args: [--tokenizer-path, /models/org/tokenizer]\n")
    needs = _needs(tmp_path, text)
    assert [(n.what, n.rel, n.paths) for n in needs][2:] == [
        ("tokenizer", "org/tokenizer", (("h1", "/srv/models/org/tokenizer"),))]


def test_a_path_no_mount_reaches_is_refused(tmp_path: Path) -> None:
    text = (HERE / "eagle.yaml").read_text().replace("hosts: h100", "hosts: h1") + (
        "  engine_args: [--model-path, /opt/elsewhere/gpt]\n")
    with pytest.raises(UsageError, match=r"^h1/fleet-wt-eagle-single0-r0: weights '/opt/elsewhere/gpt' is neither a "
                       "path its mounts reach nor a repo id: nothing to stage$"):
        _needs(tmp_path, text)


def test_staged_weights_point_the_engine_at_the_local_copy_offline(tmp_path: Path) -> None:
    inv_path = tmp_path / "inv.yaml"
    inv_path.write_text(preview(8))
    pb = tmp_path / "pb.yaml"
    pb.write_text((HERE / "eagle.yaml").read_text().replace("hosts: h100", "hosts: h1") + "weights: staged\n")
    inventory = load_inventory(inv_path)
    catalog = open_catalog()
    (unit,) = [u for u in plan(inventory, catalog, load_playbook(pb, catalog, inventory)).units if u.role == "single"]
    argv = unit.argv
    assert argv[argv.index("--model-path") + 1] == "/models/openai/gpt-oss-120b"
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "/models/lmsys/EAGLE3-gpt-oss-120b-bf16"
    assert argv[argv.index("--served-model-name") + 1] == "gpt-oss-120b"  # the recipe's own name, not the path
    assert unit.env["HF_HUB_OFFLINE"] == "1"
    # ... and the weights it needs are the same dirs `fleet weights stage` fills.
    target, draft = model_needs(plan(inventory, catalog, load_playbook(pb, catalog, inventory)), inventory,
                                catalog.get("gpt/sglang-tp2dp4-h100-eagle3-tuned"))
    assert (target.paths, draft.paths) == ((("h1", "/srv/models/openai/gpt-oss-120b"),),
                                           (("h1", "/srv/models/lmsys/EAGLE3-gpt-oss-120b-bf16"),))
