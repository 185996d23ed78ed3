# Keep a unit's current files as its previous generation (launcher/deploy/steps.py rotate_argv):
# sh -c <this> sh UNIT_DIR FILE...  UNIT_DIR/prev/ (0700) gets a copy of each FILE that exists,
# under its absolute path, and the manifest moves there.
d=$1; shift
rm -rf "$d/prev" && mkdir -p "$d" && mkdir -m 0700 "$d/prev" || exit 1
for f in "$@"; do
  [ -f "$f" ] || continue
  mkdir -p "$d/prev$(dirname "$f")" && cp -p "$f" "$d/prev$f" || exit 1
done
if [ -f "$d/manifest.json" ]; then mv "$d/manifest.json" "$d/prev/manifest.json"; fi
