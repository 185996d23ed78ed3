"""Cross-checking a benchmark client against the engine's own view of the same requests (issue 29
item 7, docs/bench.md "Cross-check with the engine's own client").

Two clients -- vLLM's own ``vllm bench serve`` (run inside the engine's container) and fleet's
aiperf path -- are each judged against what the real vLLM itself recorded while that client ran:
its Prometheus histograms and token counter, read before and after the run and summed over the
replicas (a router's workers).  Comparing the two clients with each other directly does not work
on a shared 2-core machine: the CPU engine's own TPOT moved 17x between two back-to-back runs of
one client (docs/bench.md), so each client is compared with the engine over its own run.

Contract: :func:`engine_view` and :func:`vllm_bench_argv` / :func:`from_vllm_bench` /
:func:`from_aiperf` are pure.  :func:`read_engines` GETs each base URL's ``/metrics`` from this
host (sandbox addresses only); :func:`over_run` reads the engines around ``run`` and waits (a
bound, not a timing assumption) until the engines have recorded the run's requests.
:func:`run_vllm_bench` runs ``vllm bench serve`` in a container on a sandbox host and returns its
saved result.  The metric names are fleet's own (:func:`launcher.observe.names.names_for`), parsed
with fleet's reader (:func:`launcher.observe.load.samples`).
"""

from __future__ import annotations

import json
import shlex
import time
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar

from launcher.observe.load import samples
from launcher.observe.names import names_for
from launcher.sandbox.client import Sandbox

T = TypeVar("T")
# vLLM 0.32's engine-core phase histograms (vllm/v1/metrics/loggers.py); fleet's names map has no
# use for them, so they are named here
QUEUE, PREFILL = "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds"
RECORDED_S = 60.0  # bound on the engines recording a finished run's requests (a step of their loop)
VLLM_BENCH_S = 900.0  # vllm bench serve's own bound: its vllm import and the run, on a loaded machine


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineView:
    """vLLM's own record, summed over engines: at one moment, or over a run (:meth:`since`).
    Histograms' sums (seconds) and counts (requests).  TTFT is the API server's (arrival to its
    handling the first token); TPOT is per request, (last token - first token) / (tokens - 1) in
    the engine core, as the clients define it; queue + prefill (engine core clocks, recorded at a
    request's finish) is when the core made its first token, after the request reached it."""

    ttft_sum_s: float
    ttft_count: float
    tpot_sum_s: float
    tpot_count: float
    tokens: float  # generation tokens
    queue_sum_s: float = 0.0
    prefill_sum_s: float = 0.0
    prefill_count: float = 0.0

    def since(self, before: EngineView) -> EngineView:
        return EngineView(ttft_sum_s=self.ttft_sum_s - before.ttft_sum_s, ttft_count=self.ttft_count - before.ttft_count,
                          tpot_sum_s=self.tpot_sum_s - before.tpot_sum_s, tpot_count=self.tpot_count - before.tpot_count,
                          tokens=self.tokens - before.tokens, queue_sum_s=self.queue_sum_s - before.queue_sum_s,
                          prefill_sum_s=self.prefill_sum_s - before.prefill_sum_s,
                          prefill_count=self.prefill_count - before.prefill_count)  # fmt: skip

    @property
    def mean_ttft_ms(self) -> float | None:
        return 1000 * self.ttft_sum_s / self.ttft_count if self.ttft_count else None

    @property
    def mean_tpot_ms(self) -> float | None:
        return 1000 * self.tpot_sum_s / self.tpot_count if self.tpot_count else None

    @property
    def mean_core_first_token_ms(self) -> float | None:
        """Queue + prefill: the engine core's first token, from the request reaching the core."""
        return 1000 * (self.queue_sum_s + self.prefill_sum_s) / self.prefill_count if self.prefill_count else None


