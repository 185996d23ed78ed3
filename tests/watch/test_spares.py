"""Spare hosts (launcher/watch/spares.py, placement.<role>.spares): the group planned with a spare
standing in for its lost host keeps its name and rank order and moves nothing else; the hosts
say where it lives (a copy on a spare counts unless its planned host holds a newer one); the
playbook refuses spares for roles that run once and spares that are placed already."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.playbook import load_playbook
from launcher.config.recipes import load_catalog
from launcher.deploy.manifest import Manifest
from launcher.errors import InputError
from launcher.pipeline import Inputs
from launcher.plan import plan
from launcher.watch.spares import Spares, moved, placed
from tests.plan.test_golden import sandbox_inventory
from tests.sandbox_playbooks import standin_playbook

RECIPE = "kimi/sglang-tp8pp2-h100"


def inputs(tmp_path: Path, spares: str = "h7:h8") -> Inputs:
    pb = tmp_path / "w.yaml"
    pb.write_text(standin_playbook("sb-watch", RECIPE, {"rank": "h1:h2:h3:h4", "router": "h5"},
                                   rest="").replace("    hosts: h1:h2:h3:h4\n", f"    hosts: h1:h2:h3:h4\n    spares: {spares}\n"))  # fmt: skip
    inv, cat = sandbox_inventory(), load_catalog()
    return Inputs(inventory=inv, catalog=cat, playbook=load_playbook(pb, cat, inv))


def ranks(i: Inputs) -> list[tuple[str, int, str]]:
    return sorted((u.group, u.rank, u.host) for u in plan(i.inventory, i.catalog, i.playbook, {}).units)


def test_the_spare_takes_the_lost_hosts_place_and_nothing_else_moves(tmp_path: Path) -> None:
    i = inputs(tmp_path)
    assert ranks(i) == [("sb-watch/rank0", 0, "h1"), ("sb-watch/rank0", 1, "h2"), ("sb-watch/rank1", 0, "h3"),
                        ("sb-watch/rank1", 1, "h4"), ("sb-watch/router", 0, "h5")]  # fmt: skip
    # h8 sorts after h3 and h4: in the playbook alone it would take rank1's place (the planner
    # follows inventory order); in the moved inventory it stands where the lost host stood.
    assert ranks(moved(i, {"h2": "h8"})) == [("sb-watch/rank0", 0, "h1"), ("sb-watch/rank0", 1, "h8"),
                                             ("sb-watch/rank1", 0, "h3"), ("sb-watch/rank1", 1, "h4"),
                                             ("sb-watch/router", 0, "h5")]  # fmt: skip
    assert ranks(moved(i, {"h3": "h7", "h1": "h8"}))[:4] == [("sb-watch/rank0", 0, "h8"), ("sb-watch/rank0", 1, "h2"),
                                                             ("sb-watch/rank1", 0, "h7"), ("sb-watch/rank1", 1, "h4")]  # fmt: skip
    assert moved(i, {}) is i


def test_spares_of_a_playbook(tmp_path: Path) -> None:
    i = inputs(tmp_path)
    spares = Spares.of(i, lambda x: None)  # type: ignore[arg-type,return-value]
    assert spares is not None and [h.name for h in spares.by_role["rank"]] == ["h7", "h8"]
    plain = Inputs(inventory=i.inventory, catalog=i.catalog,
                   playbook=load_playbook(_write(tmp_path, standin_playbook("x", RECIPE, {"rank": "h1:h2"})), i.catalog, i.inventory))  # fmt: skip
    assert Spares.of(plain, lambda x: None) is None  # type: ignore[arg-type,return-value]


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(text)
    return p


def m(unit: str, host: str, at: str) -> Manifest:
    return Manifest(deployment="d", unit=unit, host=host, group="d/rank0", role="rank", rank=1, runtime="docker",
                    render_hash="x", recipe=RECIPE, image="i", generation=1, deployed_by="op", deployed_at=at, files=())  # fmt: skip


def test_the_hosts_say_where_a_group_lives() -> None:
    planned = {"u-r0": "h1", "u-r1": "h2"}
    on_h8 = {"h8": {"u-r1": m("u-r1", "h8", "2026-12-02T10:00:00Z")}}
    assert placed(planned, on_h8, {"h1": {}, "h2": None}) == {"h2": "h8"}, "h2 away: the spare's copy stands"
    old = {"u-r1": m("u-r1", "h2", "2026-12-01T10:00:00Z")}
    assert placed(planned, on_h8, {"h2": old}) == {"h2": "h8"}, "h2 back with its older copy: still the spare's"
    newer = {"u-r1": m("u-r1", "h2", "2026-12-02T11:00:00Z")}
    assert placed(planned, on_h8, {"h2": newer}) == {}, "fleet up redeployed it on h2 since"
    assert placed(planned, {"h8": {}}, {"h2": None}) == {}


@pytest.mark.parametrize(("placement", "message"), [
    ({"rank": "h1:h2:h3:h4", "router": "h5\n    spares: h6"}, "spares are for engine roles"),
    ({"rank": "h1:h2:h3:h4\n    spares: h5:h6", "router": "h5"}, "h5 already placed: spare hosts must be in no placement"),
])  # fmt: skip
def test_the_playbook_refuses_bad_spares(tmp_path: Path, placement: dict[str, str], message: str) -> None:
    inv, cat = sandbox_inventory(), load_catalog()
    with pytest.raises(InputError) as err:
        load_playbook(_write(tmp_path, standin_playbook("x", RECIPE, placement)), cat, inv)
    assert message in str(err.value) and "placement/" in str(err.value) and "spares" in str(err.value), str(err.value)
