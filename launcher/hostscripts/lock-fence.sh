# Wait for the starts running under the lock, then fence off the rest of step STEP:
# sh -c <lock-safe.sh + this> sh LOCK_DIR STEP WAIT_S
d=$1 t=$2 w=$3; [ -d "$d" ] || exit 0
command -v flock >/dev/null 2>&1 || { echo "flock not found (util-linux)" >&2; exit 127; }
chain "$d"
exec 9>>"$d/ops"
flock -w "$w" 9 || { echo "a start is still running after ${w}s; its unit may come up later" >&2; exit 1; }
printf "%s\n" "$t" >"$d/fence"
