"""paramiko, imported without ``invoke``.

paramiko's config module imports ``invoke`` at import time only to run ``Match exec`` lines of
ssh_config files; invoke brings ``unittest.mock`` and ``asyncio`` with it, ~50 ms of every
fleet command's start-up.  Import paramiko from here: invoke is hidden while paramiko loads
(unless something imported it already) and handed back by :func:`allow_match_exec`, which
:func:`launcher.execute.ssh.load_ssh_config` calls for a config file that uses ``Match exec``.
"""

from __future__ import annotations

import sys

_hide = "invoke" not in sys.modules
if _hide:
    sys.modules["invoke"] = None  # type: ignore[assignment]  # makes `import invoke` fail fast
try:
    import paramiko
    import paramiko.config
finally:
    if _hide:
        del sys.modules["invoke"]

__all__ = ["allow_match_exec", "paramiko"]


def allow_match_exec() -> None:
    """Gives paramiko ``invoke`` back (if installed) so ``Match exec`` lines work."""
    if getattr(paramiko.config, "invoke", None) is None:
        try:
            import invoke
        except ImportError:
            return  # paramiko reports its own error when it meets `Match exec`
        setattr(paramiko.config, "invoke", invoke)  # the module global paramiko consults
