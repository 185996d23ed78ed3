"""The real-engine image's one change to a wheel (launcher/sandbox/realimage.py): NIXL's agent
gets a progress-thread delay instead of its hard-coded 0 (a spinning thread per PD engine on a
CPU-only machine); a NIXL whose agent does not set it exactly once fails the build, naming the
file.  The pinned wheel's own line is checked where the image was built."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import FleetError
from launcher.sandbox import realimage

AGENT = '''        agent_config.useListenThread = nixl_conf.enable_listen
        agent_config.pthrDelay = 0
        agent_config.lthrDelay = 100000
'''


def site_with(tmp_path: Path, text: str) -> Path:
    api = tmp_path / realimage._NIXL_API
    api.parent.mkdir(parents=True)
    api.write_text(text)
    return tmp_path


def test_the_delay_replaces_the_spin(tmp_path: Path) -> None:
    site = site_with(tmp_path, AGENT)
    realimage._nixl_progress_delay(site)
    assert (site / realimage._NIXL_API).read_text() == AGENT.replace(
        "pthrDelay = 0", f"pthrDelay = {realimage.NIXL_PROGRESS_DELAY_US}")


@pytest.mark.parametrize("text", ["", AGENT + AGENT, AGENT.replace("= 0", "= 5")])
def test_an_agent_without_the_line_once_fails_the_build(tmp_path: Path, text: str) -> None:
    with pytest.raises(FleetError) as info:
        realimage._nixl_progress_delay(site_with(tmp_path, text))
    assert str(info.value) == ("real-engine image: nixl_cu12/_api.py does not set `agent_config.pthrDelay = 0` once: "
                               "look again at its progress thread before pinning this NIXL")  # fmt: skip
