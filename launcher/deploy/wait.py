"""One host's side of the health gate: a single exec that watches that host's units until
something the gate cares about happens, then reports what it last saw.

The remote loop (a fixed POSIX ``sh`` script; unit names and URLs travel as positional
parameters) probes every unit with a health check every ``step_s`` from the host itself (curl,
else wget, else python3) and reads liveness (``docker inspect`` / ``systemctl show``) at the
first step and every fourth one after it (each runtime's section of the script reads its units'
liveness, ``Runtime.wait_section``; one output section per runtime name), at once when every probe answers, and at the end.  It returns as soon as every
unit is running with its probes answering, or any unit is exited, missing, restarting or has
restarted, or after ``window_s`` (whole seconds, give or take one: the host's ``date +%s``).

Contract: :func:`run_wait` is one round trip and never judges a group: it returns a
:class:`Seen` (liveness read by each runtime's ``liveness_from``, probe results)
or raises a :class:`FleetError` whose one-line message names the host -- no probe tool
(exit 127, as a lone probe would), docker daemon down, ``systemctl show`` failing, an answer
that is not a report, or the exec outliving ``window_s`` plus the probes' and a step's timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from launcher import hostscripts
from launcher.deploy.desired import Desired
from launcher.remote import STEP_TIMEOUT_S, sh, tail
from launcher.deploy.steps import NO_PROBE_TOOL
from launcher.errors import FleetError, RemoteError
from launcher.execute.transport import CommandTimeout, Result, Transport
from launcher.runtimes import registry as runtimes
from launcher.runtimes.base import Liveness

MARK = "fleet-wait:"
LABEL = "health wait"  # how the exec is named in errors (the script itself is long)
# The script with every runtime's section where it asks for them; its arguments: see wait_argv
# and the script's header.
_WAIT = hostscripts.text("wait.sh").replace(
    "# runtime sections\n", "".join(rt.wait_section() for rt in runtimes.runtimes()), 1
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Seen:
    """What one host's wait saw last."""

    live: Mapping[str, Liveness]
    probes: Mapping[str, bool]  # unit name -> its endpoint answered 2xx (units with a check)


def wait_argv(units: Sequence[Desired], *, window_s: int, step_s: float, probe_timeout_s: int) -> tuple[str, ...]:
    args: list[str] = []
    for d in units:
        name = runtimes.get(d.unit.runtime).wait_name(d.name)
        if "\n" in name:  # names are built from validated parts; the script splits its lists on newlines
            raise ValueError(f"newline in unit name {d.name!r}")
        args += [d.unit.runtime, name, d.unit.health.gate_url if d.unit.health else ""]
    own = (a for rt in runtimes.runtimes() for a in rt.wait_args())
    return sh(_WAIT, str(window_s), f"{step_s:g}", str(probe_timeout_s), *own, *args)


def run_wait(
    transport: Transport, units: Sequence[Desired], *, window_s: int, step_s: float, probe_timeout_s: int
) -> Seen:
    """Waits on ``units`` (all on ``transport``'s host); see the module docstring."""
    argv = wait_argv(units, window_s=window_s, step_s=step_s, probe_timeout_s=probe_timeout_s)
    probing = sum(1 for d in units if d.unit.health is not None)
    timeout = window_s + probing * probe_timeout_s + STEP_TIMEOUT_S
    try:
        result = transport.run(argv, timeout=timeout)
    except CommandTimeout:
        raise CommandTimeout(transport.host, LABEL, timeout) from None
    return parse_wait(units, result)


class UnreadableWait(FleetError):
    """A host's wait answered something that is not a report."""


def parse_wait(units: Sequence[Desired], result: Result) -> Seen:
    host = result.host
    if not result.ok:
        err = tail(result.stderr_text)
        for rt in runtimes.runtimes():  # a runtime's failed read, its own status (127: no systemctl)
            if err.startswith(rt.liveness_label + ": "):
                raise RemoteError(host, rt.liveness_label, result.exit_status, err.removeprefix(rt.liveness_label + ": "))
        if result.exit_status == NO_PROBE_TOOL:
            raise RemoteError(host, "sh", NO_PROBE_TOOL, err)
        raise RemoteError(host, LABEL, result.exit_status, err or tail(result.stdout_text))
    text: dict[str, list[str]] = {rt.name: [] for rt in runtimes.runtimes()}  # the script's sections
    probes: dict[str, bool] = {}
    section: list[str] | None = None
    ended = False
    for line in result.stdout_text.splitlines():
        if not line.startswith(MARK):
            if section is not None:
                section.append(line)
            continue
        word = line.removeprefix(MARK)
        if word in text:
            section = text[word]
        elif word == "end":
            ended = True
            break
        else:
            kind, _, rest = word.partition(" ")
            index, _, answered = rest.partition(" ")
            if kind != "probe" or not index.isdigit() or int(index) >= len(units) or answered not in ("0", "1"):
                raise _unreadable(host, line)
            probes[units[int(index)].name] = answered == "1"
    if not ended:
        raise _unreadable(host, result.stdout_text)
    live: dict[str, Liveness] = {}
    for rt in runtimes.runtimes():
        names = [d.name for d in units if d.unit.runtime == rt.name]
        live.update(rt.liveness_from(result, names, "\n".join(text[rt.name])))
    return Seen(live=live, probes=probes)


def _unreadable(host: str, text: str) -> UnreadableWait:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    shown = first if len(first) <= 80 else first[:77] + "..."
    return UnreadableWait(f"{host}: {LABEL}: unreadable answer ({shown!r})" if shown else f"{host}: {LABEL}: empty answer")
