#!/usr/bin/env bash
# Create (or reuse) one venv per engine version holding that engine's real argument parser.
#
# Usage: tools/parser_venvs.sh [NAME ...]      (default: every NAME below)
# Cache: $FLEET_PARSER_CACHE, else /var/cache/fleet-parsers; venv = $CACHE/<NAME>.
# A venv counts as present when its `.complete` marker exists AND
# `tools/snapshot_options.py probe` builds the parser inside it; otherwise it is rebuilt.
# Each build prints "<NAME>: built in <seconds>s (<size>)" so CI logs show the cost; pip's
# output goes to $CACHE/<NAME>.log (its tail is printed when a build fails).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${FLEET_PARSER_CACHE:-/var/cache/fleet-parsers}"
PY="${PYTHON:-python3}"
ALL=(sglang-0.5.23 vllm-0.33.0 vllm-0.30.0 vllm-0.23.0 sglang-router-0.3.2 vllm-router-0.1.17
  mooncake-0.3.13.post1)

# Engine imports must never reach a model hub or guess a GPU.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_TARGET_DEVICE=cpu

# torch==2.13.0 is the CPU build that lies on this machine's disk; any other torch would be a
# multi-GB CUDA download, so every engine that needs torch gets exactly this one.
TORCH=torch==2.13.0
SGLANG_DEPS=(numpy orjson psutil pybase64 requests triton packaging pillow starlette msgspec
  pydantic pyzmq tqdm IPython aiohttp)
VLLM_DEPS=(packaging huggingface_hub regex pydantic numpy cbor2 psutil pyzmq urllib3 transformers
  aiohttp requests openai-harmony openai msgspec cloudpickle pillow pybase64 cachetools uvloop
  py-cpuinfo fastapi prometheus_client partial-json-parser xgrammar llguidance
  gguf)  # gguf: 0.23's cli_args imports it

install() {  # install NAME into venv V; stops at the first failing pip step
  local name="$1" pip=("$2/bin/python" -m pip install -q)
  case "$name" in
    sglang-router-*)
      "${pip[@]}" "sglang-router==${name#sglang-router-}" ;;
    vllm-router-*)  # before vllm-*, which would match it too
      "${pip[@]}" "vllm-router==${name#vllm-router-}" ;;
    sglang-*)
      "${pip[@]}" "$TORCH" &&
        "${pip[@]}" --no-deps "sglang==${name#sglang-}" &&
        "${pip[@]}" "${SGLANG_DEPS[@]}" ;;
    vllm-*)
      "${pip[@]}" "$TORCH" &&
        "${pip[@]}" --no-deps "vllm==${name#vllm-}" &&
        "${pip[@]}" "${VLLM_DEPS[@]}" ;;
    mooncake-*)
      "${pip[@]}" "mooncake-transfer-engine-non-cuda==${name#mooncake-}" ;;
    *) echo "unknown parser venv: $name" >&2; return 2 ;;
  esac
}

probe() {  # true when venv V for NAME builds its parser
  [[ -f "$2/.complete" ]] && "$2/bin/python" "$HERE/snapshot_options.py" probe "$1" >/dev/null 2>&1
}

mkdir -p "$CACHE"
rc=0
for name in "${@:-${ALL[@]}}"; do
  v="$CACHE/$name"
  if probe "$name" "$v"; then
    echo "$name: present ($(du -sh "$v" | cut -f1))"
    continue
  fi
  rm -rf "$v"
  start=$SECONDS
  if { "$PY" -m venv "$v" && install "$name" "$v"; } >"$CACHE/$name.log" 2>&1 \
    && touch "$v/.complete" && probe "$name" "$v"; then
    echo "$name: built in $((SECONDS - start))s ($(du -sh "$v" | cut -f1))"
  else
    echo "$name: FAILED after $((SECONDS - start))s; tail of $CACHE/$name.log:" >&2
    grep -v '^WARNING: Location' "$CACHE/$name.log" | tail -n 20 >&2
    rm -f "$v/.complete"
    rc=1
  fi
done
exit $rc
