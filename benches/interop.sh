#!/usr/bin/env bash
# Issue 13's benchmark: windows/s reading 1 GiB of u16 tokens as a Megatron .bin/.idx and as a
# nanoGPT train.bin in place, against guideloom's native storage of the same tokens, against
# megatron-core's own IndexedDataset (CPU) and nanoGPT's np.memmap gather. Rewrites the INTEROP
# block of docs/BENCHMARKS.md.
#
# Creates (or reuses) the venv benches/.venv with numpy, torch and megatron-core (benches/venv.sh);
# builds the guideloom CLI and benches/native in release; builds the data sets under
# benches/out/data and deletes them at the end (unless --keep-data).
#
#   benches/interop.sh [--runs N] [--keep-data]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mkdir -p benches/out
benches/venv.sh numpy torch megatron-core
cargo build --release --bin guideloom
target=${CARGO_TARGET_DIR:-$root/target}
CARGO_TARGET_DIR=$target cargo build --release --manifest-path benches/native/Cargo.toml
export GUIDELOOM_BENCH_CLI="${GUIDELOOM_BENCH_CLI:-$target/release/guideloom}"
export GUIDELOOM_BENCH_TARGET="${GUIDELOOM_BENCH_TARGET:-$target/release}"
exec benches/.venv/bin/python benches/compare.py --sections interop "$@"
