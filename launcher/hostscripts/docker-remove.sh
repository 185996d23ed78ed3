# Remove a docker unit (launcher/render.py UnitCommands.remove): sh -c <this> sh NAME GRACE_S.
# Stops the container with SIGTERM and GRACE_S seconds to drain first (if GRACE_S is not empty),
# then removes it.  A container that is gone already is fine.
if [ -n "$2" ]; then docker stop -t "$2" "$1" >/dev/null 2>&1; fi
out=$(docker rm -f "$1" 2>&1) || case "$out" in
  *"No such container"*) ;;
  *) printf "%s\n" "$out" >&2; exit 1 ;;
esac
