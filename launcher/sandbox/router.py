"""The real sglang-router (PyPI ``sglang-router==0.3.2``) for sandbox tests, from a cached venv.

``ensure_venv()`` creates ``<cache>/router-venv`` once (``python -m venv`` + ``pip install``);
``start()`` runs ``python -m sglang_router.launch_router ARGS`` inside a sandbox host's network
namespace (or on loopback), logging to a file, and returns the Popen so the caller owns it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from launcher.errors import FleetError
from launcher.sandbox.state import HostState, cache_root

VERSION = "0.3.2"


def ensure_venv() -> Path:
    """The router venv's python; installs it on first use (about 10 s)."""
    venv = cache_root() / "router-venv"
    python = venv / "bin/python"
    ok = subprocess.run(
        (str(python), "-c", "import sglang_router"), capture_output=True
    ).returncode == 0 if python.exists() else False
    if ok:
        return python
    subprocess.run((sys.executable, "-m", "venv", "--clear", str(venv)), check=True)
    proc = subprocess.run(
        (str(python), "-m", "pip", "install", "-q", f"sglang-router=={VERSION}"),
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise FleetError(f"pip install sglang-router=={VERSION}: {tail[0]}")
    return python


def start(host: HostState | None, args: tuple[str, ...], log: Path) -> subprocess.Popen[bytes]:
    """Starts the router in ``host``'s network namespace (None: the caller's namespace)."""
    argv: tuple[str, ...] = (str(ensure_venv()), "-m", "sglang_router.launch_router", *args)
    if host is not None and host.netns:
        argv = ("ip", "netns", "exec", host.netns, *argv)
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1")  # no tokenizer downloads, plain logs
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
        )
