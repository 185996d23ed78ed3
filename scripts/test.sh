#!/usr/bin/env bash
# The test command (README): type-check the library, then every test tier.  Tests that need
# root-only facilities (network namespaces, dockerd) bring them up themselves.
#
# The sandbox tier (mostly waiting on its fake hosts and their stand-in engines) runs beside the
# other tiers, in a second pytest process, so the whole suite fits CI's time budget on two cores.
# The real-engine tier (the real vLLM's CPU build on sandbox hosts: long cold starts, its own
# sandbox) runs beside both in a third process, niced so the timing-sensitive tiers keep the CPU.
# Each process prints its own summary (the others' after the sandbox tier's); the exit status is
# the first failing one's.  A process that selects no test (a path argument that holds only one
# kind) counts as passed.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "scripts/test.sh: run as root (sudo -i, then this command again)" >&2
  exit 1
fi
cd "$(dirname "$0")/.."
python3 -m mypy launcher/
others_log=$(mktemp)
real_log=$(mktemp)
trap 'rm -f "$others_log" "$real_log"' EXIT
# A background job of a non-interactive shell starts with SIGINT ignored, and an ignored signal
# stays ignored across exec; tests deliver SIGINT to pytest's own process (Ctrl-C handling), so
# SIGINT is handled before the exec, which makes it the default again in pytest.
python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); os.execvp(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[1:]])' \
  -q -rs --durations=15 -m "not sandbox and not real_engine" "$@" >"$others_log" 2>&1 &
others=$!
nice -n 5 python3 -m pytest -q -rs --durations=15 -m real_engine "$@" >"$real_log" 2>&1 &
real=$!
sandbox_rc=0
python3 -m pytest -q -rs --durations=30 -m sandbox "$@" || sandbox_rc=$?
others_rc=0
wait "$others" || others_rc=$?
real_rc=0
wait "$real" || real_rc=$?
echo
echo "=== the other tiers (-m 'not sandbox and not real_engine'), run alongside:"
cat "$others_log"
echo
echo "=== the real-engine tier (-m real_engine), run alongside:"
cat "$real_log"
# 5: pytest selected no test -- passes as long as some process ran tests.
if [ "$sandbox_rc" -ne 5 ] || [ "$others_rc" -ne 5 ] || [ "$real_rc" -ne 5 ]; then
  [ "$sandbox_rc" -eq 5 ] && sandbox_rc=0
  [ "$others_rc" -eq 5 ] && others_rc=0
  [ "$real_rc" -eq 5 ] && real_rc=0
fi
if [ "$sandbox_rc" -ne 0 ]; then exit "$sandbox_rc"; fi
if [ "$others_rc" -ne 0 ]; then exit "$others_rc"; fi
exit "$real_rc"
