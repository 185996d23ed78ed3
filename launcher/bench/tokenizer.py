"""The client's tokenizer, made loadable before aiperf starts.

Contract: :func:`offline` is pure but for the directory it writes under ``root``: with
``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` set (an air-gapped control host), aiperf 0.13.0 treats
every tokenizer name as a hub id and looks it up in the HuggingFace cache, so a local directory
(``fleet-words`` included) fails with ``HFValidationError``; there the directory is staged as a
cached hub snapshot in a private cache (``root/hf-cache``, files linked, not copied) and its id is
returned with the environment pointing at that cache.  Without offline mode, or for a hub id,
name and environment pass through.  :func:`check` loads the tokenizer once the way aiperf will
(its own ``Tokenizer.from_pretrained``, in its venv's python) and raises a one-line
:class:`FleetError` naming what is missing and the flag that fixes it.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Mapping

from launcher.errors import FleetError

OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
STAGED_ORG = "fleet-local"  # the hub "organisation" a staged local directory is cached under
# A hang bound, not a speed check: a tokenizer that cannot load fails at once; loading aiperf's
# own stack took more than 120 s at a load average of ~70 on two cores (a CI run beside others).
CHECK_TIMEOUT_S = 300.0
FIX = "--tokenizer fleet-words (fleet's word-level one) or --tokenizer DIR (a local tokenizer directory)"
# Loads NAME (argv[1]) as aiperf does; prints the error's last line on failure.
_CHECK = (
    "import sys\n"
    "from aiperf.common.tokenizer import Tokenizer\n"
    "try:\n"
    "    Tokenizer.from_pretrained(sys.argv[1])\n"
    "except Exception as e:\n"
    "    print(' '.join(str(e).split()) or type(e).__name__)\n"
    "    sys.exit(3)\n"
)


def is_offline(env: Mapping[str, str]) -> bool:
    return any(env.get(v, "") not in ("", "0") for v in OFFLINE_VARS)


def offline(name: str, env: Mapping[str, str], root: Path) -> tuple[str, dict[str, str]]:
    """(tokenizer name, environment) for aiperf: see the module's contract."""
    out = dict(env)
    source = Path(name)
    if not is_offline(env) or not source.is_dir():
        return name, out
    source = source.resolve()
    repo = f"{STAGED_ORG}/{source.name}"
    commit = hashlib.sha1(str(source).encode()).hexdigest()  # any 40-hex id; the ref names it
    cache = root / "hf-cache"
    entry = cache / f"models--{STAGED_ORG}--{source.name}"
    snapshot = entry / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (entry / "refs").mkdir(exist_ok=True)
    (entry / "refs" / "main").write_text(commit)
    for f in source.iterdir():
        link = snapshot / f.name
        if f.is_file() and not link.exists():
            link.symlink_to(f)
    out["HF_HUB_CACHE"] = str(cache)
    return repo, out


def check(exe: str, name: str, env: Mapping[str, str], shown: str) -> None:
    """Load ``name`` with aiperf's python (beside ``exe``) under ``env``; ``shown``: how the
    operator named it (the message quotes that, not a staged id)."""
    python = Path(exe).with_name("python")
    if not python.is_file():
        return  # a client without its venv beside it: aiperf itself reports a bad tokenizer
    try:
        done = subprocess.run([str(python), "-c", _CHECK, name], env=dict(env), capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise FleetError(f"tokenizer {shown}: not loaded within {CHECK_TIMEOUT_S:g}s; pass {FIX}") from None
    if done.returncode == 0:
        return
    lines = (done.stdout.strip() or done.stderr.strip() or "no output").splitlines()
    raise FleetError(f"tokenizer {shown} cannot be loaded ({_why(lines[-1], env)}); pass {FIX}")


def _why(error: str, env: Mapping[str, str]) -> str:
    """What is missing, in a few words, from the loader's error line."""
    low = error.lower()
    if "gated" in low or "401" in low or "403" in low:
        return "a gated model: HF_TOKEN (--secret HF_TOKEN=...) with access to it"
    if is_offline(env) and ("not present in the huggingface cache" in low or "offline" in low):
        return "not in the HuggingFace cache and HF_HUB_OFFLINE is set"
    return error[:200]
