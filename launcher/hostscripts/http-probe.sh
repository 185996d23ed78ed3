# Health probe from the host itself (launcher/deploy/steps.py probe_argv): sh -c <this> sh URL
# TIMEOUT_S.  Exit 0 on a 2xx answer; 127 when none of curl, wget, python3 is there.
if command -v curl >/dev/null 2>&1; then exec curl -fsS -o /dev/null -m "$2" "$1"
elif command -v wget >/dev/null 2>&1; then exec wget -q -O /dev/null -T "$2" "$1"
elif command -v python3 >/dev/null 2>&1; then exec python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2]))" "$1" "$2"
else echo "none of curl, wget, python3 on this host to probe $1" >&2; exit 127; fi
