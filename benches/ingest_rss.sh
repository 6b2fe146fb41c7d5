#!/usr/bin/env bash
# Peak RSS of `guideloom ingest text` over the bundled Austen corpus repeated to about
# MB megabytes of text (default 400), against the bundled corpus once: ingest streams through
# the corpus in bounded chunks, so the two peaks should be close.
#
#   benches/ingest_rss.sh [MB] [GUIDELOOM_BINARY]
#
# Needs python3 (for getrusage) and a release build (`cargo build --release`).
set -euo pipefail
cd "$(dirname "$0")/.."
mb=${1:-400}
bin=${2:-target/release/guideloom}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
i=0
while [ "$(du -sb "$work/corpus" | cut -f1)" -lt $((mb * 1000 * 1000)) ]; do
  i=$((i + 1))
  for f in data/austen/*.txt; do cp "$f" "$work/corpus/copy$(printf %04d $i)-$(basename "$f")"; done
done
peak() { # peak RSS (KiB) and wall seconds of one command
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.time()
subprocess.run(sys.argv[1:], check=True, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, round(time.time() - t, 1))
PY
}
bytes=$(du -sb "$work/corpus" | cut -f1)
read -r small_kib small_s < <(peak "$bin" ingest text --out "$work/small" data/austen/*.txt)
read -r big_kib big_s < <(peak "$bin" ingest text --out "$work/big" "$work/corpus")
echo "bundled corpus (6 files, $(du -cb data/austen/*.txt | tail -1 | cut -f1) bytes): peak RSS $((small_kib / 1024)) MiB, ${small_s} s"
echo "repeated corpus ($(ls "$work/corpus" | wc -l) files, $bytes bytes): peak RSS $((big_kib / 1024)) MiB, ${big_s} s"
