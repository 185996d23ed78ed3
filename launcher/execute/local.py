"""Run commands on the control node itself: argv straight to the kernel, never a shell."""

from __future__ import annotations

import os
import subprocess
import tempfile
from typing import Mapping, Sequence

from launcher.errors import RemoteError
from launcher.execute.command import Command, Token
from launcher.execute.transport import (
    PUT_TEMP_PREFIX,
    CommandTimeout,
    Result,
    check_put_args,
)


class LocalTransport:
    """A :class:`~launcher.execute.transport.Transport` for the local machine."""

    def __init__(self, host: str = "localhost") -> None:
        self._host = host

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
        command = Command.of(argv)
        shown = command.with_env(env or {}).masked()
        full_env = {**os.environ, **env} if env else None
        try:
            done = subprocess.run(
                command.reveal(),
                input=stdin,
                stdin=None if stdin is not None else subprocess.DEVNULL,
                capture_output=True,
                env=full_env,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise CommandTimeout(self._host, shown, timeout) from None
        except OSError as err:
            # What a shell would report: 127 not found, 126 not executable.
            status = 127 if isinstance(err, FileNotFoundError) else 126
            done = subprocess.CompletedProcess(
                command.reveal(), status, b"", f"{command.argv[0]}: {err.strerror}\n".encode()
            )
        # A signal death is -N from subprocess; SSH reports no status then, mirrored as -1.
        status = done.returncode if done.returncode >= 0 else -1
        result = Result(host=self._host, command=shown, exit_status=status,
                        stdout=done.stdout, stderr=done.stderr)
        return result.check() if check else result

    def put(self, path: str, data: bytes, mode: int) -> None:
        check_put_args(path, mode)
        parent = os.path.dirname(path)
        try:
            os.makedirs(parent, exist_ok=True)
            # mkstemp creates the file 0600; fchmod sets the final mode before any content.
            fd, tmp = tempfile.mkstemp(prefix=PUT_TEMP_PREFIX, dir=parent)
            try:
                os.fchmod(fd, mode)
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as err:
            raise RemoteError(self._host, f"put {path}", None, err.strerror or str(err)) from None

    def get(self, path: str) -> bytes:
        try:
            with open(path, "rb") as src:
                return src.read()
        except OSError as err:
            raise RemoteError(self._host, f"get {path}", None, err.strerror or str(err)) from None

    def close(self) -> None:
        """Nothing to release."""
