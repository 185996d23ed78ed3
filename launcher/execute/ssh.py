"""SSH transport over paramiko: one reused connection per host, strict host keys, ProxyJump.

:class:`SshConnector` owns the connections (keyed by user, address, port and jump route) and
hands out :class:`SshTransport` objects; every phase of a command reuses the same connection.
Jump hosts are connected once and shared by every host behind them (one ``direct-tcpip``
channel per target on the jump host's transport).

Where the settings come from, strongest first: the inventory (``ansible_host``/``_port``/
``_user``/``_ssh_private_key_file``/``_ssh_common_args`` with ``-J`` or ``-o ProxyJump=``, and
``-o`` UserKnownHostsFile / GlobalKnownHostsFile / StrictHostKeyChecking), then ``~/.ssh/config``
(HostName, User, Port, IdentityFile, ProxyJump and the same three), then defaults (the local
user, port 22, ssh-agent and ``~/.ssh/id_*``, OpenSSH's known_hosts files, strict checking).
Host keys are checked by :mod:`launcher.execute.hostkeys`; a setting weaker than strict that the
operator wrote is said (logged) once per run and source.
"""

from __future__ import annotations

import fcntl
import getpass
import logging
import os
import re
import select
import shlex
import socket
import sys
import termios
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from launcher.addresses import address_problem, jump_hop, jump_problem, ssh_options, user_problem
from launcher.errors import HostKeyError, InputError, RemoteError, UnreachableError, UsageError, brief
from launcher.execute.command import Command, Token
from launcher.execute.hostcert import CERT_SUFFIX
from launcher.execute.hostkeys import KnownHosts, StrictPolicy, Trust, host_key_name
from launcher.execute.sshlib import allow_match_exec, paramiko
from launcher.execute.transport import CommandTimeout, Result, get_command, put_command
from launcher.model import Host, Source

# paramiko logs every failed handshake at ERROR, traceback included; fleet reports those as
# one-line UnreachableErrors, so its records must not reach the operator's terminal.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

log = logging.getLogger("fleet.execute")
# `fleet -v`: each connection (or failed attempt) and command with its duration (INFO); `fleet
# --debug`: also the whole text of each command that the one line shows by its header (DEBUG).
trace = logging.getLogger("fleet.ssh")

_PORT_VARS = ("ansible_port", "ansible_ssh_port")
_READ_CHUNK = 65536
_SEND_CHUNK = 32768
_THREADS_END_S = 2.0  # close(): how long it waits for closed connections' threads to end
_STDIN_POLL_S = 0.05  # paramiko's pipe does not signal send-window space, so poll while sending


@dataclass(frozen=True, slots=True, kw_only=True)
class SshOptions:
    connect_timeout: float = 10.0  # TCP connect, or opening the channel through a jump host
    banner_timeout: float = 10.0  # banner + key exchange: a hung sshd accepts TCP, then is silent
    auth_timeout: float = 15.0
    # Liveness while connected (see _Liveness): a keepalive request every keepalive_s; a host
    # that answers none within dead_after_s is cut off and named unreachable, mid-command too.
    keepalive_s: float = 10.0
    dead_after_s: float = 15.0
    file_timeout: float = 300.0  # put / get
    ssh_config: str | None = "~/.ssh/config"  # None: ignore ssh config
    use_agent: bool = True
    look_for_keys: bool = True  # ~/.ssh/id_* when nothing else authenticates
    max_handshakes: int = 8  # concurrent key exchanges: CPU-bound on both ends
    max_output: int = 1 << 30  # bytes read from one command's stdout or stderr (a hostile host's flood stops here)


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """Where and how to connect: the fully resolved route to one sshd."""

    label: str  # inventory name or jump spec, for messages
    address: str
    port: int
    user: str
    trust: Trust  # how its host key is checked
    key_files: tuple[str, ...] = ()
    via: Endpoint | None = None  # the last jump host before this one

    @property
    def route(self) -> tuple[object, ...]:
        """Cache key: two hosts with the same route (and host-key trust) share one connection."""
        return (self.user, self.address, self.port, self.trust, self.via.route if self.via else None)

    @property
    def known_name(self) -> str:
        return host_key_name(self.address, self.port)


