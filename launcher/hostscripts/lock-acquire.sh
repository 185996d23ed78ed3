# Take the deploy lock (launcher/deploy/lock.py): sh -c <this> sh LOCK_ROOT LOCK_DIR OWNER_LINE.
# Exit 127 without flock (checked first: without it no start could run, and a restart would have
# stopped the running generation already); exit 75 and the holder's owner line when held.
command -v flock >/dev/null 2>&1 || exit 127
mkdir -p "$1" &&
if mkdir -m 0755 "$2" 2>/dev/null; then printf "%s\n" "$3" > "$2/owner"
else cat "$2/owner" 2>/dev/null || echo "(no owner file)"; exit 75; fi
