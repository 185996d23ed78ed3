# The weights run's keys and run dirs on a host (launcher/weights/auth.py), run as the login user:
#   sh -c <this> weights-keys ROOT begin RUN_ID OWNER TTL_S [LINE...]
#   sh -c <this> weights-keys ROOT end RUN_ID... -- [DIR...]
#   sh -c <this> weights-keys ROOT runs
# ROOT holds the runs' dirs (auth.RUN_DIR_ROOT).
# begin: makes the run dir ROOT/fleet-weights-RUN_ID (0700) with its owner line and the epoch
#   second it expires (now + TTL_S, by this host's clock), removes every other run's dir that
#   has expired (its SSH masters ended first), then appends each LINE to authorized_keys with
#   expiry-time= that second (UTC), so sshd refuses the key afterwards even if no clean-up ran.
#   Prints "RUN_ID OWNER" of every other run dir still there (the caller ends dead runs' with end).
# end: removes the lines of the RUN_IDs, their run dirs (SSH masters ended first) and each DIR.
# runs: prints "RUN_ID OWNER" of every run dir there, changing nothing (a host a run does not
#   touch is swept of dead runs' keys with end).
# Every edit of authorized_keys (also end's) drops the lines tagged fleet-weights-<id> whose run
# dir is gone (a reboot, a run ended) or whose expiry-time has passed.  An edit is safe: under an
# flock of ~/.ssh/.fleet-weights.lock (concurrent runs), through a symlinked authorized_keys into
# the file it leads to (the link stays), every line newline-ended (a last line without one is not
# glued to the next), written to a temporary file beside it and renamed over it, the file's mode
# and owner kept.
set -eu
root=$1 mode=$2
shift 2
umask 077
ssh_dir="$HOME/.ssh"
mkdir -p -- "$ssh_dir"
exec 9>>"$ssh_dir/.fleet-weights.lock"
flock -w 120 9
ak="$ssh_dir/authorized_keys"
now_s=$(date -u +%s)
now=$(date -u -d "@$now_s" +%Y%m%d%H%M%S)

close_masters() {
    for s in "$1"/*.cm-*; do
        [ ! -S "$s" ] || ssh -o ControlPath="$s" -O exit fleet >/dev/null 2>&1 || true
    done
}

# edit DROP_IDS [FILE]: authorized_keys without the lines of DROP_IDS (space-separated) and of
# dead runs, plus FILE's lines.
edit() {
    real=$ak
    [ ! -L "$ak" ] || real=$(readlink -f -- "$ak")
    [ -e "$real" ] || [ -n "${2:-}" ] || return 0
    tmp=$(mktemp "$real.fleet-XXXXXX")
    if [ -f "$real" ]; then
        awk -v drop=" $1 " -v now="$now" -v root="$root" '
            match($0, / fleet-weights-[0-9a-f]+$/) {
                id = substr($0, RSTART + 15)
                if (index(drop, " " id " ")) next
                if (match($0, /expiry-time="[0-9]+Z"/) && substr($0, RSTART + 13, RLENGTH - 15) < now) next
                if (system("test -d \"" root "/fleet-weights-" id "\"") != 0) next
            }
            { print }' "$real" >"$tmp"
        chmod --reference="$real" -- "$tmp"
        chown --reference="$real" -- "$tmp" 2>/dev/null || true
    fi
    [ -z "${2:-}" ] || cat -- "$2" >>"$tmp"
    mv -f -- "$tmp" "$real"
}

# rm_run DIR: a run dir, its SSH masters ended first.  A transfer of the run still ending (a
# SIGTERMed run's) can add an entry while rm empties the dir, which then fails "Directory not
# empty" (seen in CI): rm is tried again for ~2 s, and the last try's error is the script's.
rm_run() {
    close_masters "$1"
    tries=0
    until rm -rf -- "$1" 2>/dev/null; do
        tries=$((tries + 1))
        [ "$tries" -lt 20 ] || { rm -rf -- "$1"; return; }
        sleep 0.1
    done
}

case $mode in
begin)
    run=$1 owner=$2 ttl=$3
    shift 3
    rdir=$root/fleet-weights-$run
    mkdir -p -- "$rdir"
    printf '%s\n' "$owner" >"$rdir/owner"
    expires=$((now_s + ttl))
    printf '%s\n' "$expires" >"$rdir/expires"
    for d in "$root"/fleet-weights-*; do
        if [ ! -d "$d" ] || [ "$d" = "$rdir" ]; then continue; fi
        if [ -f "$d/expires" ] && [ "$(cat -- "$d/expires")" -lt "$now_s" ]; then
            rm_run "$d"
        elif [ -f "$d/owner" ]; then
            printf '%s %s\n' "${d#"$root"/fleet-weights-}" "$(head -n 1 -- "$d/owner")"
        fi
    done
    lines=
    if [ $# -gt 0 ]; then
        lines="$rdir/authorized"
        stamp=$(date -u -d "@$expires" +%Y%m%d%H%M%S)
        for line in "$@"; do
            printf 'expiry-time="%sZ",%s\n' "$stamp" "$line"
        done >"$lines"
    fi
    edit "" "$lines"
    ;;
end)
    ids=
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        ids="$ids $1"
        rm_run "$root/fleet-weights-$1"
        shift
    done
    [ $# -eq 0 ] || shift
    [ $# -eq 0 ] || rm -rf -- "$@"
    edit "$ids"
    ;;
runs)
    for d in "$root"/fleet-weights-*; do
        [ ! -f "$d/owner" ] || printf '%s %s\n' "${d#"$root"/fleet-weights-}" "$(head -n 1 -- "$d/owner")"
    done
    ;;
esac