_MATCH_EXEC = re.compile(r"^\s*match\b.*\bexec\b", re.IGNORECASE | re.MULTILINE)


def load_ssh_config(path: str | None) -> paramiko.SSHConfig | None:
    if path is None:
        return None
    full = Path(os.path.expanduser(path))
    if not full.is_file():
        return None
    config = paramiko.SSHConfig.from_path(str(full))
    text = full.read_text(errors="replace")
    _check_jumps(str(full), text)
    if _MATCH_EXEC.search(text):
        allow_match_exec()
    return config


_JUMP_LINE = re.compile(r"^(\s*proxyjump(?:\s*=\s*|\s+))(.*?)\s*$", re.IGNORECASE)
# The tokens paramiko expands in ProxyJump, as stand-ins that pass the checks: what they expand
# to (the inventory host's address and user) is checked where the host is loaded.
_JUMP_TOKENS = {"%h": "h", "%n": "h", "%p": "22", "%r": "u"}


def _check_jumps(path: str, text: str) -> None:
    """Every ``ProxyJump`` line of an ssh config, refused at its line when it names a hop fleet
    would not connect to (an address or user that is not a hostname, IP literal or user name):
    before any host is contacted, whichever hosts the line applies to."""
    for number, line in enumerate(text.splitlines(), 1):
        m = _JUMP_LINE.match(line)
        if m is None:
            continue
        value = m[2]
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        plain = re.sub(r"%[hnpr]", lambda t: _JUMP_TOKENS[t[0]], value)
        why = jump_problem(plain)
        if why is not None:
            raise InputError(Source(path=path, line=number, col=len(m[1]) + 1), f"ProxyJump should be {why}, got {value!r}")


def ssh_args(host: Host) -> dict[str, str]:
    """The options in ``ansible_ssh_common_args`` that fleet honours, keys lower-cased:
    ``-o Key=value`` / ``-o "Key value"`` / ``-oKey=value``, and ``-J spec`` as ``proxyjump``.
    As in OpenSSH, the first value given for a key wins."""
    if not host.ssh_common_args:
        return {}
    where = f"{host.name}/ansible_ssh_common_args"
    try:
        out = ssh_options(host.ssh_common_args)
    except ValueError as err:
        raise InputError(host.source, f"cannot split {host.ssh_common_args!r}: {err}", where) from None
    if "proxycommand" in out:
        raise InputError(host.source, "ProxyCommand is not supported; use ProxyJump", where)
    return out


def _trust(known: KnownHosts, args: Mapping[str, str], cfg: paramiko.SSHConfigDict, said: str) -> Trust:
    """The host-key trust OpenSSH would apply: ``args`` (the command line) over ``cfg``."""

    def files(key: str) -> list[str] | None:
        value = args.get(key) or cfg.get(key)
        return shlex.split(value) if value else None

    strict_in_args = "stricthostkeychecking" in args
    strict = args.get("stricthostkeychecking") or cfg.get("stricthostkeychecking")
    return known.trust(files("userknownhostsfile"), files("globalknownhostsfile"), strict,
                       said if strict_in_args else "ssh config")  # fmt: skip


def _config_for(config: paramiko.SSHConfig | None, name: str) -> paramiko.SSHConfigDict:
    return config.lookup(name) if config is not None else paramiko.SSHConfigDict()


def _identity_files(cfg: paramiko.SSHConfigDict) -> tuple[str, ...]:
    # ssh config may name default identities that do not exist; OpenSSH skips them too.
    files = (os.path.expanduser(f) for f in cfg.get("identityfile", ()))
    return tuple(f for f in files if os.path.isfile(f))


def _hop(
    spec: str, config: paramiko.SSHConfig | None, via: Endpoint | None, fallback_keys: tuple[str, ...],
    known: KnownHosts,
) -> Endpoint:
    """One ``[user@]host[:port]`` element of a ProxyJump list (``ssh://`` form accepted).  Its
    keys: IdentityFile from ssh config, else the target's key (bastions usually take the same
    key), then agent and default keys as for any host."""
    user, address, port_text = jump_hop(spec)
    cfg = _config_for(config, address)
    return Endpoint(
        label=spec,
        address=cfg.get("hostname", address),
        port=int(port_text or cfg.get("port", "22")),
        user=user or cfg.get("user") or getpass.getuser(),
        key_files=_identity_files(cfg) or fallback_keys,
        via=via,
        trust=_trust(known, {}, cfg, spec),
    )


