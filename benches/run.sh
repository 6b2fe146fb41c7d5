#!/usr/bin/env bash
# Regenerates docs/BENCHMARKS.md's tables and docs/benchmarks_window_size.png on this machine:
# creates the Python venv (numpy, torch, grain, matplotlib from PyPI), builds the guideloom CLI,
# the benchmark programs (benches/native) and the burn peer (benches/burn_loader) in release,
# builds 1 GiB u16 and u32 token data sets from the bundled Austen corpus under benches/out/data,
# runs every system interleaved and deletes the data sets at the end (unless --keep-data).
#
#   benches/run.sh [--runs N] [--sections main,u32,verify,sweep,cold,scaling,startup,resume]
#                  [--backends auto,pread,io-uring,mmap] [--keep-data] [--report-only] [--merge]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mkdir -p benches/out
benches/venv.sh
cargo build --release --bin guideloom
export GUIDELOOM_BENCH_CLI="${GUIDELOOM_BENCH_CLI:-${CARGO_TARGET_DIR:-$root/target}/release/guideloom}"
export CARGO_TARGET_DIR="$root/benches/out/target"
cargo build --release --manifest-path benches/native/Cargo.toml
cargo build --release --manifest-path benches/burn_loader/Cargo.toml
exec benches/.venv/bin/python benches/compare.py "$@"
