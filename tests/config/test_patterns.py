"""Host patterns select what `ansible PATTERN --list-hosts` selects, in inventory order."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.inventory import load_inventory
from launcher.config.patterns import select, split_pattern
from launcher.errors import InputError
from tests.config.ansible_ref import list_hosts
from tests.config.conftest import FIXTURES, REPO

EXAMPLE = REPO / "inventories" / "example.yaml"
NESTED = FIXTURES / "inventories" / "nested" / "hosts.yaml"
RANGES = FIXTURES / "inventories" / "ranges" / "hosts.yaml"

CASES = [
    (EXAMPLE, "all"),
    (EXAMPLE, "*"),
    (EXAMPLE, "h100"),
    (EXAMPLE, "rtx-0*"),
    (EXAMPLE, "~rtx-0[1-3]"),
    (EXAMPLE, "~h[18]00-0[12]"),
    (EXAMPLE, "h800:h100"),
    (EXAMPLE, "b300,h100-02"),
    (EXAMPLE, "rtx6000d:&rtx6000d_rack2"),
    (EXAMPLE, "rtx6000d:!rtx-03:!rtx-06"),
    (EXAMPLE, "!rtx6000d"),
    (EXAMPLE, "&h100"),
    (EXAMPLE, "h100[0]"),
    (EXAMPLE, "h100[1:2]"),
    (EXAMPLE, "h100[2:]"),
    (EXAMPLE, "h100[-1]"),
    (EXAMPLE, "rtx*:!rtx6000d_rack1"),
    (EXAMPLE, "rtx6000d_rack?"),
    (EXAMPLE, "ctl-01"),
    (NESTED, "fleet"),
    (NESTED, "fleet:&h100:!zeta"),
    (NESTED, "h100:spare"),
    (RANGES, "ungrouped"),
    (RANGES, "node*-2"),
    (RANGES, "gpu[1:3]"),
]


@pytest.mark.parametrize(("inventory", "pattern"), CASES, ids=lambda v: v if isinstance(v, str) else v.name)
def test_same_hosts_as_ansible(inventory: Path, pattern: str) -> None:
    inv = load_inventory(inventory)
    mine = tuple(h.name for h in select(inv, pattern))
    theirs = list_hosts(inventory, pattern)
    assert set(mine) == set(theirs)
    order = [h.name for h in inv.hosts]
    assert list(mine) == sorted(theirs, key=order.index)  # always inventory order


def test_union_is_in_inventory_order_whatever_the_spelling() -> None:
    inv = load_inventory(EXAMPLE)
    assert [h.name for h in select(inv, "h800:h100-01")] == ["h100-01", "h800-01", "h800-02"]


def test_split() -> None:
    assert split_pattern("a:&b:!c") == ["a", "&b", "!c"]
    assert split_pattern("gpu[1:3]:b") == ["gpu[1:3]", "b"]
    assert split_pattern(" a , b:c ") == ["a", "b:c"]


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("zzz", "pattern 'zzz': 'zzz' matches no host or group in {inv}"),
        ("h10", "pattern 'h10': 'h10' matches no host or group in {inv} (did you mean 'h100'?)"),
        ("h100:typo*", "pattern 'h100:typo*': 'typo*' matches no host or group in {inv}"),
        ("h100:&h800", "pattern 'h100:&h800' matches no host in {inv}"),
        ("h100[9]", "pattern 'h100[9]': [9] is past the 4 hosts of 'h100'"),
        ("~rtx(", "pattern '~rtx(': bad regular expression '~rtx(': missing ), unterminated subpattern at position 3"),
        ("", "empty host pattern"),
    ],
)
def test_errors(pattern: str, message: str) -> None:
    inv = load_inventory(EXAMPLE)
    with pytest.raises(InputError) as err:
        select(inv, pattern)
    assert str(err.value) == message.format(inv=inv.path)
