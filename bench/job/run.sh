#!/bin/sh
# Fan-out benchmark stand-in unit (bench/fanout.py): the same file for fleet, ansible and pyinfra.
# (Re)starts one plain background process with the env file beside this script and records its
# PID; a previous instance is stopped first, as a unit restart would.
set -eu
dir=$(dirname -- "$0")
state=/run/fleet-bench
pidfile=$state/unit.pid
mkdir -p "$state"
if [ -f "$pidfile" ]; then
  old=$(cat "$pidfile")
  if kill -0 "$old" 2>/dev/null; then kill "$old"; fi
fi
set -a
. "$dir/env"
set +a
setsid sleep "$BENCH_UNIT_SECONDS" </dev/null >/dev/null 2>&1 &
echo $! > "$pidfile"
echo "started $BENCH_UNIT_NAME pid $!"
