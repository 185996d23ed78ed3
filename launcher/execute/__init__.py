"""The execution layer: commands and files on hosts over SSH (or locally, or recorded).

``transport`` is the contract, ``ssh``/``local``/``fake`` implement it, ``fanout`` runs a
function per host on a bounded pool, ``hostkeys`` decides which host keys to trust and
``command`` keeps secrets out of what is displayed.
"""

from launcher.execute.command import Command, Secret
from launcher.execute.fanout import (
    Failed,
    FanoutInterrupted,
    FanoutResult,
    Ok,
    Unreachable,
    run_all,
)
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.transport import CommandTimeout, Result, Transport

__all__ = [
    "Command",
    "CommandTimeout",
    "Failed",
    "FanoutInterrupted",
    "FanoutResult",
    "KnownHosts",
    "Ok",
    "Result",
    "Secret",
    "Transport",
    "Unreachable",
    "run_all",
]