def resolve(host: Host, config: paramiko.SSHConfig | None, known: KnownHosts) -> Endpoint:
    """The connection route of an inventory host (inventory values beat ssh config).  Raises
    ``InputError`` for bad ssh settings, and for an address or user that could inject into
    ssh_config's ``Match exec`` (paramiko expands ``%h``/``%r`` there unquoted; the inventory
    loader refuses these too, this guards every other way a ``Host`` is made)."""
    for value, problem, what in ((host.address, address_problem, "address"), (host.user, user_problem, "user")):
        why = problem(value) if value is not None else None
        if why is not None:
            raise InputError(host.source, f"{what} should be {why}, got {value!r}", host.name)
    cfg = _config_for(config, host.address)
    args = ssh_args(host)
    if "proxycommand" in cfg:
        raise InputError(
            host.source, "ProxyCommand (from ssh config) is not supported; use ProxyJump",
            host.name,
        )
    explicit_port = host.port != 22 or any(v in host.vars for v in _PORT_VARS)
    if host.key_file:
        key_file = os.path.expanduser(host.key_file)
        if not os.path.isfile(key_file):
            raise InputError(
                host.source, f"no such file: {host.key_file}",
                f"{host.name}/ansible_ssh_private_key_file",
            )
        key_files: tuple[str, ...] = (key_file,)
    else:
        key_files = _identity_files(cfg)
    jump = args.get("proxyjump") or cfg.get("proxyjump")
    via = None
    if jump and jump.lower() != "none":
        try:
            for spec in jump.split(","):
                via = _hop(spec.strip(), config, via, key_files, known)
        except ValueError as err:
            raise InputError(host.source, f"bad ProxyJump host {err}", host.name) from None
    try:
        trust = _trust(known, args, cfg, "the inventory's ansible_ssh_common_args")
    except ValueError as err:
        raise InputError(host.source, str(err), host.name) from None
    return Endpoint(
        label=host.name,
        address=cfg.get("hostname", host.address),
        port=host.port if explicit_port else int(cfg.get("port", str(host.port))),
        user=host.user or cfg.get("user") or getpass.getuser(),
        key_files=key_files,
        via=via,
        trust=trust,
    )


class _Transport(paramiko.Transport):
    """paramiko's Transport asking for host key algorithms in OpenSSH's order for one host:
    certificates first where a ``@cert-authority`` covers it, then the types of its known keys
    (paramiko otherwise asks for plain keys first and never sees a certificate)."""

    def __init__(self, sock: socket.socket | paramiko.Channel, *, known_types: frozenset[str], want_cert: bool,
                 disabled_algorithms: Mapping[str, Sequence[str]] | None = None) -> None:  # fmt: skip
        super().__init__(sock, disabled_algorithms=disabled_algorithms)
        self._known_types = known_types
        self._want_cert = want_cert

    def _rank(self, alg: str) -> int:
        base = alg.removesuffix(CERT_SUFFIX)
        if base != alg:
            return 0 if self._want_cert else 2
        return 1 if ("ssh-rsa" if base.startswith("rsa-sha2-") else base) in self._known_types else 2

    @property
    def preferred_keys(self) -> tuple[str, ...]:
        return tuple(sorted(super().preferred_keys, key=self._rank))


