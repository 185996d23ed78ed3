#!/usr/bin/env bash
# Installs everything fleet and its sandbox fleet need on a Debian machine, from a clean checkout:
# OS packages (sshd, iproute2, nftables, docker.io, tini, systemd-analyze, shellcheck, mmdebstrap), then fleet itself with its
# test extras.  Idempotent; run as root.  Used by the README's first command and by .ci/run.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "scripts/install.sh: run as root (sudo -i, then this command again)" >&2
  exit 1
fi
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
# python3-setuptools + python3-wheel: tests/unit/test_packaging.py builds the wheel offline with the OS python3.
# prometheus: tests/observe starts a real Prometheus on loopback to scrape the targets fleet writes.
# mmdebstrap: builds the root filesystem of the sandbox's systemd hosts (launcher/sandbox/systemd_host.py).
# vmtouch: `fleet weights warm` runs it on the hosts (the sandbox hosts share this machine's /usr).
apt_pkgs=(openssh-server openssh-client iproute2 nftables iptables busybox-static docker.io tini systemd curl libibverbs1 shellcheck rsync
          python3-pip python3-setuptools python3-wheel prometheus mmdebstrap vmtouch)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
mkdir -p /run/sshd

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
# tests/observe/test_dashboard.py decodes dashboards/fleet.json with Grafana's dashboard types
# (Apache-2.0, generated from Grafana's schemas; Grafana itself is no Debian or Python package).
python3 -m pip install -q --disable-pip-version-check 'grafana-foundation-sdk==1769699998!10.1.0'
# The sandbox hosts run the system python3 (they share this machine's filesystem); `fleet weights
# stage --source hub` runs the hub's own client there, as a real host's python3 or engine image would.
/usr/bin/python3 -c 'import huggingface_hub' 2>/dev/null ||
  /usr/bin/python3 -m pip install -q --disable-pip-version-check --break-system-packages huggingface_hub
# Byte-compile fleet as a wheel install would: with PYTHONDONTWRITEBYTECODE set (as in some CI
# images) an editable checkout would otherwise re-compile every module in every fleet process.
python3 -m compileall -q launcher >/dev/null

# fleet bench's client: aiperf, in a venv of its own (its pinned dependencies -- transformers,
# pandas, pydantic, zmq ... -- would clash with fleet's).  ~1.2 GB, about a minute.
AIPERF_VENV=/opt/fleet-aiperf
AIPERF_VERSION=0.13.0
if ! "$AIPERF_VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('aiperf') != '$AIPERF_VERSION')" 2>/dev/null; then
  python3 -m venv "$AIPERF_VENV"
  "$AIPERF_VENV/bin/python" -m pip install -q --disable-pip-version-check "aiperf==$AIPERF_VERSION"
fi
