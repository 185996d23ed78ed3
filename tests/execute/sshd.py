"""Real OpenSSH servers on 127.0.0.1 high ports for the execution-layer tests.

Each sshd has its own ed25519 host key, accepts only the session's client key, allows TCP
forwarding (to serve as a jump host) and sets ``FLEET_TEST_HOST`` so a command can tell which
server it reached.  Every process is started here and killed here, by PID.
"""

from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.execute.ssh import SshOptions
from launcher.model import Host

SSHD = "/usr/sbin/sshd"
FLEET_SIZE = 4


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)],
                   check=True)
    return Path(f"{path}.pub").read_text().strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Sshd:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    host_key: str  # "ssh-ed25519 AAAA…"
    log: Path
    client_key: Path

    def host(self, name: str | None = None, **kw: object) -> Host:
        return Host(name=name or self.name, address="127.0.0.1", port=self.port, user="root",
                    key_file=str(self.client_key), **kw)  # type: ignore[arg-type]

    @property
    def known_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_key}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _hide_root_bashrc(d: Path) -> list[str]:
    """A prefix that runs sshd in its own mount namespace with an empty file over root's
    ``~/.bashrc``: bash sources it for every SSH command, and this machine's (pyenv init, which
    rehashes shims) writes to stderr when two hosts run it at once.  The exec chain keeps sshd's
    PID.  Nothing when there is no ``~/.bashrc`` (no mount point without creating one)."""
    bashrc = Path(pwd.getpwuid(0).pw_dir) / ".bashrc"
    if os.geteuid() != 0 or not bashrc.is_file():
        return []
    empty = d / "empty-bashrc"
    empty.write_text("")
    script = 'mount --make-rprivate / && mount --bind "$1" "$2" && shift 2 && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", script, "sh", str(empty), str(bashrc)]


class SshdFactory:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.client_key = root / "client_ed25519"
        self.client_pub = _keygen(self.client_key)
        self.started: list[Sshd] = []

    def start(self, name: str, extra_config: str = "", log_level: str = "VERBOSE",
              ca: Path | None = None, cert_args: tuple[str, ...] = ("-n", "127.0.0.1"),
              authorized_keys: Path | None = None) -> Sshd:  # fmt: skip
        """``log_level`` DEBUG1 also sends debug lines to the clients' stderr.  With ``ca`` (a
        private key), the host key is signed by it (``ssh-keygen -s ca -h`` + ``cert_args``)
        and served as a host certificate.  ``authorized_keys``: read instead of the session's
        client key."""
        d = self.root / name
        d.mkdir()
        host_pub = _keygen(d / "host_ed25519")
        if ca is not None:
            subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-I", f"{name}-id", "-h", *cert_args,
                            str(d / "host_ed25519.pub")], check=True, capture_output=True)  # fmt: skip
            extra_config += f"HostCertificate {d}/host_ed25519-cert.pub\n"
        port = free_port()
        config = d / "sshd_config"
        config.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_ed25519\n"
            f"AuthorizedKeysFile {authorized_keys or f'{self.client_key}.pub'}\nPubkeyAuthentication yes\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nPidFile none\nPermitRootLogin prohibit-password\n"
            "AllowTcpForwarding yes\nMaxStartups 200:30:400\nMaxSessions 50\n"
            f"LogLevel {log_level}\nSetEnv FLEET_TEST_HOST={name}\n{extra_config}"
        )
        log = d / "sshd.log"
        with log.open("wb") as err:
            proc = subprocess.Popen([*_hide_root_bashrc(d), SSHD, "-D", "-e", "-f", str(config)],
                                    stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        sshd = Sshd(name=name, port=port, proc=proc, host_key=host_pub, log=log,
                    client_key=self.client_key)
        self.started.append(sshd)
        deadline = time.monotonic() + 120  # a bound on failure only: sshd starts in ms when the machine is quiet
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd {name} exited: {log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return sshd
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd {name} not listening on {port}: {log.read_text()}")
                time.sleep(0.02)

    def stop_all(self) -> None:
        for sshd in self.started:
            if sshd.proc.poll() is None:
                os.kill(sshd.proc.pid, signal.SIGCONT)
                sshd.proc.kill()
            sshd.proc.wait()


# Healthy hosts get the loaded machine's bounds: the TCP connect to a loopback sshd is answered by
# the kernel at once, but the banner, key exchange, authentication and (through a jump host) the
# direct-tcpip open wait for CPU, and CI runs five pytest processes on two cores (load ~99: 8 of
# 14 sandbox hosts missed a 3 s banner bound there).  A test that wants a bound to fire on a host
# it hung sets that bound short on its own (HUNG_BANNER_S, test_fanout.py; test_ssh.py's liveness
# and session-open tests).  ssh config and agent off so the machine's own settings cannot change
# what is tested.
TEST_OPTIONS = SshOptions(connect_timeout=30.0, banner_timeout=60.0, auth_timeout=60.0,
                          ssh_config=None, use_agent=False, look_for_keys=False)
