# Swap a unit's previous generation back in (launcher/rolling/restore.py):
# sh -c <this> sh UNIT_DIR N CURRENT_FILE(N of them)... PREVIOUS_FILE...
# The current files (and manifest) go to UNIT_DIR/next/, the previous ones kept in prev/ become
# current, current files the previous generation does not have are removed, and next/ becomes
# prev/: swapping twice goes forward again.  Exit 3 when no previous generation is kept.
d=$1; n=$2; shift 2
[ -f "$d/prev/manifest.json" ] || { echo "no previous generation kept in $d/prev" >&2; exit 3; }
rm -rf "$d/next" && mkdir -m 0700 "$d/next" || exit 1
i=0
for f in "$@"; do
  i=$((i+1))
  if [ "$i" -le "$n" ]; then
    if [ -f "$f" ]; then mkdir -p "$d/next$(dirname "$f")" && cp -p "$f" "$d/next$f" || exit 1; fi
  else
    if [ -f "$d/prev$f" ]; then mkdir -p "$(dirname "$f")" && cp -p "$d/prev$f" "$f" || exit 1; fi
  fi
done
if [ -f "$d/manifest.json" ]; then mv "$d/manifest.json" "$d/next/manifest.json"; fi
cp -p "$d/prev/manifest.json" "$d/manifest.json" || exit 1
i=0
for f in "$@"; do
  i=$((i+1)); [ "$i" -le "$n" ] || break
  keep=0; j=0
  for g in "$@"; do j=$((j+1)); [ "$j" -gt "$n" ] && [ "$g" = "$f" ] && keep=1; done
  [ "$keep" = 1 ] || rm -f "$f"
done
rm -rf "$d/prev" && mv "$d/next" "$d/prev"
