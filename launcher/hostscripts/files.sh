# Commands, removals and atomic file writes in one exec (launcher/execute/files.py):
# sh -c <this> fleet-files BOUNDARY N; per command: its argc, its argv; then the number of
# removals and the paths; then per file: path, mode (octal), length; the files' bytes on stdin,
# one after another.  Markers "\n<boundary> ...\n" frame each command's stdout/stderr and say
# which write/removal is under way, so the caller can split the streams and name what failed.
# run_first runs the first K of its arguments (POSIX sh has no arrays: rebuild "$@" from the
# loop's frozen word list).  Temp files carry transport.PUT_TEMP_PREFIX.
b=$1 n=$2; shift 2
run_first() {
  k=$1; shift; i=0
  for a do shift; if [ "$i" -lt "$k" ]; then set -- "$@" "$a"; fi; i=$((i+1)); done
  "$@" </dev/null
}
s=0
while [ "$s" -lt "$n" ]; do
  s=$((s+1)); k=$1; shift
  run_first "$k" "$@"; rc=$?
  printf '\n%s step %s %s\n' "$b" "$s" "$rc"; printf '\n%s step %s\n' "$b" "$s" >&2
  [ "$rc" -eq 0 ] || exit "$rc"
  shift "$k"
done
m=$1; shift; s=0
while [ "$s" -lt "$m" ]; do
  s=$((s+1)); printf '\n%s rm %s\n' "$b" "$s"
  rm -f -- "$1" || exit; shift
done
if dd if=/dev/null of=/dev/null iflag=fullblock 2>/dev/null; then full=1; else full=; fi
copy() {
  if [ -z "$full" ]; then [ "$1" -eq 0 ] || dd bs=1 count="$1"; return; fi
  q=$(($1 / 65536)) rest=$(($1 % 65536))
  if [ "$q" -gt 0 ]; then dd bs=65536 count="$q" iflag=fullblock || return; fi
  if [ "$rest" -gt 0 ]; then dd bs="$rest" count=1 iflag=fullblock || return; fi
}
tmp=
trap 'if [ -n "$tmp" ]; then rm -f -- "$tmp"; fi' EXIT
trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM
s=0 made=
while [ "$#" -gt 0 ]; do
  s=$((s+1)); dest=$1 mode=$2 len=$3; shift 3
  printf '\n%s put %s\n' "$b" "$s"
  dir=${dest%/*}; dir=${dir:-/}
  if [ "$dir" != "$made" ]; then mkdir -p -- "$dir" || exit; made=$dir; fi
  tmp=$(mktemp "$dir/.fleet-put.XXXXXX") || exit
  chmod "$mode" "$tmp" || exit
  err=$(copy "$len" 2>&1 >"$tmp") || { printf '%s\n' "$err" >&2; exit 1; }
  got=$(wc -c <"$tmp") || exit
  [ "$((got))" -eq "$len" ] || { echo "short input: $((got)) of $len bytes" >&2; exit 1; }
  mv -f -- "$tmp" "$dest" || exit
  tmp=
done
printf '\n%s done\n' "$b"