class SshConnector:
    """Opens and caches SSH connections; thread-safe.  ``close()`` ends every connection
    (also those in use: their commands fail as unreachable) and refuses new ones.  A failed
    connect is not remembered: the next one tries again (``fleet watch`` relies on it; one
    command's memory of its unreachable hosts is :mod:`launcher.execute.once`)."""

    def __init__(self, known_hosts: KnownHosts, options: SshOptions = SshOptions()) -> None:
        self.options = options
        self._known = known_hosts
        self._config = load_ssh_config(options.ssh_config)
        self._lock = threading.Lock()
        self._route_locks: dict[tuple[object, ...], threading.Lock] = {}
        self._clients: dict[tuple[object, ...], paramiko.SSHClient] = {}
        self._alive: dict[tuple[object, ...], _Liveness] = {}
        self._handshakes = threading.BoundedSemaphore(options.max_handshakes)
        self._closed = False
        self._said: set[str] = set()

    def __enter__(self) -> SshConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_routes(self, hosts: Sequence[Host]) -> None:
        """Every host's connection settings, resolved before any host is contacted: a problem
        (a missing key file, a bad ProxyJump) is one :class:`InputError` for all the hosts it
        concerns -- the first one's, naming how many more share it -- not a failure per host
        and the warnings that cascade from each."""
        problems: dict[str, list[InputError]] = {}
        for host in hosts:
            try:
                resolve(host, self._config, self._known)
            except InputError as err:
                problems.setdefault(err.message, []).append(err)
        for errors in problems.values():
            first = errors[0]
            if len(errors) == 1:
                raise first
            others = ", ".join(e.key_path.split("/")[0] for e in errors[1:])
            raise InputError(first.source, f"{first.message} (also for {others})", first.key_path)

    def connect(self, host: Host) -> SshTransport:
        """The host's transport, connecting on first use.  Raises ``UnreachableError``,
        ``HostKeyError`` or ``InputError`` (bad ssh settings in the inventory)."""
        endpoint = resolve(host, self._config, self._known)
        hop: Endpoint | None = endpoint
        while hop is not None:
            weakened = hop.trust.weakened
            with self._lock:
                first = weakened is not None and weakened not in self._said
                self._said.add(weakened or "")
            if first:
                log.warning("%s", weakened)
            hop = hop.via
        client = self._client(endpoint)
        with self._lock:
            liveness = self._alive.get(endpoint.route)
        return SshTransport(host.name, client, self.options, liveness)

    def endpoint(self, host: Host) -> Endpoint:
        """Where :meth:`connect` goes for ``host`` (for tools that open their own SSH, as
        ``fleet weights`` does with rsync)."""
        return resolve(host, self._config, self._known)

    def reopened(self) -> SshConnector:
        """A new connector with the same host keys and options: clean-up after an interrupt
        that closed this one's connections."""
        return SshConnector(self._known, self.options)

    def known_keys(self, endpoint: Endpoint) -> dict[str, paramiko.PKey]:
        """The host keys this connector accepts for ``endpoint``, by key type: its known_hosts
        keys, else, for a host known through a ``@cert-authority``, the key its certificate
        proved (connecting for it)."""
        keys = self._known.keys_for(endpoint.known_name, endpoint.trust)
        if keys or not self._known.preference(endpoint.known_name, endpoint.trust)[1]:
            return keys
        transport = self._client(endpoint).get_transport()
        key = transport.get_remote_server_key() if transport is not None else None
        return {key.get_name(): key} if key is not None else {}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients = list(self._clients.values())
            self._clients.clear()
            probes = list(self._alive.values())
            self._alive.clear()
        for probe in probes:
            probe.stop()
        transports = [t for t in (c.get_transport() for c in clients) if t is not None]
        for client in reversed(clients):  # targets before the jump hosts they ride on
            client.close()
        # A closed connection's threads (paramiko's reader, our keepalive ones) end within
        # ~0.1 s; a thread still running when the interpreter finalizes is ended by force in
        # whatever native call it sits in (the suspected cause of one abort seen at the exit of
        # a complete `fleet restart`), so the caller's exit waits for them, boundedly.
        deadline = time.monotonic() + _THREADS_END_S
        for thread in [*transports, *(t for probe in probes for t in probe.threads())]:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _client(self, endpoint: Endpoint) -> paramiko.SSHClient:
        with self._lock:
            if self._closed:
                raise UnreachableError(endpoint.label, "connections were closed (interrupted)")
            route_lock = self._route_locks.setdefault(endpoint.route, threading.Lock())
        # One connect per route at a time: the others wait and then share its connection.
        with route_lock:
            with self._lock:
                client = self._clients.get(endpoint.route)
            transport = client.get_transport() if client is not None else None
            if client is not None and transport is not None and transport.is_active():
                return client
            started = time.monotonic()
            try:
                client = self._handshake(endpoint, self._open_socket(endpoint))
            except UnreachableError as err:
                # -v shows the failed attempts too: what a dead host's waits cost, and how often.
                trace.info("%s: no connection to %s:%s after %.2f s: %s", endpoint.label, endpoint.address,
                           endpoint.port, time.monotonic() - started, err.reason)  # fmt: skip
                raise
            trace.info("%s: connected to %s:%s in %.2f s", endpoint.label, endpoint.address, endpoint.port,
                       time.monotonic() - started)  # fmt: skip
            transport = client.get_transport()
            probe = _Liveness(transport, self.options) if transport is not None else None
            with self._lock:
                if self._closed:
                    client.close()
                    raise UnreachableError(endpoint.label, "connections were closed (interrupted)")
                self._clients[endpoint.route] = client
                old = self._alive.pop(endpoint.route, None)
                if probe is not None:
                    self._alive[endpoint.route] = probe
            if old is not None:
                old.stop()
            return client

    def _open_socket(self, endpoint: Endpoint) -> socket.socket | paramiko.Channel:
        where = f"{endpoint.address}:{endpoint.port}"
        timeout = self.options.connect_timeout
        if endpoint.via is None:
            try:
                sock = socket.create_connection((endpoint.address, endpoint.port), timeout=timeout)
                # Every command is a few small packets each way (channel open, exec, stdin, EOF,
                # close): with Nagle on, each packet sent while the last is unacknowledged waits
                # for the peer's delayed ACK (40 ms on Linux), once or twice per command.
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except ConnectionRefusedError:
                reason = f"connection refused by {where}"
            except TimeoutError:
                reason = f"no answer from {where} within {timeout:g}s"
            except socket.gaierror as err:
                reason = f"cannot resolve {endpoint.address}: {err.strerror}"
            except OSError as err:
                reason = f"cannot connect to {where}: {err.strerror or err}"
            raise UnreachableError(endpoint.label, reason)
        via = endpoint.via
        try:
            jump = self._client(via).get_transport()
            if jump is None:
                raise UnreachableError(via.label, "connection closed")
            return jump.open_channel("direct-tcpip", (endpoint.address, endpoint.port),
                                     ("127.0.0.1", 0), timeout=timeout)
        except UnreachableError as err:
            reason = f"jump host {via.label}: {err.reason}"
        except paramiko.ChannelException as err:
            reason = f"jump host {via.label} cannot open {where}: {err.text}"
        except (paramiko.SSHException, EOFError, OSError) as err:
            reason = f"jump host {via.label} cannot open {where}: {err or type(err).__name__}"
        raise UnreachableError(endpoint.label, reason)

    def _handshake(
        self, endpoint: Endpoint, sock: socket.socket | paramiko.Channel
    ) -> paramiko.SSHClient:
        opts = self.options
        name = endpoint.known_name
        client = paramiko.SSHClient()
        # No known keys go in: paramiko hands every offered key to StrictPolicy.
        client.set_missing_host_key_policy(StrictPolicy(self._known, endpoint.label, endpoint.address, endpoint.trust))
        known_types, want_cert = self._known.preference(name, endpoint.trust)

        def ordered(sock: Any, /, **kw: Any) -> _Transport:
            # paramiko passes disabled_algorithms (older versions also GSS flags fleet never sets)
            return _Transport(sock, known_types=known_types, want_cert=want_cert,
                              disabled_algorithms=kw.get("disabled_algorithms"))  # fmt: skip

        reason: str
        try:
            with self._handshakes:
                client.connect(
                    endpoint.address,
                    port=endpoint.port,
                    username=endpoint.user,
                    # paramiko takes a list here too (its stubs say str).
                    key_filename=list(endpoint.key_files) or None,  # type: ignore[arg-type]
                    sock=sock,
                    timeout=opts.banner_timeout,
                    banner_timeout=opts.banner_timeout,
                    auth_timeout=opts.auth_timeout,
                    channel_timeout=opts.connect_timeout,
                    allow_agent=opts.use_agent,
                    look_for_keys=opts.look_for_keys,
                    transport_factory=ordered,
                )
        except (HostKeyError, UsageError):
            client.close()
            raise
        except paramiko.AuthenticationException as err:
            reason = f"authentication as {endpoint.user} at {name} failed: {err}"
        except paramiko.SSHException as err:
            # paramiko words a missing banner in several ways ("Error reading SSH protocol
            # banner", "No existing session"); whether a banner arrived is the reliable test.
            started = client.get_transport()
            if started is None or not started.remote_version:
                reason = f"no SSH banner from {name} within {opts.banner_timeout:g}s"
            else:
                reason = f"SSH handshake with {name} failed: {err}"
        except (EOFError, OSError) as err:
            reason = f"{name} closed the connection during the SSH handshake ({err!r})"
        else:
            return client
        client.close()
        sock.close()
        raise UnreachableError(endpoint.label, reason)


