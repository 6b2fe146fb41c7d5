#!/usr/bin/env bash
# Packing benchmark (docs/BENCHMARKS.md, "Packing"): the Austen novels (data/austen) split
# into paragraphs (blank-line blocks) and tokenized with GPT-2's BPE by `guideloom ingest text
# --split blank-line --doc-meta`; every guideloom packing strategy measured by `guideloom bench
# --pack`, which also writes the paragraph lengths it packs; Grain's first-fit packer and TRL's
# best-fit-decreasing `pack_dataset` run on those same lengths (benches/packing.py).
#
#   benches/packing.sh [--install-only] [--seq-lens "2048 512"] [--runs N]
#
# Python peers go into benches/.venv (the venv benches/run.sh uses): grain, datasets,
# transformers and trl from PyPI (trl without its dependencies: `trl.data_utils` needs
# datasets and transformers, not accelerate or torch).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seq_lens="2048 512"
runs=3
install_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --install-only) install_only=1 ;;
    --seq-lens) seq_lens="$2"; shift ;;
    --runs) runs="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p benches/out/packing
if [ ! -x benches/.venv/bin/python ]; then
  python3 -m venv benches/.venv
fi
py=benches/.venv/bin/python
$py -m pip install -q --disable-pip-version-check numpy grain datasets transformers
$py -m pip install -q --disable-pip-version-check --no-deps trl
[ "$install_only" = 1 ] && exit 0

target=${CARGO_TARGET_DIR:-$root/target}
cargo build --release --bin guideloom
gl="$target/release/guideloom"
data=benches/out/packing/austen-paragraphs
if [ ! -f "$data/manifest.json" ]; then
  rm -rf "$data"
  "$gl" ingest text --tokenizer gpt2 --split blank-line --doc-meta --out "$data" data/austen/*.txt
fi
out=benches/out/packing/results.jsonl
: > "$out"
for L in $seq_lens; do
  for run in $(seq 1 "$runs"); do
    for pack in concat-split first-fit best-fit planned-bfd stream-concat-split stream-first-fit stream-best-fit; do
      extra=()
      [ "$pack" = planned-bfd ] && [ "$run" = 1 ] && extra=(--lengths-out "benches/out/packing/lengths.txt")
      line=$("$gl" bench "$data" --json --seq-len "$L" --batch-size 8 --workers 2 --shuffle --seed 1 \
        --pack "$pack" --bins 16 --overflow truncate "${extra[@]}")
      echo "{\"system\":\"guideloom\",\"strategy\":\"$pack\",\"seq_len\":$L,\"run\":$run,\"report\":$line}" >> "$out"
    done
    $py benches/packing.py --lengths benches/out/packing/lengths.txt --seq-len "$L" --bins 16 --run "$run" >> "$out"
  done
done
$py benches/packing.py --report "$out"
