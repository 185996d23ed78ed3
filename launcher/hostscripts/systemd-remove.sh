# Remove a native unit (launcher/render.py UnitCommands.remove): sh -c <this> sh SERVICE.
# Stops and disables it, so a reboot does not bring it back.  A unit that is gone already is fine.
out=$(systemctl disable --now "$1" 2>&1) || case "$out" in
  *"not loaded"*|*"does not exist"*|*"not found"*) ;;
  *) printf "%s\n" "$out" >&2; exit 1 ;;
esac