def engine_view(texts: Sequence[str]) -> EngineView:
    """The engines' /metrics texts (one per engine) summed, in fleet's vLLM names."""
    names = names_for("vllm")
    assert names.ttft and names.tpot and names.generation_tokens
    total: dict[str, float] = {}
    for text in texts:
        found = samples(text)
        for key in (f"{names.ttft}_sum", f"{names.ttft}_count", f"{names.tpot}_sum", f"{names.tpot}_count",
                    names.generation_tokens, f"{QUEUE}_sum", f"{PREFILL}_sum", f"{PREFILL}_count"):  # fmt: skip
            total[key] = total.get(key, 0.0) + sum(v for _, v in found.get(key, ()))
    return EngineView(ttft_sum_s=total[f"{names.ttft}_sum"], ttft_count=total[f"{names.ttft}_count"],
                      tpot_sum_s=total[f"{names.tpot}_sum"], tpot_count=total[f"{names.tpot}_count"],
                      tokens=total[names.generation_tokens], queue_sum_s=total[f"{QUEUE}_sum"],
                      prefill_sum_s=total[f"{PREFILL}_sum"], prefill_count=total[f"{PREFILL}_count"])  # fmt: skip


def read_engines(bases: Sequence[str]) -> EngineView:
    texts = []
    for base in bases:
        with urllib.request.urlopen(f"{base}/metrics", timeout=30) as r:
            texts.append(r.read().decode())
    return engine_view(texts)


def over_run(bases: Sequence[str], requests: int, run: Callable[[], T]) -> tuple[T, EngineView]:
    """``run``'s result and the engines' record of it: read before, then after until its
    ``requests`` are in the TPOT count (vLLM records a finished request a step after its last
    chunk went out), at most :data:`RECORDED_S`."""
    before = read_engines(bases)
    result = run()
    deadline = time.monotonic() + RECORDED_S
    while (view := read_engines(bases).since(before)).tpot_count < requests and time.monotonic() < deadline:
        time.sleep(0.5)
    return result, view


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientRun:
    """What one client reported of one run (milliseconds, tokens, tokens/s)."""

    client: str
    completed: int
    output_tokens: int
    mean_ttft_ms: float
    median_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    output_tok_s: float


def from_aiperf(doc: Mapping[str, Any]) -> ClientRun:
    """aiperf's ``profile_export_aiperf.json`` (its TPOT is ``inter_token_latency``, per request)."""

    def stat(key: str, field: str = "avg") -> float:
        return float(doc[key][field])

    return ClientRun(client=f"aiperf {doc.get('aiperf_version', '?')}", completed=int(stat("request_count")),
                     output_tokens=int(stat("total_output_tokens")), mean_ttft_ms=stat("time_to_first_token"),
                     median_ttft_ms=stat("time_to_first_token", "p50"), mean_tpot_ms=stat("inter_token_latency"),
                     median_tpot_ms=stat("inter_token_latency", "p50"), output_tok_s=stat("output_token_throughput"))  # fmt: skip


def vllm_bench_argv(*, base_url: str, model: str, tokenizer: str, input_len: int, output_len: int, concurrency: int,
                    requests: int, seed: int, result_dir: str, result_file: str) -> tuple[str, ...]:  # fmt: skip
    """``vllm bench serve`` (vLLM 0.32) at fixed lengths (random dataset, range ratio 0,
    ``--ignore-eos``), streaming completions as aiperf sends them, no warm-up and no ready-check
    request (the engine's record of the run then holds exactly the run's requests), its result
    saved as JSON with each request's TTFT and gaps (``--save-detailed``)."""
    return (
        "vllm", "bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions", "--base-url", base_url,
        "--model", model, "--tokenizer", tokenizer, "--dataset-name", "random", "--random-input-len", str(input_len),
        "--random-output-len", str(output_len), "--random-range-ratio", "0", "--ignore-eos",
        "--max-concurrency", str(concurrency), "--num-prompts", str(requests), "--num-warmups", "0",
        "--ready-check-timeout-sec", "0", "--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--save-result", "--save-detailed", "--result-dir", result_dir, "--result-filename", result_file, "--disable-tqdm",
    )  # fmt: skip


def from_vllm_bench(doc: Mapping[str, Any]) -> ClientRun:
    """``vllm bench serve``'s saved result (its TPOT: (latency - TTFT) / (tokens - 1), per request)."""
    return ClientRun(client="vllm bench serve", completed=int(doc["completed"]),
                     output_tokens=int(doc["total_output_tokens"]), mean_ttft_ms=float(doc["mean_ttft_ms"]),
                     median_ttft_ms=float(doc["median_ttft_ms"]), mean_tpot_ms=float(doc["mean_tpot_ms"]),
                     median_tpot_ms=float(doc["median_tpot_ms"]), output_tok_s=float(doc["output_throughput"]))  # fmt: skip


