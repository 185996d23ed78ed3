"""The benchmark client: NVIDIA's aiperf (``aiperf profile``), run on the control host from its
own venv (docs/bench.md says why), one process per concurrency level.

Contract: :func:`aiperf_argv` is pure (argv only; a secret such as HF_TOKEN goes in the
environment, never argv).  :func:`run_level` runs one level, bounded in time (the client stops
issuing requests after ``duration_s`` and is killed, with its process group, if it overruns),
and returns the summary export; a client that fails is a one-line :class:`FleetError`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from launcher.config.benchspec import Shape, Slo
from launcher.bench import tokenizer
from launcher.bench.results import CANCELLED_KEY, cancelled_in_log, load_label
from launcher.errors import FleetError

AIPERF_VERSION = "0.13.0"
# scripts/install.sh puts aiperf in its own venv here (its dependencies would clash with fleet's).
DEFAULT_AIPERF = "/opt/fleet-aiperf/bin/aiperf"
# The word-level tokenizer fleet ships: one token per whitespace-separated word, as the
# sandbox's stand-in engine and its generated real-engine model count them.
WORDS_TOKENIZER = "fleet-words"
START_S = 120.0  # aiperf's own start-up (its services, the tokenizer, the prompts)


@dataclass(frozen=True, slots=True, kw_only=True)
class LevelSpec:
    """One client run: ``concurrency`` requests kept in flight (closed loop), or requests sent at
    ``rate`` per second with Poisson arrivals (open loop: ``concurrency`` 0, no cap); at most
    ``requests`` sent, none started after ``duration_s``."""

    urls: tuple[str, ...]  # base URLs, requests spread round-robin (one: the deployment's endpoint)
    model: str
    tokenizer: str  # HF id or local directory
    shape: Shape
    slo: Slo
    concurrency: int
    requests: int
    duration_s: float
    timeout_s: float  # one request's limit
    seed: int  # the prompts' random seed: a fresh one per level and run (no prompt reuse)
    warmup: int = 0  # requests sent (and not counted) first: a freshly started engine's warm-up
    rate: float | None = None  # open loop: requests/s, Poisson arrivals (aiperf's --request-rate)
    # How long aiperf waits for answers in flight once the duration is over (then it cancels
    # them); None: a request's own limit, so a request started within the duration is never
    # cancelled before its own time is up.
    grace: float | None = None

    @property
    def load(self) -> str:
        return load_label(self.concurrency, self.rate)

    @property
    def grace_s(self) -> float:
        return self.timeout_s if self.grace is None else self.grace


def aiperf_path() -> str:
    """``$FLEET_AIPERF`` or the install script's venv."""
    return os.environ.get("FLEET_AIPERF") or DEFAULT_AIPERF


def tokenizer_path(name: str) -> str:
    """``fleet-words`` -> the shipped tokenizer's directory; anything else as given."""
    return str(Path(__file__).with_name("words")) if name == WORDS_TOKENIZER else name


def aiperf_argv(exe: str, spec: LevelSpec, artifacts: Path) -> tuple[str, ...]:
    """Fixed lengths (no spread, ``ignore_eos`` so every request generates all its tokens), a
    distinct prompt per request from the level's own seed (no prompt sent twice: an engine's
    prefix cache would answer it),
    streaming completions, goodput counted by aiperf against TTFT and TPOT (its
    ``inter_token_latency``), summary export only, no live UI."""
    goodput = f"time_to_first_token:{spec.slo.ttft_ms:g} inter_token_latency:{spec.slo.tpot_ms:g}"
    return (
        exe, "profile", "--model", spec.model, *(a for u in spec.urls for a in ("--url", u)),
        "--url-strategy", "round_robin", "--endpoint-type", "completions",
        "--streaming", "--tokenizer", tokenizer_path(spec.tokenizer),
        "--prompt-input-tokens-mean", str(spec.shape.input_len), "--prompt-input-tokens-stddev", "0",
        "--prompt-output-tokens-mean", str(spec.shape.output_len), "--prompt-output-tokens-stddev", "0",
        "--extra-inputs", "ignore_eos:true", *(("--concurrency", str(spec.concurrency)) if spec.concurrency else ()),
        *(("--request-rate", f"{spec.rate:g}", "--arrival-pattern", "poisson") if spec.rate is not None else ()),
        "--request-count", str(spec.requests), "--benchmark-duration", f"{spec.duration_s:g}",
        "--benchmark-grace-period", f"{spec.grace_s:g}", "--request-timeout-seconds", f"{spec.timeout_s:g}",
        "--goodput", goodput, "--random-seed", str(spec.seed),
        # output tokens as the engine counts them (its usage), not re-tokenized from the text
        "--use-server-token-count",
        # one distinct prompt per request (aiperf's default pool is 100, reused past that)
        "--num-dataset-entries", str(spec.requests + spec.warmup), "--artifact-dir", str(artifacts),
        "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry",
        *(("--warmup-request-count", str(spec.warmup)) if spec.warmup else ()),
    )  # fmt: skip


def client_env(secrets: Mapping[str, str]) -> dict[str, str]:
    """fleet's environment plus the deployment's HF_TOKEN (a gated model's tokenizer); aiperf's
    services get fleet's start-up bound to register (an operator's own setting wins)."""
    env = dict(os.environ, HF_HUB_DISABLE_TELEMETRY="1")
    # aiperf gives its worker processes 30 s to register; on a busy control host (measured: load 44
    # on two cores) they took longer and the level failed before sending a request.
    env.setdefault("AIPERF_SERVICE_REGISTRATION_TIMEOUT", f"{START_S:g}")
    if "HF_TOKEN" in secrets:
        env["HF_TOKEN"] = secrets["HF_TOKEN"]
    return env


def run_level(spec: LevelSpec, artifacts: Path, secrets: Mapping[str, str]) -> dict[str, Any]:
    """Run aiperf for one level; its console output goes to ``artifacts/client.log``."""
    exe = aiperf_path()
    if not Path(exe).is_file():
        raise FleetError(f"benchmark client not found at {exe} (run scripts/install.sh, or set FLEET_AIPERF)")
    artifacts.mkdir(parents=True, exist_ok=True)
    # the tokenizer loaded the way aiperf will, before it starts (else a 30-line traceback in its log)
    name, env = tokenizer.offline(tokenizer_path(spec.tokenizer), client_env(secrets), artifacts)
    tokenizer.check(exe, name, env, spec.tokenizer)
    log = artifacts / "client.log"
    bound = START_S + spec.duration_s + spec.grace_s
    with log.open("wb") as out:
        proc = subprocess.Popen(
            aiperf_argv(exe, replace(spec, tokenizer=name), artifacts), stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, env=env, start_new_session=True,  # its own group: its services end with it
        )  # fmt: skip
        try:
            code = proc.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            _kill(proc)
            raise FleetError(f"aiperf at {spec.load} did not finish within {bound:g}s (log: {log})") from None
        except BaseException:  # Ctrl-C, SIGTERM: no load left behind
            _kill(proc)
            raise
    export = artifacts / "profile_export_aiperf.json"
    if code != 0 or not export.is_file():
        raise FleetError(f"aiperf at {spec.load} exited {code}: {_last_error(log)} (log: {log})")
    doc: dict[str, Any] = json.loads(export.read_text())
    # the requests it cancelled in flight at the end are in no count of its export, only its log
    doc[CANCELLED_KEY] = cancelled_in_log(log.read_text(errors="replace"))
    return doc


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _last_error(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if " ERROR " in ln or "Error" in ln]
    return (errors or lines or ["no output"])[-1][:300]
