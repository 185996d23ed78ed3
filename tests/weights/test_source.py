"""``--source``: a directory here or HOST:PATH on an inventory host; every bad value is one
line naming it (exit 2 through the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import UsageError
from launcher.weights.stage import Source, parse_source
from tests.preflight.factory import host, inventory

INV = inventory(host("h1", "10.0.0.1"), host("h2", "10.0.0.2"))


def test_a_directory_here_and_a_path_on_a_host(tmp_path: Path) -> None:
    assert parse_source(str(tmp_path), INV) == Source(kind="dir", root=str(tmp_path))
    assert parse_source("h2:/srv/models", INV) == Source(kind="host", root="/srv/models", host="h2")


@pytest.mark.parametrize(("text", "error"), [
    ("h9:/srv/models", "--source h9:/srv/models: no host 'h9' in the inventory"),
    ("h1:models", "--source h1:models: the path on h1 must be absolute"),
    ("/nonexistent/models", "--source /nonexistent/models: no such directory on this host"),
])  # fmt: skip
def test_bad_sources_are_named(text: str, error: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_source(text, INV)
    assert str(err.value) == error
