"""One OpenSSH sshd per sandbox host: keys, config, start inside the host's namespaces, readiness.

Each sshd is the child of ``[ip netns exec NS] unshare --mount --uts python3 hostinit.py`` (which
stays as its parent and reaps what sessions leave behind; both PIDs are recorded), the host gets a
private mount namespace (its own /srv, /run, cgroup mounts, fake tools and
/sys/class/infiniband) and its own hostname, and every SSH session and docker container of the
host inherits both.
"""

from __future__ import annotations

import socket
import sys
import subprocess
from importlib import resources
from pathlib import Path

from launcher.errors import FleetError
from launcher.sandbox import procs
from launcher.sandbox.state import HostState

READY_TIMEOUT_S = 30.0


def keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    subprocess.run(
        ("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)),
        check=True,
        capture_output=True,
    )


def write_config(host: HostState, authorized_keys: Path) -> None:
    d = Path(host.dir)
    listen = "0.0.0.0" if host.netns else host.address
    (d / "sshd_config").write_text(
        "\n".join(
            (
                f"Port {host.port}",
                f"ListenAddress {listen}",
                f"HostKey {d}/ssh_host_ed25519_key",
                "PidFile none",
                # The sandbox's client key, then the host's own ~/.ssh/authorized_keys (private
                # per host, see hostinit.py), where `fleet weights` authorizes its per-run keys.
                f"AuthorizedKeysFile {authorized_keys} .ssh/authorized_keys",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "UsePAM no",
                "StrictModes no",  # the key files live in a root-owned 0755 state dir
                "UseDNS no",
                "MaxStartups 200:30:400",
                "MaxSessions 64",
                "Subsystem sftp internal-sftp",
                f"SetEnv FLEET_SANDBOX_HOST={host.name}",
                "",
            )
        )
    )


def hostinit_script(dest: Path) -> Path:
    """Copies hostinit.py into the sandbox dir (the hosts run it by path, isolated mode)."""
    dest.write_text(resources.files("launcher.sandbox").joinpath("hostinit.py").read_text())
    return dest


def start(host: HostState, script: Path) -> tuple[procs.ProcRef, procs.ProcRef]:
    """Starts the host's sshd below hostinit.py (a child subreaper: a session that outlives a
    killed sshd stays below it); returns (hostinit, sshd)."""
    d = Path(host.dir)
    for sub in ("srv", "run/sshd", "fakehw/bin", "etc-fleet", "var-lib-fleet", "root-ssh"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    argv: tuple[str, ...] = (
        "unshare", "--mount", "--uts", sys.executable, "-I", str(script), host.name, host.dir,
    )  # fmt: skip
    if host.netns:
        argv = ("ip", "netns", "exec", host.netns, *argv)
    with open(d / "sshd.log", "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    init = procs.ref(proc.pid)
    daemon = procs.child_of(init, READY_TIMEOUT_S)
    if daemon is None:
        procs.kill_all((init,), 2.0)
        raise FleetError(f"{host.name}: sshd did not start: {_log_tail(host)}")
    return init, daemon


def wait_ready(host: HostState, deadline: float) -> None:
    """Waits until the host's sshd sends its banner; fails fast if the process died."""
    daemon = host.sshd
    assert daemon is not None
    procs.poll_until(
        lambda: banner(host.address, host.port), deadline,
        died=lambda: None if daemon.alive() else f"{host.name}: sshd exited: {_log_tail(host)}",
        late=lambda: f"{host.name}: sshd not answering on {host.address}:{host.port}", step_s=0.03,
    )  # fmt: skip


def banner(address: str, port: int) -> bool:
    """Whether an SSH server answers with its banner at ``address:port`` (OSError if none)."""
    with socket.create_connection((address, port), timeout=1.0) as s:
        return s.recv(8).startswith(b"SSH-")


def known_hosts_line(host: HostState) -> str:
    key = (Path(host.dir) / "ssh_host_ed25519_key.pub").read_text().split()
    where = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
    return f"{where} {key[0]} {key[1]}"


def _log_tail(host: HostState) -> str:
    try:
        lines = (Path(host.dir) / "sshd.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"
