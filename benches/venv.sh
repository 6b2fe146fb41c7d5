#!/usr/bin/env bash
# Creates benches/.venv (the benchmarks' Python peers) and installs PACKAGES from PyPI
# (default: numpy torch grain matplotlib, what benches/run.sh needs).
#
#   benches/venv.sh [PACKAGE...]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x benches/.venv/bin/python ]; then
  python3 -m venv benches/.venv
fi
if [ $# -eq 0 ]; then
  set -- numpy torch grain matplotlib
fi
benches/.venv/bin/pip install -q --disable-pip-version-check "$@"
