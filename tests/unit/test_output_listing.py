"""``print_listing``: a table when it fits, else one entry per row with its first cell (an id)
whole on its own line -- at 80 columns no recipe id or host name is broken mid-word."""

from __future__ import annotations

import io

from rich.console import Console

from launcher.cli.plan import network_rows, rows
from launcher.cli.recipes import hardware_text, quant_text, recipe_parallelism, report_text, show_table
from launcher.config.recipes import load_catalog
from launcher.output import print_listing
from launcher.pipeline import load_inputs, planned
from tests.config.conftest import REPO


def _at(width: int) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, color_system=None), buf


def test_fits_is_a_table() -> None:
    console, buf = _at(80)
    print_listing(("id", "n"), [("a/b", "1"), ("c/dd", "22")], console=console)
    assert buf.getvalue() == "id    n \na/b   1 \nc/dd  22\n"


def test_too_wide_is_one_entry_per_row() -> None:
    console, buf = _at(40)
    print_listing(("id", "engine", "report"), [("glm/sglang-tp4-b300-eagle-hicache-tuned", "sglang",
                                                "tuned +195.3% (50k+1.5k), +30.6% (8k+1k)")],
                  title="1 of 1", console=console)  # fmt: skip
    assert buf.getvalue() == (
        "1 of 1\n"
        "glm/sglang-tp4-b300-eagle-hicache-tuned\n"
        "    engine sglang  report tuned +195.3%\n"
        "    (50k+1.5k), +30.6% (8k+1k)\n"
    )


def test_recipes_list_at_80_columns_keeps_every_id_whole() -> None:
    catalog = load_catalog(REPO / "recipes")
    console, buf = _at(80)
    show_table(("id", "entry", "engine", "topology", "hardware", "parallelism", "quant", "report"),
               [(r.id, str(r.catalog_entry), r.engine, r.topology, hardware_text(r.hardware), recipe_parallelism(r),
                 quant_text(r), report_text(r.report)) for r in catalog.recipes.values()], console=console)  # fmt: skip
    lines = buf.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert [line for line in lines if not line.startswith(" ")] == list(catalog.recipes)


def test_plan_at_80_columns_keeps_hosts_and_images_whole() -> None:
    p = planned(load_inputs(REPO / "playbooks" / "pd-glm-2p1d-6000d.yaml", REPO / "inventories" / "example.yaml"))
    console, buf = _at(80)
    print_listing(("host", "unit", "role", "rank", "gpus", "ports", "image"), rows(p), console=console)
    text = buf.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert text.count("image lmsysorg/sglang:glm-5.3-flash\n") == len(p.units)
    assert "    ports bootstrap=8998 dist_init=20000 http=30000" in text  # labelled ports


def test_plan_shows_per_host_network_values() -> None:
    p = planned(load_inputs(REPO / "playbooks" / "pd-glm-2p1d-6000d.yaml", REPO / "inventories" / "example.yaml"))
    columns, net = network_rows(p)
    assert columns == ("host", "data ip", "nic", "gid", "hcas")
    assert ("rtx-03", "10.10.4.13", "ens1f0np0", "5", "mlx5_0:1,mlx5_1:1") in net  # rtx-03's own GID index
    assert ("rtx-06", "10.10.4.16", "ens2f0np0", "3", "mlx5_0:1,mlx5_1:1") in net  # and rtx-06's own NIC
    assert "ctl-01" not in [r[0] for r in net]  # the router's host has no fabric env
