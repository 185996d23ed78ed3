# Atomic write of stdin on the host (launcher/execute/transport.py put_command):
# sh -c <this> fleet-put DEST MODE.  mktemp creates the temp file 0600 in the destination's own
# directory (so the rename is atomic; its prefix is transport.PUT_TEMP_PREFIX); chmod sets the
# final mode while the file is still empty, so the content is never more readable than the final
# mode allows, not even briefly.
set -eu
dest=$1; mode=$2
dir=$(dirname -- "$dest")
mkdir -p -- "$dir"
tmp=$(mktemp "$dir/.fleet-put.XXXXXX")
trap 'rm -f -- "$tmp"' EXIT
chmod "$mode" "$tmp"
cat > "$tmp"
mv -f -- "$tmp" "$dest"
trap - EXIT
