# fleet health wait (launcher/deploy/wait.py): the host polls its own units and answers when
# they are up or one died.  Run as: sh -c <this> sh WINDOW_S STEP_S PROBE_TIMEOUT_S DOCKER_FORMAT
# then one triple per unit: runtime ("docker"/"systemd"), docker name or systemd service, health
# URL ("" for none).  IFS is a newline and globbing is off, so the name lists expand to exactly
# one word per name (names never hold a newline); URLs are only ever used quoted.
w=$1 step=$2 pt=$3 fmt=$4; shift 4
nl='
'
IFS=$nl; set -f
dn='' sn='' n=0 url='' k=0 rt=''
for a; do
  case $k in
  0) rt=$a ;;
  1) if [ "$rt" = docker ]; then dn=$dn$a$nl; else sn=$sn$a$nl; fi; n=$((n+1)) ;;
  2) if [ -z "$url" ]; then url=$a; fi ;;
  esac
  k=$(((k+1)%3))
done
tool=
if [ -n "$url" ]; then
  for t in curl wget python3; do
    if command -v "$t" >/dev/null 2>&1; then tool=$t; break; fi
  done
  if [ -z "$tool" ]; then echo "none of curl, wget, python3 on this host to probe $url" >&2; exit 127; fi
fi
probe() {
  case $tool in
  curl) curl -fsS -o /dev/null -m "$pt" "$1" ;;
  wget) wget -q -O /dev/null -T "$pt" "$1" ;;
  *) python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2]))' "$1" "$pt" ;;
  esac >/dev/null 2>&1
}
probes() {
  ok=1 res='' j=0
  while [ "$#" -ge 3 ]; do
    if [ -n "$3" ]; then
      if probe "$3"; then r=1; else r=0 ok=0; fi
      res="${res}fleet-wait:probe $j $r$nl"
    fi
    j=$((j+1)); shift 3
  done
}
live() {
  bad=0 up=0 seen=0 dout='' sout=''
  if [ -n "$dn" ]; then
    # shellcheck disable=SC2086 # one word per name: IFS is a newline, globbing off
    dout=$(docker inspect --type container -f "$fmt" $dn 2>&1)
    for line in $dout; do
      case $line in
      /*"|running|"*"|0") up=$((up+1)) seen=$((seen+1)) ;;
      /*"|created|"*"|0") seen=$((seen+1)) ;;
      /*) bad=1 seen=$((seen+1)) ;;
      esac
    done
  fi
  if [ -n "$sn" ]; then
    # shellcheck disable=SC2086 # as above
    sout=$(systemctl show --property=Id,ActiveState,SubState,ExecMainStatus,NRestarts,LoadState $sn 2>&1) || {
      st=$?; printf 'systemctl show: %s\n' "$sout" >&2; exit "$st"; }
    for line in $sout; do
      case $line in
      ActiveState=active) up=$((up+1)) seen=$((seen+1)) ;;
      ActiveState=activating) seen=$((seen+1)) ;;
      ActiveState=*) bad=1 seen=$((seen+1)) ;;
      SubState=auto-restart|LoadState=not-found) bad=1 ;;
      NRestarts=|NRestarts=0) ;;
      NRestarts=*) bad=1 ;;
      esac
    done
  fi
  if [ "$seen" -lt "$n" ]; then bad=1; fi
}
end=$(($(date +%s)+w)) look=0
while :; do
  probes "$@"
  last=0
  if [ "$(date +%s)" -ge "$end" ]; then last=1; fi
  if [ "$ok" = 1 ] || [ "$last" = 1 ] || [ $((look%4)) = 0 ]; then
    live
    if [ "$bad" = 1 ] || [ "$last" = 1 ] || { [ "$ok" = 1 ] && [ "$up" = "$n" ]; }; then break; fi
  fi
  sleep "$step" 2>/dev/null || sleep 1
  look=$((look+1))
done
printf 'fleet-wait:docker\n%s\nfleet-wait:systemd\n%s\n%sfleet-wait:end\n' "$dout" "$sout" "$res"
