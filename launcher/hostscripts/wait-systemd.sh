# fleet health wait, systemd's section (launcher/runtimes/systemd.py; wait.sh runs it): takes no
# argument; defines live_systemd NAME..., which reads the services' liveness into $out and
# counts them into up/seen/bad (a failing systemctl ends the wait, its answer on stderr).
# shellcheck disable=SC2034 # bad (like up, seen and out) is wait.sh's: it reads them
live_systemd() {
  out=$(systemctl show --property=Id,ActiveState,SubState,ExecMainStatus,NRestarts,LoadState "$@" 2>&1) || {
    st=$?; printf 'systemctl show: %s\n' "$out" >&2; exit "$st"; }
  for line in $out; do
    case $line in
    ActiveState=active) up=$((up+1)) seen=$((seen+1)) ;;
    ActiveState=activating) seen=$((seen+1)) ;;
    ActiveState=*) bad=1 seen=$((seen+1)) ;;
    SubState=auto-restart|LoadState=not-found) bad=1 ;;
    NRestarts=|NRestarts=0) ;;
    NRestarts=*) bad=1 ;;
    esac
  done
}
