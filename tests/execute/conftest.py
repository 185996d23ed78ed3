"""Fixtures: a session fleet of real sshds (see ``sshd.py``), known_hosts, a connector."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector

from .sshd import FLEET_SIZE, SSHD, TEST_OPTIONS, Sshd, SshdFactory


@pytest.fixture(scope="session")
def sshd_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdFactory]:
    if shutil.which("ssh-keygen") is None or not os.path.exists(SSHD):
        pytest.fail("openssh-server and ssh-keygen are required (apt-get install openssh-server)")
    os.makedirs("/run/sshd", exist_ok=True)
    factory = SshdFactory(tmp_path_factory.mktemp("sshd"))
    yield factory
    factory.stop_all()


@pytest.fixture(scope="session")
def fleet(sshd_factory: SshdFactory) -> tuple[Sshd, ...]:
    """Long-lived servers h1..h4: tests must not stop or kill them."""
    return tuple(sshd_factory.start(f"h{i}") for i in range(1, FLEET_SIZE + 1))


@pytest.fixture
def known_hosts_file(tmp_path: Path, fleet: tuple[Sshd, ...]) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text("".join(f"{s.known_line}\n" for s in fleet))
    return path


@pytest.fixture
def connector(tmp_path: Path, known_hosts_file: Path) -> Iterator[SshConnector]:
    known = KnownHosts((known_hosts_file,), record_to=tmp_path / "fleet_known_hosts")
    with SshConnector(known, TEST_OPTIONS) as c:
        yield c