# How many more liveness windows a host whose bytes wait unread on this end gets (see _Liveness).
UNREAD_WINDOWS = 3


def unread(sock: object) -> bool:
    """Whether bytes from the other end wait unread in a connection's socket (or, behind a jump
    host, its channel: ``recv_ready``).  False where that cannot be told."""
    ready = getattr(sock, "recv_ready", None)
    if callable(ready):
        return bool(ready())
    try:
        pending = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False
    return int.from_bytes(pending, sys.byteorder) > 0


class _Liveness:
    """Whether the host at the other end of one connection still answers: a keepalive request
    (``keepalive@openssh.com``, which sshd answers at once, if only to refuse it) every
    ``keepalive_s``; no answer within ``dead_after_s`` closes the connection, so a command
    waiting on it fails at once as unreachable (``lost`` says why) instead of at its step
    timeout.  A host whose packets are dropped, whose sshd is stopped, or that froze is named
    within ``keepalive_s + dead_after_s`` however long its command could have run.  The
    requests also keep NAT and firewall state alive on an idle connection.

    The bound measures both ends: a control host starved of CPU reads an answer late too.  So
    when the bound passes while bytes from the host wait unread in this end's socket (the host
    did send; this process has not read), it is waited for again, up to :data:`UNREAD_WINDOWS`
    more times, and a cut-off after that says this end was behind."""

    def __init__(self, transport: paramiko.Transport, options: SshOptions) -> None:
        self.lost: str | None = None
        self._transport = transport
        self._every, self._within = options.keepalive_s, options.dead_after_s
        self._stopped = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="fleet-ssh-liveness", daemon=True)
        self._asking: threading.Thread | None = None
        self._watcher.start()

    def stop(self) -> None:
        self._stopped.set()

    def threads(self) -> tuple[threading.Thread, ...]:
        """The threads to wait for after ``stop`` and the connection's close."""
        return (self._watcher,) if self._asking is None else (self._watcher, self._asking)

    def _watch(self) -> None:
        while not self._stopped.wait(self._every) and self._transport.is_active():
            answered = threading.Event()
            # global_request(wait=True) returns on the answer or when the transport closes,
            # never at a deadline of its own: it waits in a thread of its own.
            self._asking = threading.Thread(target=self._ask, args=(answered,), name="fleet-ssh-keepalive", daemon=True)
            self._asking.start()
            behind = 0
            while not answered.wait(self._within) and not self._stopped.is_set() and self._transport.is_active():
                if behind < UNREAD_WINDOWS and unread(self._transport.sock):
                    behind += 1
                    continue
                self.lost = f"no answer to SSH keepalives within {self._within * (behind + 1):g}s" + (
                    f" ({self._within * behind:g}s of it with bytes from the host unread on this control host: "
                    "this end may be overloaded)" if behind else "")  # fmt: skip
                self._transport.close()
                return

    def _ask(self, answered: threading.Event) -> None:
        try:
            self._transport.global_request("keepalive@openssh.com", wait=True)
        except (paramiko.SSHException, EOFError, OSError):
            return  # the connection is closing: its commands say so
        answered.set()


