"""The step hook: a command of the operator's that fleet runs before each step of a command that
changes hosts, and waits for.

Contract: when ``FLEET_STEP_HOOK`` is set (a command line, split as a shell would and run without
one), fleet runs it before each step with ``FLEET_STEP`` (the step's name, listed in docs/cli.md
"Step hook": ``connect``, ``lock``, ``pull``, ``install``, ``start``, ``health``, ``release``, ...)
and ``FLEET_STEP_HOSTS`` (the hosts the step works on, space-separated) in its environment, its
stdin closed and its output on fleet's stderr (fleet's stdout stays its report), and goes on once
it exits.  While it runs, fleet waits: a hook can hold a rollout between steps (until someone
says go), post each step somewhere, or (the sandbox's fault tests) break a host at an exact
step.  It runs in a process group of its own: interrupted while it runs, fleet ends it and
whatever it started (SIGKILL to the group) before settling.  Its exit status does not stop the command (a step half-announced would leave more
half-done than it saves); a hook that fails or cannot start is said in one line per step.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from typing import Sequence

ENV = "FLEET_STEP_HOOK"


def reached(step: str, hosts: Sequence[str]) -> None:
    """Runs the operator's step hook, if any, for ``step`` on ``hosts`` and waits for it."""
    hook = os.environ.get(ENV)
    if not hook or not hosts:
        return
    env = {**os.environ, "FLEET_STEP": step, "FLEET_STEP_HOSTS": " ".join(hosts)}
    sys.stderr.flush()  # its lines after fleet's own so far
    try:
        # Its stdout onto fleet's stderr (descriptor 2): fleet's stdout is its report (--json).
        # A process group of its own, so that whatever it started ends with it below.
        proc = subprocess.Popen(shlex.split(hook), env=env, stdin=subprocess.DEVNULL, stdout=2, start_new_session=True)
    except (OSError, ValueError) as err:
        print(f"fleet: {ENV} for step {step}: {err}", file=sys.stderr)
        return
    try:
        rc = proc.wait()
    except BaseException:
        # fleet interrupted (Ctrl-C, SIGTERM) while the hook holds it: the hook and everything it
        # started end before fleet settles, so nothing of the run outlives it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if rc != 0:
        print(f"fleet: {ENV} for step {step}: exit {rc} (the step goes ahead)", file=sys.stderr)
