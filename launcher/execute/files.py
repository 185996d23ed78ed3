"""Several remote operations on one host in ONE exec: commands, then removals, then atomic file
writes -- one round trip where one ``run``/``put`` each would cost many.

The remote side is a fixed POSIX ``sh`` script (dash, bash, busybox ``sh``): every path, mode,
length and argv is a positional parameter and every file's bytes travel concatenated on stdin, so
no data is ever spliced into shell text and secret contents never appear in argv.  Each file is
written as :meth:`Transport.put` does: ``mktemp`` in the destination's directory, ``chmod`` to the
final mode while still empty, fill with exactly its length of stdin (``dd``), check the size,
``mv`` over the destination.  What a host needs: ``sh``, ``dd``, ``mktemp``, ``chmod``, ``mv``,
``mkdir``, ``rm``, ``wc`` (coreutils or busybox).

Contract:
* commands run in order, stdin from ``/dev/null``, until one exits non-zero; nothing after a
  failed command runs (no removal, no write).  :func:`run_batch` returns each command's
  :class:`Result` (the last one failed if any did; ``command`` is the step's label);
  :func:`write_files` raises for a failed command, naming its label.
* then the removals (``rm -f``), then the writes in the order given: the last file is written
  only when everything before it succeeded (write a manifest last to commit an install).
* a failed removal or write raises :class:`RemoteError` naming it (``rm PATH`` / ``put PATH``);
  files written before it stay written, and no temporary file is left behind.
"""

from __future__ import annotations

import re
import secrets as _random
from dataclasses import dataclass
from typing import Sequence

from launcher import hostscripts
from launcher.errors import RemoteError
from launcher.execute.command import Command, Token
from launcher.execute.transport import CommandTimeout, Result, Transport, check_put_args

DEFAULT_TIMEOUT_S = 300.0
_TAIL_LINES = 20

_SCRIPT = hostscripts.text("files.sh")  # its header gives the arguments


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """A command run before the writes; ``label`` names it in errors (argv may be a long script)."""

    argv: tuple[Token, ...]
    label: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Put:
    """One file to write: absolute ``path``, its bytes, its final mode."""

    path: str
    data: bytes
    mode: int


def batch_command(
    steps: Sequence[Step], remove: Sequence[str], puts: Sequence[Put], boundary: str
) -> tuple[Command, bytes]:
    """The one remote command and its stdin (pure).  ``boundary`` must not occur in any
    command's output: :func:`run_batch` uses a random one."""
    for p in puts:
        check_put_args(p.path, p.mode)
    args: list[Token] = [boundary, str(len(steps))]
    for s in steps:
        if not s.argv:
            raise ValueError(f"step {s.label!r} has an empty argv")
        args += [str(len(s.argv)), *s.argv]
    args += [str(len(remove)), *remove]
    for p in puts:
        args += [p.path, f"{p.mode:04o}", str(len(p.data))]
    return Command(argv=("sh", "-c", _SCRIPT, "fleet-files", *args)), b"".join(p.data for p in puts)


def run_batch(
    t: Transport,
    steps: Sequence[Step] = (),
    *,
    remove: Sequence[str] = (),
    puts: Sequence[Put] = (),
    timeout: float = DEFAULT_TIMEOUT_S,
) -> tuple[Result, ...]:
    """One exec: ``steps`` until one fails, then ``remove``, then ``puts`` (see the module
    contract).  Returns the steps' results; raises :class:`RemoteError` for a failed removal or
    write (or a batch that died before it could say), :class:`CommandTimeout` at ``timeout``."""
    boundary = "fleet-" + _random.token_hex(16)
    command, stdin = batch_command(steps, remove, puts, boundary)
    try:
        result = t.run(command, timeout=timeout, stdin=stdin)
    except CommandTimeout:
        raise CommandTimeout(t.host, _summary(steps, puts), timeout) from None
    marker = re.compile(b"\n" + re.escape(boundary.encode()) + rb" ([^\n]*)\n")
    out = marker.split(result.stdout)
    err = marker.split(result.stderr)
    outs, tags = out[0::2], [m.decode() for m in out[1::2]]
    errs = err[0::2]
    results: list[Result] = []
    for i, tag in enumerate(tags):
        kind, _, rest = tag.partition(" ")
        if kind != "step":
            break
        _, _, rc = rest.partition(" ")
        step = steps[len(results)]
        results.append(Result(host=t.host, command=step.label, exit_status=int(rc), stdout=outs[i],
                              stderr=errs[i] if i < len(errs) else b""))  # fmt: skip
        if not results[-1].ok:
            return tuple(results)
    if result.ok and tags and tags[-1] == "done":
        return tuple(results)
    detail = _tail(errs[-1] if len(errs) > len(results) else result.stderr)
    doing = tags[-1] if tags and not tags[-1].startswith("step") else ""
    kind, _, index = doing.partition(" ")
    if kind == "rm":
        shown = f"rm {remove[int(index) - 1]}"
    elif kind == "put":
        shown = f"put {puts[int(index) - 1].path}"
    elif len(results) < len(steps):
        shown = steps[len(results)].label  # died while the command ran
    else:
        shown = _summary(steps, puts)
    status = None if result.exit_status == -1 else result.exit_status
    raise RemoteError(t.host, shown, status, detail)


def write_files(
    t: Transport,
    puts: Sequence[Put],
    *,
    steps: Sequence[Step] = (),
    remove: Sequence[str] = (),
    timeout: float = DEFAULT_TIMEOUT_S,
) -> None:
    """:func:`run_batch` where a failed step raises :class:`RemoteError` naming its label."""
    for r in run_batch(t, steps, remove=remove, puts=puts, timeout=timeout):
        if not r.ok:
            detail = _tail(r.stderr) or _tail(r.stdout)
            raise RemoteError(r.host, r.command, r.exit_status, detail)


def _tail(data: bytes) -> str:
    return "\n".join(data.decode("utf-8", "replace").strip().splitlines()[-_TAIL_LINES:])


def _summary(steps: Sequence[Step], puts: Sequence[Put]) -> str:
    parts = [s.label for s in steps] + [f"put {p.path}" for p in puts]
    return "; ".join(parts) or "sh"