class SshTransport:
    """One host's commands and files over its shared SSH connection."""

    def __init__(self, host: str, client: paramiko.SSHClient, options: SshOptions,
                 liveness: _Liveness | None = None) -> None:  # fmt: skip
        self._host = host
        self._client = client
        self._options = options
        self._liveness = liveness

    def _lost(self, what: str, err: object = None) -> str:
        """``what`` (the connection was lost) and why: the liveness probe's reason when it cut
        the connection off, else ``err`` when given."""
        why = (self._liveness.lost if self._liveness is not None else None) or err
        return f"{what}: {why}" if why else what

    @property
    def host(self) -> str:
        return self._host

    def run(
        self,
        argv: Sequence[Token] | Command,
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = False,
    ) -> Result:
        command = Command.of(argv).with_env(env or {})
        result = self._exec(command, command.masked(), timeout, stdin or b"")
        return result.check() if check else result

    def put(self, path: str, data: bytes, mode: int) -> None:
        # Errors name the operation: the put script itself is long and multi-line.
        shown = f"put {path}"
        result = self._exec(put_command(path, mode), shown, self._options.file_timeout, data)
        if not result.ok:
            raise RemoteError(self._host, shown, result.exit_status, result.stderr_text)

    def _exec(self, command: Command, shown: str, timeout: float, stdin: bytes) -> Result:
        """Run one command on a new session channel of the shared connection."""
        transport = self._client.get_transport()
        # One line names the step (a script by its header line); --debug shows the whole command.
        step, debug = brief(shown), f"{self._host}: the whole command:\n{shown}"
        if transport is None or not transport.is_active():
            raise UnreachableError(self._host, self._lost(f"connection lost before {step}"), debug=debug)
        started = time.monotonic()
        deadline = started + timeout
        try:
            # Opening the session is part of the command and gets its time: a host that stopped
            # answering is cut off by the liveness probe (the open then fails at once, saying
            # why), while a live host slow to open one (measured: >10 s on a loaded CI machine,
            # mid-rollout) is no reason to abort.
            channel = transport.open_session(timeout=timeout)
        except (paramiko.SSHException, EOFError, OSError) as err:
            raise UnreachableError(self._host, self._lost(f"cannot open a session for {step}", err), debug=debug)
        try:
            channel.exec_command(command.shell_text())
            stdout, stderr = _exchange(channel, stdin, deadline, self._options.max_output)
            if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError
        except _TooMuch as err:
            raise RemoteError(self._host, step, None, f"sent more than {self._options.max_output} bytes on "
                              f"{err}; fleet stopped reading it") from None  # fmt: skip
        except TimeoutError:
            raise CommandTimeout(self._host, shown, timeout) from None
        except (paramiko.SSHException, EOFError, OSError) as err:
            raise UnreachableError(self._host, self._lost(f"connection lost during {step}", err), debug=debug)
        finally:
            channel.close()
        if channel.exit_status == -1 and not transport.is_active():
            raise UnreachableError(self._host, self._lost(f"connection lost during {step}"), debug=debug)
        trace.info("%s: %s: exit %s in %.2f s", self._host, step, channel.exit_status, time.monotonic() - started)
        if step != shown:
            trace.debug("%s", debug)
        return Result(host=self._host, command=shown, exit_status=channel.exit_status,
                      stdout=stdout, stderr=stderr)

    def get(self, path: str) -> bytes:
        return self.run(get_command(path), timeout=self._options.file_timeout, check=True).stdout

    def close(self) -> None:
        self._client.close()


