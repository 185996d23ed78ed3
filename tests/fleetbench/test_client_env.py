"""aiperf's start-up bound: fleet gives aiperf's services its own start-up allowance to register
(aiperf's default, 30 s, failed a level on a loaded control host), the name is one aiperf's own
settings read, and an operator's value wins."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from launcher.bench.client import START_S, aiperf_path, client_env


def test_fleet_sets_the_bound_and_the_operators_value_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIPERF_SERVICE_REGISTRATION_TIMEOUT", raising=False)
    assert client_env({})["AIPERF_SERVICE_REGISTRATION_TIMEOUT"] == f"{START_S:g}"
    monkeypatch.setenv("AIPERF_SERVICE_REGISTRATION_TIMEOUT", "600")
    assert client_env({})["AIPERF_SERVICE_REGISTRATION_TIMEOUT"] == "600"


@pytest.mark.skipif(not Path(aiperf_path()).is_file(), reason=f"aiperf not installed at {aiperf_path()} (scripts/install.sh)")
def test_aiperf_reads_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIPERF_SERVICE_REGISTRATION_TIMEOUT", raising=False)
    python = os.path.join(os.path.dirname(aiperf_path()), "python")
    read = "from aiperf.common.environment import Environment; print(Environment.SERVICE.REGISTRATION_TIMEOUT)"
    out = subprocess.run([python, "-c", read], env=client_env({}), capture_output=True, text=True, timeout=120, check=True)
    assert float(out.stdout.strip()) == START_S
