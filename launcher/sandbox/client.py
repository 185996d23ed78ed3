"""A handle on a running sandbox for tests and tools: addresses, keys, and SSH with strict host
keys (paramiko, the generated known_hosts, RejectPolicy), one cached connection per host."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

from launcher.execute.sshlib import paramiko
from launcher.sandbox.state import HostState, SandboxState

CLOSE_TIMEOUT_S = 10.0  # per connection; then its socket is shut under it
# The banner and login of a test's command connection: a sandbox sshd waits for CPU beside CI's
# other tiers (load ~99 on two cores); a bound on a hang, the TCP connect keeps its own.
SSH_HANDSHAKE_S = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    rc: int
    out: str
    err: str


class Sandbox:
    def __init__(self, state: SandboxState) -> None:
        self.state = state
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._lock = threading.Lock()

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.state.hosts)

    @property
    def addresses(self) -> dict[str, str]:
        return {h.name: h.address for h in self.state.hosts}

    @property
    def client_key(self) -> str:
        return self.state.client_key

    @property
    def known_hosts(self) -> str:
        return self.state.known_hosts

    @property
    def inventory(self) -> str:
        return self.state.inventory

    def host(self, name: str) -> HostState:
        return self.state.host(name)

    def docker_socket(self, name: str) -> str:
        return self.state.host(name).docker_socket

    def connect(self, name: str, timeout: float = 10.0, handshake_s: float | None = None) -> paramiko.SSHClient:
        """A new strict-host-key connection (not cached): ``timeout`` bounds the TCP connect, and
        the banner, key exchange and authentication too unless ``handshake_s`` is given."""
        h = self.state.host(name)
        client = paramiko.SSHClient()
        client.load_host_keys(self.known_hosts)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        handshake = timeout if handshake_s is None else handshake_s
        client.connect(
            h.address, port=h.port, username="root", key_filename=self.client_key,
            look_for_keys=False, allow_agent=False, timeout=timeout, banner_timeout=handshake,
            auth_timeout=handshake,
        )  # fmt: skip
        return client

    def ssh(self, name: str, cmd: str, timeout: float = 60.0) -> Result:
        """Runs ``cmd`` on host ``name`` over a cached connection (a new one gets
        ``SSH_HANDSHAKE_S`` for its banner and login); waits for its exit."""
        with self._lock:
            client = self._clients.get(name)
            transport = client.get_transport() if client else None
            fresh = client is None or transport is None or not transport.is_active()
            if fresh:
                client = self._clients[name] = self.connect(name, handshake_s=SSH_HANDSHAKE_S)
        assert client is not None
        try:
            _, stdout, stderr = client.exec_command(cmd, timeout=timeout)
        except paramiko.SSHException:
            if fresh:
                raise
            # A cached connection idle for minutes can look active yet no longer open channels
            # (a CI run: 'Timeout opening channel' after a 12-min rollout): one new connection.
            with self._lock:
                client = self._clients[name] = self.connect(name, handshake_s=SSH_HANDSHAKE_S)
            _, stdout, stderr = client.exec_command(cmd, timeout=timeout)
        out = stdout.read().decode(errors="replace")
        err = stderr.read().decode(errors="replace")
        return Result(rc=stdout.channel.recv_exit_status(), out=out, err=err)

    def close(self) -> None:
        """Closes the cached connections without ever hanging a test's teardown: a paramiko
        close has been seen to block for good, so each gets ``CLOSE_TIMEOUT_S`` in a daemon
        thread, and a close still blocked then has its socket shut down under it."""
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            closer = threading.Thread(target=client.close, name="sandbox-ssh-close", daemon=True)
            closer.start()
            closer.join(CLOSE_TIMEOUT_S)
            transport = client.get_transport()
            if closer.is_alive() and transport is not None:
                with contextlib.suppress(OSError):
                    transport.sock.close()
