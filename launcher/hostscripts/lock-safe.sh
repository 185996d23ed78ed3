# Path checks shared by the lock-*.sh scripts (launcher/deploy/lock.py puts this text before
# each): nothing is written or removed through a path another local user could have planted.
# `chain LOCK_DIR` checks, as far as they exist, LOCK_ROOT's parent's parent (/run: owned by root;
# others may write it only if it is sticky, so none can rename what root or we made there),
# LOCK_ROOT's parent (/run/fleet), LOCK_ROOT and LOCK_DIR: each a real directory (not a
# symlink), owned by root or the connecting user, writable by no one else.  Else exit 77, the
# reason on stderr.  Only functions, their variables _-prefixed: the scripts' own stay theirs.
refuse() { echo "$1" >&2; exit 77; }
owned() {
  [ ! -L "$1" ] || refuse "$1 is a symlink"
  [ -d "$1" ] || refuse "$1 is not a directory"
  _u=$(id -u) && _m=$(stat -c "%u %a" "$1") || exit 1
  [ "${_m%% *}" = 0 ] || [ "${_m%% *}" = "$_u" ] || refuse "$1 is owned by uid ${_m%% *}, not by root or the connecting user (uid $_u)"
  [ $((0${_m#* } & 022)) -eq 0 ] || refuse "$1 is writable by others (mode ${_m#* })"
}
chain() {
  _r=${1%/*}; _b=${_r%/*}; _t=${_b%/*}; _t=${_t:-/}
  _m=$(stat -c "%u %a" "$_t") || exit 1
  { [ "${_m%% *}" = 0 ] && { [ $((0${_m#* } & 022)) -eq 0 ] || [ $((0${_m#* } & 01000)) -ne 0 ]; }; } ||
    refuse "$_t is not owned by root, or others may replace what is in it (mode ${_m#* })"
  for _p in "$_b" "$_r" "$1"; do { [ ! -e "$_p" ] && [ ! -L "$_p" ]; } || owned "$_p"; done
}
