# Run a start under the deploy lock (launcher/deploy/lock.py serial_argv):
# sh -c <lock-safe.sh + this> sh LOCK_DIR OWNER_LINE STEP WAIT_S ARGV...
# Runs ARGV only while OWNER_LINE holds the lock and STEP is not fenced off, with the lock
# directory's `ops` file flock'ed for its whole run: the command inherits the locked descriptor
# (shells exec the last command of `sh -c`; closing it there would drop the lock; docker and
# systemd start the unit's processes themselves, so none of them inherits it).  A missing
# directory ends the script before `exec` could (a failed redirection of `exec` would exit the
# shell anyway).  Exit 75: nothing was run.
d=$1 o=$2 t=$3 w=$4; shift 4
command -v flock >/dev/null 2>&1 || { echo "flock not found (util-linux): fleet needs it to start units" >&2; exit 127; }
[ -d "$d" ] || { echo "not started: the deploy lock $d is gone" >&2; exit 75; }
chain "$d"
exec 9>>"$d/ops"
flock -w "$w" 9 || { echo "not started: another start of this deployment still runs on this host after ${w}s (left by an interrupted run?)" >&2; exit 75; }
held=; IFS= read -r held 2>/dev/null <"$d/owner"
[ "$held" = "$o" ] || { echo "not started: this run no longer holds the deploy lock $d" >&2; exit 75; }
f=; IFS= read -r f 2>/dev/null <"$d/fence"
[ "$f" != "$t" ] || { echo "not started: its start step was cancelled" >&2; exit 75; }
"$@"
