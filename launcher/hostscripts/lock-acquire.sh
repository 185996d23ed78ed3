# Take the deploy lock (launcher/deploy/lock.py): sh -c <lock-safe.sh + this> sh LOCK_ROOT LOCK_DIR OWNER_LINE.
# Exit 127 without flock (checked first: without it no start could run, and a restart would have
# stopped the running generation already); exit 75 and the holder's owner line when held; exit
# 73 when LOCK_ROOT cannot be made (only root can create entries in /run); exit 77 (see
# lock-safe.sh) and nothing written when a path on the way could be changed by someone else.
command -v flock >/dev/null 2>&1 || exit 127
chain "$2"
for d in "${1%/*}" "$1"; do
  [ -e "$d" ] || [ -L "$d" ] || mkdir -m 0755 "$d" 2>/dev/null || [ -d "$d" ] ||
    { echo "cannot create $d: fleet keeps its host state there; connect as root, or have root make it (mode 0755) for uid $(id -u)" >&2; exit 73; }
  owned "$d"
done
if mkdir -m 0755 "$2" 2>/dev/null; then printf "%s\n" "$3" > "$2/owner"
else owned "$2"; cat "$2/owner" 2>/dev/null || echo "(no owner file)"; exit 75; fi
