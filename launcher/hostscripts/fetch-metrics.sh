# GET each URL from the host itself (launcher/observe/fetch.py fetch_argv):
# sh -c <this> sh HEAD_MARK STATUS_MARK TIMEOUT_S URL...  Per URL: HEAD_MARK URL, the body
# (or the error), then STATUS_MARK and the exit status of the GET.
h=$1 e=$2 t=$3; shift 3
for u in "$@"; do
  printf '%s%s\n' "$h" "$u"
  if command -v curl >/dev/null 2>&1; then curl -fsS -m "$t" "$u" 2>&1
  elif command -v wget >/dev/null 2>&1; then wget -q -O - -T "$t" "$u" 2>&1
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).read().decode())" "$u" "$t" 2>&1
  else echo "none of curl, wget, python3 on this host"; false; fi
  printf '\n%s%s\n' "$e" "$?"
done