def run_vllm_bench(sb: Sandbox, host: str, container: str, argv: Sequence[str]) -> dict[str, Any]:
    """``argv`` (:func:`vllm_bench_argv`) inside ``container`` on ``host`` (offline: the tokenizer
    is the engine's model dir); its saved result.  A failure shows the tail of its output."""
    i, j = argv.index("--result-dir"), argv.index("--result-filename")
    path = f"{argv[i + 1]}/{argv[j + 1]}"
    cmd = (f"docker exec -e HF_HUB_OFFLINE=1 -e TRANSFORMERS_OFFLINE=1 {shlex.quote(container)} "
           f"sh -c {shlex.quote(shlex.join(argv) + ' 2>&1 | tail -40')}")  # fmt: skip
    res = sb.ssh(host, cmd, timeout=VLLM_BENCH_S)
    got = sb.ssh(host, f"docker exec {shlex.quote(container)} cat {shlex.quote(path)}")
    assert res.rc == 0 and got.rc == 0, f"vllm bench serve on {host}/{container}: rc={res.rc}\n{res.out}\n{res.err}\n{got.err}"
    doc: dict[str, Any] = json.loads(got.out)
    return doc


TPOT_TOLERANCE = 0.10  # issue 29 item 7's criterion, per client against the engine's view of its run


def check(client: ClientRun, engine: EngineView, requests: int, output_len: int) -> list[str]:
    """What does not hold between a client's report of a run and the engine's record of it:
    every request counted by both (no warm-up or stray request in the window), the same output
    tokens, the mean TPOT within :data:`TPOT_TOLERANCE`, and the client's mean TTFT not below
    the engine's (causality: a client's interval, from sending to receiving the first token,
    holds the engine's, from arrival to emitting it).

    A client's TPOT below the engine's by more than the tolerance is explained, not failed, when
    the first chunk's lateness covers it: the client's decode window opens when its first chunk
    arrives, the engine's when its core made the first token, so a first chunk delivered late
    (a loaded machine: TTFT 315 ms at the client, 145 ms at the API server) shortens the client's
    window by up to that lateness -- the client's mean TTFT less the core's queue + prefill
    (:func:`first_chunk_late_ms`).  Above the engine's, nothing explains it."""
    bad = []
    if (client.completed, engine.ttft_count, engine.tpot_count) != (requests, requests, requests):
        bad.append(f"requests: client {client.completed}, engine TTFT/TPOT counts {engine.ttft_count:g}/"
                   f"{engine.tpot_count:g}, sent {requests}")  # fmt: skip
    if (client.output_tokens, engine.tokens) != (requests * output_len, requests * output_len):
        bad.append(f"output tokens: client {client.output_tokens}, engine {engine.tokens:g}, "
                   f"asked {requests * output_len}")  # fmt: skip
    tpot, ttft = engine.mean_tpot_ms, engine.mean_ttft_ms
    if tpot is None:
        bad.append("mean TPOT: the engine recorded none")
    elif client.mean_tpot_ms > tpot * (1 + TPOT_TOLERANCE):
        bad.append(f"mean TPOT: client {client.mean_tpot_ms:.2f} ms, engine {tpot:.2f} ms (tolerance {TPOT_TOLERANCE:.0%})")
    elif client.mean_tpot_ms < tpot * (1 - TPOT_TOLERANCE):
        late = first_chunk_late_ms(client, engine)
        shorter = (tpot - client.mean_tpot_ms) * (output_len - 1)
        if late is None or shorter > late + TPOT_TOLERANCE * tpot * (output_len - 1):
            bad.append(f"mean TPOT: client {client.mean_tpot_ms:.2f} ms, engine {tpot:.2f} ms (tolerance {TPOT_TOLERANCE:.0%}; "
                       f"a decode window {shorter:.0f} ms shorter, the first chunk "
                       + ("not known late)" if late is None else f"{late:.0f} ms late)"))  # fmt: skip
    if ttft is None:
        bad.append("mean TTFT: the engine recorded none")
    elif client.mean_ttft_ms < ttft - 1.0:  # 1 ms: the two clocks' reading and rounding
        bad.append(f"mean TTFT: client {client.mean_ttft_ms:.2f} ms below the engine's {ttft:.2f} ms")
    return bad


