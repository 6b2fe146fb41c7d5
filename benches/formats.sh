#!/usr/bin/env bash
# Issue 28's benchmark: windows/s from the foreign layouts guideloom reads in place (Hugging Face
# save_to_disk Arrow, Parquet, Grain's ArrayRecord: random access; TFRecord, WebDataset tar
# shards: sequential) against the native storage of the same tokens and against each layout's
# Python peer at its best (datasets + torch DataLoader, Grain's ArrayRecordDataSource + MapDataset,
# the tfrecord package's torch TFRecordDataset, webdataset), warm and cold. Rewrites the FORMATS
# block of docs/BENCHMARKS.md. benches/run.sh runs the same command after its other sections.
#
# Creates (or reuses) the venv benches/.venv with the peers' packages (benches/venv.sh; not part
# of CI), builds the guideloom CLI in release, writes the layouts (64 MiB of tokens each) under
# benches/out/data/formats with each project's writer (benches/formats.py) and deletes them at the
# end (unless --keep-data). About 10 minutes on 2 vCPUs once built.
#
#   benches/formats.sh [--runs N] [--keep-data] [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mkdir -p benches/out
benches/venv.sh numpy torch datasets pyarrow grain array_record tfrecord webdataset
cargo build --release --bin guideloom
target=${CARGO_TARGET_DIR:-$root/target}
export GUIDELOOM_BENCH_CLI="${GUIDELOOM_BENCH_CLI:-$target/release/guideloom}"
export GUIDELOOM_BENCH_CMD="${GUIDELOOM_BENCH_CMD:-benches/formats.sh $*}"
exec benches/.venv/bin/python benches/compare.py --sections formats "$@"
