#!/usr/bin/env bash
# The test command (README): type-check the library, then every test tier.  Tests that need
# root-only facilities (network namespaces, dockerd) bring them up themselves.
#
# The sandbox tier (mostly waiting on its fake hosts and their stand-in engines) runs beside the
# other tiers, in two pytest processes of its own (each with its own sandbox fleet: the fault and
# interrupt modules in one, the rest in the other), so the whole suite fits CI's time budget on
# two cores.
# The real-engine tier (the real vLLM's CPU build on sandbox hosts: long cold starts, its own
# sandboxes) runs beside them in two more processes, niced so the timing-sensitive tiers keep the
# CPU.  With path arguments, each tier is one process over those paths.
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
pytest_sigint() {
  python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); os.execvp(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[1:]])' "$@"
}
pytest_sigint -q -rfEs --durations=15 -m "not sandbox and not real_engine" "$@" >"$others_log" 2>&1 &
others=$!
# The real-engine tier: the prefill/decode module (its own 19-host sandbox, the cohort roll) with
# the single module in one process, PP2, systemd and the router modules in another (the first
# took 41 min in CI's last run with the router module in it), so one's cold starts overlap the
# other's waits.
pd=(tests/real_engine/test_real_pd.py tests/real_engine/test_real_single.py)
pd_log=$(mktemp)
pd_rc=5
if [ "$#" -eq 0 ]; then
  nice -n 5 python3 -m pytest -q -rfEs --durations=15 -m real_engine "${pd[@]}" >"$pd_log" 2>&1 &
  pd_pid=$!
  pd_ignores=()
  for f in "${pd[@]}"; do pd_ignores+=(--ignore "$f"); done
  nice -n 5 python3 -m pytest -q -rfEs --durations=15 -m real_engine "${pd_ignores[@]}" tests >"$real_log" 2>&1 &
else
  nice -n 5 python3 -m pytest -q -rfEs --durations=15 -m real_engine "$@" >"$real_log" 2>&1 &
fi
real=$!
# The fault, interrupt, lock, watch, check and PD-canary modules: mostly waiting on hosts they
# break, pause or cut off (balanced against the rest by measured time).
faults=(tests/deploy/test_sandbox_faults.py tests/weights/test_sandbox_faults.py
  tests/deploy/test_sandbox_interrupt.py tests/rolling/test_sandbox_rolling_interrupt.py
  tests/rolling/test_sandbox_pd_interrupt.py tests/deploy/test_sandbox_lock.py tests/watch
  tests/deploy/test_sandbox_check.py tests/deploy/test_sandbox_pd_canary.py)
faults_log=$(mktemp)
trap 'rm -f "$others_log" "$real_log" "$faults_log" "$pd_log"' EXIT
faults_rc=0
if [ "$#" -eq 0 ]; then
  pytest_sigint -q -rfEs --durations=15 -m sandbox "${faults[@]}" >"$faults_log" 2>&1 &
  faults_pid=$!
  ignores=()
  for f in "${faults[@]}"; do ignores+=(--ignore "$f"); done
  sandbox_rc=0
  python3 -m pytest -q -rfEs --durations=30 -m sandbox "${ignores[@]}" tests || sandbox_rc=$?
  wait "$faults_pid" || faults_rc=$?
else
  faults_rc=5
  sandbox_rc=0
  python3 -m pytest -q -rfEs --durations=30 -m sandbox "$@" || sandbox_rc=$?
fi
others_rc=0
wait "$others" || others_rc=$?
real_rc=0
wait "$real" || real_rc=$?
if [ "$#" -eq 0 ]; then
  pd_rc=0
  wait "$pd_pid" || pd_rc=$?
fi
echo
echo "=== the sandbox tier's fault, interrupt, lock, watch, check and PD-canary modules, run alongside:"
cat "$faults_log"
echo
echo "=== the other tiers (-m 'not sandbox and not real_engine'), run alongside:"
cat "$others_log"
echo
echo "=== the real-engine tier (-m real_engine), run alongside:"
cat "$real_log"
if [ "$#" -eq 0 ]; then
  echo
  echo "=== the real-engine tier's prefill/decode and single modules, run alongside:"
  cat "$pd_log"
fi
# 5: pytest selected no test -- passes as long as some process ran tests.
if [ "$sandbox_rc" -ne 5 ] || [ "$faults_rc" -ne 5 ] || [ "$others_rc" -ne 5 ] || [ "$real_rc" -ne 5 ] || [ "$pd_rc" -ne 5 ]; then
  [ "$sandbox_rc" -eq 5 ] && sandbox_rc=0
  [ "$faults_rc" -eq 5 ] && faults_rc=0
  [ "$others_rc" -eq 5 ] && others_rc=0
  [ "$real_rc" -eq 5 ] && real_rc=0
  [ "$pd_rc" -eq 5 ] && pd_rc=0
fi
if [ "$sandbox_rc" -ne 0 ]; then exit "$sandbox_rc"; fi
if [ "$faults_rc" -ne 0 ]; then exit "$faults_rc"; fi
if [ "$others_rc" -ne 0 ]; then exit "$others_rc"; fi
if [ "$real_rc" -ne 0 ]; then exit "$real_rc"; fi
exit "$pd_rc"
