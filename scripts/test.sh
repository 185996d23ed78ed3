#!/usr/bin/env bash
# The test command (README): type-check the library, then every test tier.  Tests that need
# root-only facilities (network namespaces, dockerd) bring them up themselves.
#
# The sandbox tier (mostly waiting on its fake hosts and their stand-in engines) runs beside the
# other tiers, in a second pytest process, so the whole suite fits CI's time budget on two cores.
# Each process prints its own summary (the other tiers' after the sandbox tier's); the exit
# status is the first failing one's.  A process that selects no test (a path argument that holds
# only one kind) counts as passed.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "scripts/test.sh: run as root (sudo -i, then this command again)" >&2
  exit 1
fi
cd "$(dirname "$0")/.."
python3 -m mypy launcher/
others_log=$(mktemp)
trap 'rm -f "$others_log"' EXIT
# A background job of a non-interactive shell starts with SIGINT ignored, and an ignored signal
# stays ignored across exec; tests deliver SIGINT to pytest's own process (Ctrl-C handling), so
# SIGINT is handled before the exec, which makes it the default again in pytest.
python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); os.execvp(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[1:]])' \
  -q -rs --durations=15 -m "not sandbox" "$@" >"$others_log" 2>&1 &
others=$!
sandbox_rc=0
python3 -m pytest -q -rs --durations=30 -m sandbox "$@" || sandbox_rc=$?
others_rc=0
wait "$others" || others_rc=$?
echo
echo "=== the other tiers (-m 'not sandbox'), run alongside:"
cat "$others_log"
[ "$sandbox_rc" -eq 5 ] && [ "$others_rc" -ne 5 ] && sandbox_rc=0  # 5: pytest selected no test
[ "$others_rc" -eq 5 ] && [ "$sandbox_rc" -ne 5 ] && others_rc=0
if [ "$sandbox_rc" -ne 0 ]; then exit "$sandbox_rc"; fi
exit "$others_rc"
