# fleet health wait (launcher/deploy/wait.py): the host polls its own units and answers when
# they are up or one died.  Run as: sh -c <this> sh WINDOW_S STEP_S PROBE_TIMEOUT_S RUNTIME_ARGS...
# then one triple per unit: its runtime's name, the runtime's name of the unit, health URL ("" for
# none).  wait.py puts every runtime's section (hostscripts/wait-<runtime>.sh: it takes its own
# RUNTIME_ARGS, in the registry's order, and defines live_<runtime> NAME...) where the line
# "# runtime sections" is.  IFS is a newline and globbing is off, so the name lists expand to
# exactly one word per name (names never hold a newline); URLs are only ever used quoted.
w=$1 step=$2 pt=$3; shift 3
nl='
'
IFS=$nl; set -f
# runtime sections
all='' rts='' n=0 url='' k=0 rt=''
for a; do
  case $k in
  0) rt=$a
     case $nl$rts in *"$nl$rt$nl"*) ;; *) rts=$rts$rt$nl ;; esac ;;
  1) all=$all$rt' '$a$nl; n=$((n+1)) ;;
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
  bad=0 up=0 seen=0 rep=''
  for rn in $rts; do
    ns=''
    for u in $all; do
      case $u in "$rn "*) ns=$ns${u#"$rn "}$nl ;; esac
    done
    out=''
    # shellcheck disable=SC2086 # one word per name: IFS is a newline, globbing off
    "live_$rn" $ns
    rep=$rep"fleet-wait:$rn$nl$out$nl"
  done
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
printf '%s%sfleet-wait:end\n' "$rep" "$res"
