# HTTP from the host itself (launcher/rolling/router_api.py HostHttp: router APIs on data-plane
# addresses): sh -c <this> sh METHOD URL BODY TIMEOUT_S.  curl, else python3; prints the body,
# then the status code on a line of its own.
m=$1; u=$2; b=$3; t=$4; if command -v curl >/dev/null 2>&1; then if [ -n "$b" ]; then exec curl -sS -m "$t" -X "$m" -H "Content-Type: application/json" --data-binary "$b" -w "\n%{http_code}" "$u"; else exec curl -sS -m "$t" -X "$m" -w "\n%{http_code}" "$u"; fi; elif command -v python3 >/dev/null 2>&1; then exec python3 -c "import sys, urllib.request, urllib.error
m, u, b, t = sys.argv[1:5]
r = urllib.request.Request(u, data=b.encode() if b else None, method=m, headers={'Content-Type': 'application/json'})
try:
    x = urllib.request.urlopen(r, timeout=float(t)); c, d = x.status, x.read()
except urllib.error.HTTPError as e:
    c, d = e.code, e.read()
sys.stdout.write(d.decode(errors='replace') + '\n' + str(c))
" "$m" "$u" "$b" "$t"; else echo "none of curl, python3 on this host" >&2; exit 127; fi
