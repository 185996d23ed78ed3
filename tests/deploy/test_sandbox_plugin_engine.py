"""The test-only engine (tests/engines/tiny_engine.py, registered in this process) deployed on the
sandbox through the library: ``up`` starts it healthy on h2 from its own recipe and playbook, a
chat completion is served on the engine's own default port, ``down`` removes it.  Nothing in
``launcher/`` names the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from launcher.deploy import orchestrate
from launcher.engines import registry
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector
from launcher.pipeline import load_target
from launcher.sandbox.client import Sandbox
from tests.deploy.test_sandbox_e2e import post
from tests.engines import tiny_engine

pytestmark = pytest.mark.sandbox

HERE = Path(__file__).resolve().parents[1] / "engines"


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FLEET_RECIPES_DIR", str(HERE / "recipes"))
    registry.register(tiny_engine.ENGINE)
    try:
        yield
    finally:
        registry.unregister(tiny_engine.NAME)


def test_the_plugin_engine_deploys(sandbox_fleet: Sandbox, tiny: None) -> None:
    target = load_target(HERE / "single-sandbox.yaml", sandbox_fleet.inventory, None, [])
    (unit,) = target.units
    assert unit.unit.argv[:3] == tiny_engine.ENGINE.entry
    known = KnownHosts.for_operator((sandbox_fleet.known_hosts,), trust_new=False)
    with SshConnector(known) as conn:
        report = orchestrate.up(target, conn.connect, orchestrate.Options())
        try:
            assert report.errors == ()
            assert [(u.unit, u.outcome) for u in report.units] == [("fleet-sb-tiny-single0-r0", "healthy")]
            ip = sandbox_fleet.host("h2").data_ip
            answer = post(f"http://{ip}:{tiny_engine.PORT}/v1/chat/completions",
                          {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
            assert answer["choices"][0]["message"]["content"]
        finally:
            down = orchestrate.down(target, conn.connect, orchestrate.Options())
    assert down.errors == ()
    assert [u.outcome for u in down.units] == ["removed"]
