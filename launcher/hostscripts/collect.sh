# fleet collect (launcher/preflight/collect.py): one host's evidence as a tar.gz on stdout.
# sh -c <this> fleet-collect DEPLOYMENT LOG_LINES NCCL_LINES GATHER_SCRIPT FLEET_ROOT SYSTEMD_DIR MAX_BYTES
# Everything goes to files in a private temp dir (removed on exit); stdout carries only the
# final tar.gz, at most MAX_BYTES of it; secrets.env files never enter it.
set -u
D=$1 N=$2 NL=$3 GATHER=$4 R=$5 SD=$6 MAXB=$7
base=$(mktemp -d "${TMPDIR:-/tmp}/fleet-collect.XXXXXX") || { echo "mktemp failed" >&2; exit 1; }
trap 'rm -rf "$base"' EXIT
exec 3>&1 >"$base/collect.log" 2>&1
out=$base/out
mkdir -p "$out/host" "$out/units"
cd "$out" || exit 1
run() { f=$1; shift; { "$@"; } >"$f" 2>&1 || echo "(exit $?)" >>"$f"; }
run host/facts.txt sh -c "$GATHER"
if command -v show_gids >/dev/null 2>&1; then run host/show_gids.txt show_gids; fi
if command -v ibv_devinfo >/dev/null 2>&1; then run host/ibv_devinfo.txt ibv_devinfo -v; fi
if command -v nvidia-smi >/dev/null 2>&1; then
  run host/nvidia-smi.txt nvidia-smi
  run host/nvidia-smi-topo.txt nvidia-smi topo -m
fi
if command -v npu-smi >/dev/null 2>&1; then run host/npu-smi.txt npu-smi info; fi
run host/ip-addr.txt ip -d addr show
run host/ip-route.txt ip route show
run host/dmesg-tail.txt sh -c 'dmesg -T 2>/dev/null | tail -n 500 || dmesg | tail -n 500'
if command -v docker >/dev/null 2>&1; then
  run host/docker-ps.txt docker ps -a --filter "label=fleet.deployment=$D" --format '{{.Names}}\t{{.Status}}\t{{.Image}}'
  cnames=$(docker ps -a --filter "label=fleet.deployment=$D" --format '{{.Names}}' 2>/dev/null)
else
  cnames=
fi
dnames=
if [ -d "$R/$D" ]; then dnames=$(ls -1 "$R/$D" 2>/dev/null); fi
if [ -f "$R/gateway/$D.conf" ]; then mkdir -p host/files && cp "$R/gateway/$D.conf" host/files/; fi
for u in $(printf '%s\n%s\n' "$cnames" "$dnames" | sort -u); do
  case "$u" in ''|.*|*[!A-Za-z0-9_.-]*) continue;; esac
  d=units/$u
  mkdir -p "$d"
  envf=$R/$D/$u/env
  if docker inspect "$u" >"$d/docker-inspect.json" 2>/dev/null; then
    run "$d/docker-logs.txt" docker logs --timestamps --tail "$N" "$u"
    if grep -q '^NCCL_DEBUG=' "$envf" 2>/dev/null || grep -q '"NCCL_DEBUG=' "$d/docker-inspect.json"; then
      docker logs "$u" 2>&1 | grep -E 'NCCL (INFO|WARN|ERROR)|NCCL_' | tail -n "$NL" >"$d/nccl.log"
      ndf=$(sed -n 's/^NCCL_DEBUG_FILE=//p' "$envf" 2>/dev/null | tail -n 1 | tr -d "'\"")
      case "$ndf" in
      ''|*'*'*|*'?'*|*'['*|*/..|*/../*|../*) [ -z "$ndf" ] || echo "not collected: NCCL_DEBUG_FILE=$ndf holds wildcards or '..'" >"$d/nccl-debug-files.txt" ;;
      *)
        # Only the unit's own log files: NCCL's %h/%p become '*' in the file name (find -name, no
        # shell glob), in the value's directory as the container resolves it, which must be
        # under /tmp, /var/tmp or /var/log or be its working directory (never /, /proc, /sys ...);
        # regular files only, each's last NL lines.  Values reach the container's shell as data.
        case "$ndf" in */*) dir=${ndf%/*}; dir=${dir:-/} ;; *) dir=. ;; esac
        pat=$(printf '%s' "${ndf##*/}" | sed 's/%[a-z]/*/g')
        # shellcheck disable=SC2016 # the single-quoted text is the container shell's
        run "$d/nccl-debug-files.txt" docker exec "$u" sh -c '
          w=$(pwd -P); cd "$1" 2>/dev/null || exit 0; r=$(pwd -P)
          case "$r" in /tmp|/tmp/*|/var/tmp|/var/tmp/*|/var/log|/var/log/*) ;;
          *) [ "$r" = "$w" ] && [ "$r" != / ] || { echo "not collected: $1 is $r, not a log directory"; exit 0; } ;; esac
          find . -maxdepth 1 -type f -name "$2" -exec sh -c '"'"'n=$1; shift; for f; do echo "== $0/${f#./}"; tail -n "$n" "$f"; done'"'"' "$r" "$3" {} +
        ' fleet-nccl "$dir" "$pat" "$NL"
        ;;
      esac
    fi
  else
    rm -f "$d/docker-inspect.json"
  fi
  if [ -f "$SD/$u.service" ]; then
    run "$d/journal.txt" journalctl -u "$u.service" -n "$N" --no-pager -o short-iso
    run "$d/systemctl-status.txt" systemctl status "$u.service" --no-pager -l
    mkdir -p "$d/files$SD" && cp "$SD/$u.service" "$d/files$SD/"
  fi
  if [ -d "$R/$D/$u" ]; then
    mkdir -p "$d/files$R/$D"
    tar -C "$R/$D" -cf - --exclude='secrets.env*' "$u" | tar -C "$d/files$R/$D" -xf -
  fi
done
find . -name 'secrets.env*' -exec rm -f {} + 2>/dev/null
cp "$base/collect.log" ./collect.log 2>/dev/null
tar -czf - . | head -c "$MAXB" >&3
