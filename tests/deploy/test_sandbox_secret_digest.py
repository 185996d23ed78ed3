"""Secret values and what any local user can read (issue 16 item 3), on a sandbox host through
the real ``fleet`` CLI: after ``up`` with a secret, ``nobody`` on the host reads every file of the
deployment it can and tries to check a correct guess of the secret offline -- as a plain
SHA-256 of the secrets file, or as an HMAC under any hex string it found as the key (the salted
digest fleet once kept in the 0644 manifest).  Nothing it reads confirms the guess.  Secret
changes are still seen: ``up`` again with the same value changes nothing, with another value
restarts the unit."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from launcher.quoting import env_file
from launcher.sandbox.client import Sandbox
from tests.sandbox_playbooks import standin_playbook

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
NOBODY = "setpriv --reuid=65534 --regid=65534 --clear-groups"
UNIT = "fleet-sb-secret-single0-r0"
PLAYBOOK = standin_playbook("sb-secret", "qwen/sglang-tp2-h100-tuned", {"single": "h1"}, start_timeout_s=90,
                            ports={"http": 31500}, rest="secrets:\n  - name: HF_TOKEN\n    from_env: FLEET_TEST_SECRET\n")


def up(sb: Sandbox, playbook: Path, value: str) -> dict[str, Any]:
    argv = ["fleet", "up", str(playbook), "--json", "-i", sb.inventory, "--known-hosts", sb.known_hosts]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "FLEET_TEST_SECRET": value})
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def guess_checks(readable: str, guess: bytes) -> bool:
    """What a local user can do offline with what they read: does it confirm ``guess``?"""
    found = set(re.findall(r"[0-9a-f]{16,}", readable))
    if hashlib.sha256(guess).hexdigest() in found:
        return True
    keys = [bytes.fromhex(k) for k in found if len(k) % 2 == 0]
    return any(hmac.new(k, guess, hashlib.sha256).hexdigest() in found for k in keys)


@pytest.fixture
def playbook(sandbox_fleet: Sandbox, tmp_path: Path) -> Iterator[Path]:
    pb = tmp_path / "sb-secret.yaml"
    pb.write_text(PLAYBOOK)
    yield pb
    subprocess.run(["fleet", "down", str(pb), "-q", "--break-lock", "-i", sandbox_fleet.inventory,
                    "--known-hosts", sandbox_fleet.known_hosts], capture_output=True, timeout=300, cwd=REPO)


def test_no_world_readable_file_confirms_a_guess_and_secret_changes_are_still_seen(
    sandbox_fleet: Sandbox, playbook: Path
) -> None:
    sb = sandbox_fleet
    value = "hf_guessable-0"
    first = up(sb, playbook, value)
    assert [(u["unit"], u["outcome"]) for u in first["units"]] == [(UNIT, "healthy")]

    res = sb.ssh("h1", f"cd / && {NOBODY} find /etc/fleet/sb-secret -type f -readable -exec cat {{}} +")
    assert res.rc == 0, res.err
    assert f'"unit":"{UNIT}"' in res.out, "nobody reads the manifest (it stays 0644)"
    assert value not in res.out
    assert not guess_checks(res.out, env_file({"HF_TOKEN": value}).encode())
    assert sb.ssh("h1", f"stat -c %a /etc/fleet/sb-secret/{UNIT}/secrets.env").out.strip() == "600"

    again = up(sb, playbook, value)
    assert [(u["unit"], u["action"], u["outcome"]) for u in again["units"]] == [(UNIT, "unchanged", "unchanged")]
    changed = up(sb, playbook, "hf_guessable-1")
    assert [(u["unit"], u["action"], u["outcome"], u["reason"]) for u in changed["units"]] == [
        (UNIT, "restart", "healthy", f"changed: secrets of h1/{UNIT}")
    ]
