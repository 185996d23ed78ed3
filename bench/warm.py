"""What ``fleet weights warm`` saves on the REAL engine's cold start: ``fleet up`` of
``playbooks/sandbox/real-single.yaml`` (vLLM's CPU build on one sandbox host) reading a model
whose pages were evicted vs one ``fleet weights warm`` read into the page cache first.

    sudo python3 bench/warm.py [--runs 2] [--layers 8]

The sandbox's generated model is ~5 MB, too small to show anything, so a larger Llama of the
same shape family is written here (``--layers`` of hidden 1024 / intermediate 4096, random bf16
weights, the tiny model's tokenizer and chat template; ~30 MB per layer) to the host's models
dir as ``big``, and the playbook is the sandbox one with ``model: /models/big``.  Per run, in
turn: (a) evicted: ``fleet down``, the model's pages written back and evicted (``vmtouch -e`` on
that dir only, never the machine's whole cache), ``fleet up``; (b) warmed: the same, then
``fleet up --warm`` (preflight, then ``fleet weights warm``, then the deploy: its time includes
the reading).  Measured: ``fleet up`` to all-healthy, and vLLM's own "Loading weights took" line.  An untimed
first ``fleet up`` fills the host's compile cache.  Nothing is asserted; results go to
bench/results/warm-*.json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, fleet, fmt_s, loadavg, machine, median, require_root, run_timed, write_results  # noqa: E402

PLAYBOOK = REPO / "playbooks/sandbox/real-single.yaml"
UNIT = "fleet-sb-real-single-single0-r0"
HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM = 1024, 4096, 16, 4, 64
_WARMED = re.compile(r"fleet: weights warm: 1 host\(s\), (\d+) bytes read")
_LOAD = {"weights_s": re.compile(r"Loading weights took ([\d.]+) seconds")}


def _tile(seed: int) -> bytes:
    """1 MiB of small normal values as bf16 (the top half of each float32), repeated through
    every weight: what vLLM's load reads is what matters here, not what the model says."""
    rng = random.Random(seed)
    f32 = struct.pack(f"<{1 << 19}f", *(rng.gauss(0.0, 0.02) for _ in range(1 << 19)))
    return b"".join(f32[i + 2:i + 4] for i in range(0, len(f32), 4))


def _weights(n: int, tile: bytes) -> bytes:
    return (tile * (n // len(tile) + 1))[:n]


def write_model(tiny: Path, out: Path, layers: int) -> int:
    """A Llama of ``layers`` layers with the tiny model's tokenizer; returns its bytes."""
    out.mkdir(parents=True)
    for src in tiny.iterdir():
        if src.suffix != ".safetensors":
            shutil.copy(src, out / src.name)
    config = json.loads((tiny / "config.json").read_text())
    config.update(hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=HEADS,
                  num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, num_hidden_layers=layers)  # fmt: skip
    (out / "config.json").write_text(json.dumps(config, indent=2))
    vocab = config["vocab_size"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, HIDDEN), "model.norm.weight": (HIDDEN,),
                                          "lm_head.weight": (vocab, HIDDEN)}  # fmt: skip
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
                   p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
                   p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
                   p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
                   p + "mlp.gate_proj.weight": (INTER, HIDDEN), p + "mlp.up_proj.weight": (INTER, HIDDEN),
                   p + "mlp.down_proj.weight": (HIDDEN, INTER),
                   p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,)}  # fmt: skip
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        n = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    tile, one = _tile(20261201), struct.pack("<H", 0x3F80)  # bf16 1.0 for the norms
    with (out / "model.safetensors").open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, shape in shapes.items():
            n = math.prod(shape)
            f.write(one * n if name.endswith("norm.weight") else _weights(2 * n, tile))
    return sum(p.stat().st_size for p in out.iterdir())


def _evict(model: Path) -> None:
    files = [str(p) for p in model.iterdir()]
    subprocess.run(["sync", "--", *files], check=True)  # only clean pages can be dropped
    subprocess.run(["vmtouch", "-q", "-e", str(model)], check=True)


def _resident(model: Path) -> int:
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *map(str, model.iterdir())], check=True,
                         capture_output=True, text=True)  # fmt: skip
    return sum(int(x) for x in out.stdout.split())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--name", default="wwarm", help="sandbox name")
    args = ap.parse_args()
    require_root()
    from launcher.sandbox import fleet as sandbox
    from launcher.sandbox.client import Sandbox

    st = sandbox.up(args.name, 1, docker=True, real_engine=True)
    sb = Sandbox(st)
    common = ("-i", st.inventory, "--known-hosts", st.known_hosts)
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="fleet-bench-warm-") as tmp:
        pb = Path(tmp) / "real-big.yaml"
        # The larger model's compile warm-up takes minutes more than the tiny one's on a loaded machine.
        pb.write_text(PLAYBOOK.read_text().replace("model: /models/tiny", "model: /models/big")
                      .replace("start_timeout_s: 600", "start_timeout_s: 1800"))
        models = Path(st.hosts[0].dir) / "srv/models"
        size = write_model(models / "tiny", models / "big", args.layers)
        print(f"model: {size / 2**20:.0f} MiB", flush=True)
        try:
            first = run_timed(fleet("up", str(pb), "-q", *common))  # fills the host's compile cache
            assert first.rc == 0, first.stdout + first.stderr
            print(f"first fleet up (cold compile cache): {fmt_s(first.wall_s)}", flush=True)
            for _ in range(args.runs):
                for mode in ("evicted", "warmed"):
                    run_timed(fleet("down", str(pb), "-q", *common))
                    _evict(models / "big")
                    row: dict[str, object] = {"mode": mode, "load": loadavg(),
                                              "resident_before": _resident(models / "big")}
                    t = run_timed(fleet("up", str(pb), "-q", *common, *(("--warm",) if mode == "warmed" else ())))
                    assert t.rc == 0, t.stdout + t.stderr
                    row["up_s"] = round(t.wall_s, 2)
                    m = _WARMED.search(t.stderr)
                    row["warm_bytes_read"] = int(m.group(1)) if m else None
                    logs = sb.ssh("h1", f"docker logs {UNIT} 2>&1").out
                    for key, rx in _LOAD.items():
                        m = rx.search(logs)
                        row[key] = float(m.group(1)) if m else None
                    rows.append(row)
                    print(row, flush=True)
        finally:
            run_timed(fleet("down", str(pb), "-q", *common))
            sb.close()
            sandbox.down(args.name)
    for mode in ("evicted", "warmed"):
        mine = [r for r in rows if r["mode"] == mode]
        print(f"{mode}: fleet up median {fmt_s(median([float(r['up_s']) for r in mine]))}, "  # type: ignore[arg-type]
              f"vLLM weights load {[r['weights_s'] for r in mine]}")
    print(write_results("warm", {"machine": machine(), "model_bytes": size, "layers": args.layers,
                                 "first_up_s": first.wall_s, "runs": rows}))  # fmt: skip


if __name__ == "__main__":
    main()
