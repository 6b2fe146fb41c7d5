#!/usr/bin/env bash
# The one benchmark command: regenerates every loader-speed figure of docs/BENCHMARKS.md (the
# SUMMARY and GENERATED blocks) and docs/benchmarks_window_size.png in one run, with no
# interactive step. It creates the Python venv (benches/venv.sh: numpy, torch, grain, matplotlib),
# builds the guideloom CLI, the benchmark programs (benches/native) and the burn peer
# (benches/burn_loader) in release for the host CPU under $CARGO_TARGET_DIR/bench-host (default target/bench-host), writes 1 GiB u16
# and u32 token data sets from the bundled Austen corpus under benches/out/data, runs every
# section (main, u32, verify, sweep, cold, scaling, memory, startup, resume; each system
# interleaved with the others; then python: the Python binding, benches/python.py, in the binding's
# venv target/py-venv made by python/setup-venv.sh with torch), prints its progress and the total time, and deletes the data
# sets at the end (unless --keep-data). About 25 minutes on 2 vCPUs once built.
#
#   benches/run.sh [--all]          every section, 5 interleaved runs per figure
#   benches/run.sh --quick          smoke test of every section (64 MiB data, 1 run; tables to benches/out/quick.md)
#   benches/run.sh [--runs N] [--runs-other N] [--sections main,u32,...] [--backends auto,mmap]
#                  [--workers 0,1,2] [--skip SYSTEM,...] [--keep-data] [--merge] [--report-only] [--report-to FILE]
#
# A run interrupted after some sections keeps their results in benches/out/results.json:
# `--merge --sections <the rest>` finishes it, `--report-only` rebuilds the tables from it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
t0=$(date +%s)
mkdir -p benches/out
echo "== venv (benches/venv.sh)"
benches/venv.sh
# Every measured Rust program (the CLI, the raw limit and library runners, the burn peer) is
# built for this machine's CPU (-C target-cpu=native), in a target directory of its own so the
# default build is not rebuilt: the raw limit and guideloom sum with the same function
# (guideloom_formats::sum_ids) compiled for the same target.
target=${CARGO_TARGET_DIR:-$root/target}/bench-host
export RUSTFLAGS="${RUSTFLAGS:-} -C target-cpu=native"
echo "== release builds for the host CPU in $target"
CARGO_TARGET_DIR=$target cargo build --release --bin guideloom
CARGO_TARGET_DIR=$target cargo build --release --manifest-path benches/native/Cargo.toml
CARGO_TARGET_DIR=$target cargo build --release --manifest-path benches/burn_loader/Cargo.toml
unset RUSTFLAGS
# The raw limit's check in C (benches/raw_limit.c), compiled for the host CPU too.
${CC:-cc} -O3 -march=native -pthread benches/raw_limit.c -o "$target/release/raw_limit_c"
export GUIDELOOM_BENCH_CLI="${GUIDELOOM_BENCH_CLI:-$target/release/guideloom}"
export GUIDELOOM_BENCH_TARGET="${GUIDELOOM_BENCH_TARGET:-$target/release}"
export GUIDELOOM_BENCH_CMD="benches/run.sh $*"
echo "== setup took $(( $(date +%s) - t0 )) s"
status=0
# Then the formats section alone (`compare.py --sections formats`, as benches/formats.sh: issue
# 28's Arrow, Parquet, ArrayRecord, TFRecord and WebDataset against the native storage and their
# Python peers, their packages added to the venv), unless --sections or --report-only leaves it out.
formats=1 prev=
for a in "$@"; do
  if [ "$prev" = --sections ] || [ "$a" = --report-only ]; then formats=0; fi
  prev=$a
done
benches/.venv/bin/python benches/compare.py "$@" || status=$?
if [ $formats = 1 ] && [ $status = 0 ]; then
  echo "== formats (compare.py --sections formats, as benches/formats.sh)"
  benches/venv.sh numpy torch datasets pyarrow grain array_record tfrecord webdataset
  fa=()
  for a in "$@"; do case $a in --quick|--keep-data) fa+=("$a") ;; esac; done
  benches/.venv/bin/python benches/compare.py --sections formats ${fa[@]+"${fa[@]}"} || status=$?
fi
echo "== disk: venv $(du -sh benches/.venv | cut -f1), build $(du -sh "$target/release" | cut -f1) ($target/release), benches/out $(du -sh benches/out | cut -f1)"
echo "== benches/run.sh took $(( ($(date +%s) - t0) / 60 )) min $(( ($(date +%s) - t0) % 60 )) s (exit $status)"
exit $status
