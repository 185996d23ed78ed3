"""What fleet runs against sandbox hosts need on the loaded CI machine.

``ssh_dead_after_s`` is the operator's knob for hosts that stall (docs/configuration.md).  On two
cores, with CI's four tiers side by side at a load of 60-70, a sandbox host's sshd (or this
machine's fleet process, which must read the answer) let an SSH keepalive go unanswered for more
than the default 15 s: session 13's ci1 named h9 unreachable mid health-wait during a real
engine's cold start; session 14's ci1 lost h1 while a PD cohort roll released its locks.  None of
those tests is about liveness; the fault tests that are keep their own quick bounds
(``tests/deploy/test_sandbox_faults.py``'s QUICK), and ``tests/execute/test_ssh.py`` tests the
mechanism with its own options.  ``tests/conftest.py`` gives every session that runs sandbox or
real-engine tests this bound unless the environment sets one."""

from __future__ import annotations

SSH_DEAD_AFTER_S = "60"