class _TooMuch(Exception):
    """A command's stream passed ``SshOptions.max_output``; the message names the stream."""


def _exchange(channel: paramiko.Channel, stdin: bytes, deadline: float, limit: int) -> tuple[bytes, bytes]:
    """Feed stdin and collect stdout/stderr until EOF; ``TimeoutError`` at the deadline,
    ``_TooMuch`` past ``limit`` bytes on either stream.  Both streams are drained as data
    arrives, so neither can fill its window and stall."""
    pending = memoryview(stdin)
    if not pending:
        channel.shutdown_write()
    out, err = bytearray(), bytearray()
    poller = select.poll()
    poller.register(channel.fileno(), select.POLLIN)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        if pending and not (channel.eof_received or channel.closed) and channel.send_ready():
            sent = channel.send(bytes(pending[:_SEND_CHUNK]))
            pending = pending[sent:]
            if not pending:
                channel.shutdown_write()
        wait = min(remaining, _STDIN_POLL_S) if pending else remaining
        poller.poll(int(wait * 1000) + 1)
        while channel.recv_ready():
            out += channel.recv(_READ_CHUNK)
            if len(out) > limit:
                raise _TooMuch("stdout")
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(_READ_CHUNK)
            if len(err) > limit:
                raise _TooMuch("stderr")
        if channel.eof_received or channel.closed:
            if not channel.recv_ready() and not channel.recv_stderr_ready():
                return bytes(out), bytes(err)
