"""Programs inside the images, on the sandbox (issue 16 item 18): a vLLM instance with a router
in its playbook runs ``vllm-router`` from the engine image; the stand-in image has ``vllm``
(the stand-in) but no ``vllm-router``.  ``fleet preflight`` looks into the image on the host
(real dockerd) and fails naming host, image and program, instead of ``up`` starting a router
that crash-loops; the engine's own program passes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from launcher.sandbox.client import Sandbox
from tests.sandbox_playbooks import standin_playbook

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = standin_playbook("sb-noprog", "mistral/vllm-tp1-h100-baseline", {"single": "h1", "router": "h1"},
                            ports={"http": 8600, "router": 8700, "router_metrics": 29700})


def test_a_router_image_without_the_router_program_fails_preflight(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    pb = tmp_path / "sb-noprog.yaml"
    pb.write_text(PLAYBOOK)
    argv = ["fleet", "preflight", str(pb), "-i", sandbox_fleet.inventory, "--known-hosts", sandbox_fleet.known_hosts]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert ("fleet: preflight: fail: h1/fleet-sb-noprog-router-r0: programs: image fleet-standin:latest on h1 has no vllm-router (the "
            "router runs it) (fix: use an image that provides it: images.router in the recipe, or "
            "overrides.images.router in the playbook)") in res.stderr.splitlines(), out
    assert "pass: h1/fleet-sb-noprog-single0-r0: programs: image fleet-standin:latest has vllm" not in out, \
        "one image, one verdict: it lacks a program"