def first_chunk_late_ms(client: ClientRun, engine: EngineView) -> float | None:
    """How much later than the engine core made it the client got its first token, on average:
    the client's mean TTFT less the core's queue + prefill.  It bounds how much shorter than the
    engine's a client's decode window can be (it also holds the request's way in, which only adds)."""
    core = engine.mean_core_first_token_ms
    return None if core is None else client.mean_ttft_ms - core


def summary(client: ClientRun, engine: EngineView) -> str:
    """One line: the client's figures beside the engine's view of the same run."""
    return (f"{client.client}: {client.completed} requests, {client.output_tokens} output tokens "
            f"(engine {engine.tokens:g}), TTFT mean {client.mean_ttft_ms:.1f} ms (engine {engine.mean_ttft_ms or 0:.1f}) "
            f"p50 {client.median_ttft_ms:.1f}, TPOT mean {client.mean_tpot_ms:.2f} ms (engine {engine.mean_tpot_ms or 0:.2f}, "
            f"ratio {client.mean_tpot_ms / (engine.mean_tpot_ms or float('nan')):.3f}) p50 {client.median_tpot_ms:.2f}, "
            f"{client.output_tok_s:.1f} output tok/s, first chunk {_ms(first_chunk_late_ms(client, engine))} "
            f"after the engine core's first token")  # fmt: skip


def _ms(value: float | None) -> str:
    return "? ms" if value is None else f"{value:.0f} ms"


def ratios(a: ClientRun, b: ClientRun) -> str:
    """``b`` over ``a``: medians and throughput (printed, not asserted: each ran at its own moment
    of the machine's load)."""
    return (f"{b.client} / {a.client}: TTFT p50 x{b.median_ttft_ms / a.median_ttft_ms:.2f}, "
            f"TPOT p50 x{b.median_tpot_ms / a.median_tpot_ms:.2f}, output tok/s x{b.output_tok_s / a.output_tok_s:.2f}")


def cross_check(sb: Sandbox, *, host: str, container: str, url: str, engines: Sequence[str], model: str,
                input_len: int, output_len: int, concurrency: int, requests: int,
                aiperf: Callable[[], Mapping[str, Any]]) -> tuple[ClientRun, ClientRun]:  # fmt: skip
    """``vllm bench serve`` (in ``container`` on ``host``, loading ``url``) and then ``aiperf``
    (a run of fleet's aiperf path at the same shape, concurrency and requests, returning its
    export), back to back, each within its own reading of ``engines``; asserts :func:`check` for
    each and prints both against the engine and against each other.  Returns (vllm, aiperf)."""
    argv = vllm_bench_argv(base_url=url, model=model, tokenizer="/models/tiny", input_len=input_len,
                           output_len=output_len, concurrency=concurrency, requests=requests,
                           seed=int(time.time()) % 100000, result_dir="/tmp/fleet-xcheck",
                           result_file=f"run-{time.time_ns()}.json")  # fmt: skip
    t0 = time.monotonic()
    doc, vllm_engine = over_run(engines, requests, lambda: run_vllm_bench(sb, host, container, argv))
    vllm = from_vllm_bench(doc)
    t1 = time.monotonic()
    export, aiperf_engine = over_run(engines, requests, aiperf)
    ours = from_aiperf(export)
    print(f"cross-check at {input_len}+{output_len}, concurrency {concurrency}, {requests} requests "
          f"(vllm bench serve {t1 - t0:.1f}s, aiperf {time.monotonic() - t1:.1f}s):\n  {summary(vllm, vllm_engine)}\n"
          f"  {summary(ours, aiperf_engine)}\n  {ratios(vllm, ours)}")  # fmt: skip
    # per request, vllm bench serve's TTFT and its decode window (the gaps after the first chunk)
    print("  vllm bench serve per request (TTFT, decode) s: "
          + ", ".join(f"({t:.3f}, {sum(g):.3f})" for t, g in zip(doc.get("ttfts", ()), doc.get("itls", ()))))
    problems = [f"{c.client}: {p}" for c, e in ((vllm, vllm_engine), (ours, aiperf_engine))
                for p in check(c, e, requests, output_len)]  # fmt: skip
    assert problems == [], problems
    return vllm, ours
