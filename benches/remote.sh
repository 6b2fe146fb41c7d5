#!/usr/bin/env bash
# Regenerates docs/BENCHMARKS.md's remote comparison (issue 18, item 7) on this machine:
# guideloom reading a storage on moto's S3 server (cold and warm cache) and on local disk
# against MosaicML Streaming 0.13's StreamingDataset over the same tokens as MDS on the same
# server, all through the project's fault proxy (testkit/examples/fault_proxy.rs) adding the
# same latency per request. Everything listens on 127.0.0.1 only.
#
# Creates (or reuses) the venv benches/.venv-remote with mosaicml-streaming 0.13 and
# moto[server] from PyPI (a venv of its own: Streaming 0.13 pins numpy < 2.2, which would
# downgrade benches/.venv's numpy), builds the guideloom CLI and the proxy in release and runs
# benches/remote.py, which prints the table.
#
#   benches/remote.sh [--latency-ms 20] [--shards 8] [--shard-tokens 4194304]
#                     [--seq-len 2049] [--batch-size 32] [--workers 2]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=benches/.venv-remote
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import streaming, moto, flask' 2>/dev/null; then
  "$venv/bin/pip" install -q --disable-pip-version-check 'mosaicml-streaming==0.13.*' 'moto[server]>=5,<6'
fi
cargo build --release --bin guideloom --example fault_proxy -p guideloom-cli -p guideloom-testkit
target="${CARGO_TARGET_DIR:-target}"
exec "$venv/bin/python" benches/remote.py "$target/release/guideloom" \
  "$target/release/examples/fault_proxy" "$venv/bin/moto_server" "$@"
