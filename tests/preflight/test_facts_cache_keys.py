"""Facts cache keys are not paths (issue 25 item 6): a host named ``../../x`` wrote ``x.json``
outside the cache directory.  Names the inventory loader now refuses still reach the cache
through any other path that makes a ``Host``, so the cache quotes them itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.model import Host, Inventory
from launcher.facts import cache as facts_cache


@pytest.mark.parametrize("name", ["../../escaped", "/abs/escaped", "..", "a/../../escaped", "%2F..", "x" * 300])
def test_a_host_name_never_leaves_the_cache_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("FLEET_FACTS_DIR", str(tmp_path / "cache" / "facts"))
    inv_file = tmp_path / "hosts.yaml"
    inv_file.write_text("all:\n")
    host = Host(name=name, address="198.18.0.1")
    inventory = Inventory(path=str(inv_file), hosts=(host,), groups={})
    item = facts_cache.entry(host, "", 1.0, 2.0)
    written = facts_cache.store(inventory, item)
    assert written.parent == facts_cache.inventory_dir(inventory)
    assert [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "hosts.yaml"] == [written]
    assert facts_cache.load(inventory, max_age_s=None)[name].host == name


def test_an_ordinary_name_keeps_its_readable_file_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_FACTS_DIR", str(tmp_path / "facts"))
    host = Host(name="gpu-01", address="198.18.0.1")
    inventory = Inventory(path=str(tmp_path / "hosts.yaml"), hosts=(host,), groups={})
    assert facts_cache.store(inventory, facts_cache.entry(host, "", 1.0, 2.0)).name == "gpu-01.json"
