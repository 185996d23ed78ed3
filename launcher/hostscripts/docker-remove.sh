# Remove a docker unit (launcher/render.py UnitCommands.remove): sh -c <this> sh NAME GRACE_S.
# Stops the container with SIGTERM and GRACE_S seconds to drain first (if GRACE_S is not empty),
# then removes it.  A container that is gone already is fine.
# dockerd sends SIGKILL and then waits a bounded time for containerd's exit event; on a loaded host
# the event can come later than that ("tried to kill container, but did not receive an exit
# event": the official CI of dc96fbf, load ~90), so the removal is tried again, 5 times 2 s apart.
# A process that never exits (uninterruptible, e.g. in a hung device driver) still fails, with
# dockerd's own line.
if [ -n "$2" ]; then docker stop -t "$2" "$1" >/dev/null 2>&1; fi
tries=0
until out=$(docker rm -f "$1" 2>&1); do
  case "$out" in
    *"No such container"*) exit 0 ;;
    *"did not receive an exit event"*) [ "$tries" -lt 5 ] || { printf "%s\n" "$out" >&2; exit 1; } ;;
    *) printf "%s\n" "$out" >&2; exit 1 ;;
  esac
  tries=$((tries + 1))
  sleep 2
done
