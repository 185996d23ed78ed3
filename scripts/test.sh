#!/usr/bin/env bash
# The test command (README): type-check the library, then every test tier.  Tests that need
# root-only facilities (network namespaces, dockerd) bring them up themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m mypy launcher/
python3 -m pytest -q -rs --durations=30 "$@"
