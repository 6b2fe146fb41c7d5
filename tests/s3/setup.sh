#!/usr/bin/env bash
# Installs the S3-compatible test server (moto's `moto_server`, from PyPI's `moto[server]`)
# into a virtual environment of the project, target/s3-venv, and prints the path of the
# `moto_server` executable on success. Idempotent: an existing, working venv is reused.
#
# The remote-storage tests (cli/tests/remote.rs) look for target/s3-venv/bin/moto_server (or the
# path in GUIDELOOM_MOTO_SERVER) and are skipped, with a `SKIPPED:` line on stderr, when it is
# not there; .ci/run runs this script first and fails when it fails, so that CI runs them.
#
# Usage: bash tests/s3/setup.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${GUIDELOOM_S3_VENV:-target/s3-venv}"
if [ -x "$venv/bin/moto_server" ] && "$venv/bin/python" -c 'import moto, flask' 2>/dev/null; then
  echo "$venv/bin/moto_server"
  exit 0
fi
python3 -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'moto[server]>=5,<6' >&2
"$venv/bin/python" -c 'import moto, flask' >&2
echo "$venv/bin/moto_server"
