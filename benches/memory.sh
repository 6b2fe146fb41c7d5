#!/usr/bin/env bash
# Peak RSS of `guideloom bench` (auto backend, workers 2, shuffled u16 windows of 2,049 tokens)
# for prefetch 1, 4 and 16, batch 32 and 1,024, short (20 batches) and long (SECONDS s, epochs
# repeating) runs, measured with `/usr/bin/time -f %M`. Prints one Markdown table row per run.
#
#   benches/memory.sh DATA_DIR [SECONDS]     (DATA_DIR: a u16 stream storage, e.g. benches/out/data/u16)
set -euo pipefail
cd "$(dirname "$0")/.."
data=$1
secs=${2:-10}
cli=${GUIDELOOM_BENCH_CLI:-target/release/guideloom}
echo "| batch | prefetch | run | batches | peak RSS MiB | (prefetch + workers) x batch MiB |"
echo "|---|---|---|---|---|---|"
for batch in 32 1024; do
  for prefetch in 1 4 16; do
    for run in short long; do
      if [ $run = short ]; then lim=(--max-batches 20); else lim=(--seconds "$secs"); fi
      out=$( { /usr/bin/time -f "RSS %M" "$cli" bench "$data" --seq-len 2049 --batch-size $batch --shuffle --seed 1 \
               --workers 2 --prefetch $prefetch "${lim[@]}" --json; } 2>&1 )
      rss=$(echo "$out" | sed -n 's/^RSS //p')
      batches=$(echo "$out" | grep '^{' | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["batches"])')
      bound=$(python3 -c "print(f'{($prefetch + 2) * $batch * 2049 * 2 / 2**20:.1f}')")
      echo "| $batch | $prefetch | $run | $batches | $(python3 -c "print(f'{$rss/1024:.1f}')") | $bound |"
    done
  done
done
