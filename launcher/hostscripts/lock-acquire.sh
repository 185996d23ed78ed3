# Take the deploy lock (launcher/deploy/lock.py): sh -c <this> sh LOCK_ROOT LOCK_DIR OWNER_LINE.
# Exit 127 without flock (checked first: without it no start could run, and a restart would have
# stopped the running generation already); exit 75 and the holder's owner line when held.
# LOCK_ROOT sits in a world-writable directory (/run/lock): it, and a LOCK_DIR found there, must
# be a real directory (not a symlink) owned by the connecting user and writable by no one else,
# else exit 77 with the reason on stderr and nothing written (another local user could swap what
# is inside it).  Inside such a directory only this user can create entries.
command -v flock >/dev/null 2>&1 || exit 127
u=$(id -u) || exit 1
safe() {
  [ ! -L "$1" ] || { echo "$1 is a symlink" >&2; exit 77; }
  m=$(stat -c "%u %a" "$1") || exit 1
  [ "${m%% *}" = "$u" ] || { echo "$1 is owned by uid ${m%% *}, not by the connecting user (uid $u)" >&2; exit 77; }
  [ $((0${m#* } & 022)) -eq 0 ] || { echo "$1 is writable by others (mode ${m#* })" >&2; exit 77; }
}
mkdir -p "${1%/*}" && { [ -e "$1" ] || [ -L "$1" ] || mkdir -m 0755 "$1" 2>/dev/null || [ -d "$1" ]; } || exit 1
safe "$1"
if mkdir -m 0755 "$2" 2>/dev/null; then printf "%s\n" "$3" > "$2/owner"
else safe "$2"; cat "$2/owner" 2>/dev/null || echo "(no owner file)"; exit 75; fi
