#!/usr/bin/env bash
# Regenerates this folder's shards and llm.c's expected batches (issue 14).
# usage: generate.sh LLMC_CHECKOUT   (karpathy/llm.c at f1e2ace651495b74ae22d45d1723443fd00ecd3a)
# Needs a C compiler and python3. llm.c's code is only compiled from the checkout, never
# copied here. Writes: order_*_*.bin (four llm.c v1 shards), expected.txt (one "case" line
# per configuration, then per batch: shard_idx sample_idx and the B*T+1 tokens), the
# checkpoint files state_*.bin, and tiny_glob.txt (AC-LLMC-03 over the two sample shards
# under their real names).
set -euo pipefail
llmc=${1:?usage: generate.sh LLMC_CHECKOUT}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"
python3 - <<'PY'
import struct
# File f holds tokens f*1000 + i, i < n (all distinct, so a window names its place).
for f, (name, n) in enumerate([("order_train_000001", 41), ("order_train_000002", 29),
                               ("order_train_000003", 53), ("order_val_000000", 36)], 1):
    head = [20240520, 1, n] + [0] * 253
    with open(name + ".bin", "wb") as out:
        out.write(struct.pack("<256i", *head))
        out.write(struct.pack("<%dH" % n, *[f * 1000 + i for i in range(n)]))
PY
cc -O1 -w -I"$llmc" -o "$work/harness" "$here/harness.c" -lm
h="$work/harness"
{
  "$h" "$here/order_*.bin" 1 2 0 1 0 30
  "$h" "$here/order_*.bin" 2 3 0 1 0 50
  "$h" "$here/order_*.bin" 2 3 0 1 1 70 30 "$here/state_shuffled_r0.bin"
  "$h" "$here/order_*.bin" 1 4 0 2 1 40 11 "$here/state_shuffled_p2_r0.bin"
  "$h" "$here/order_*.bin" 1 4 1 2 1 40 25 "$here/state_shuffled_p2_r1.bin"
  "$h" "$here/order_*.bin" 1 4 1 2 0 40 7 "$here/state_sequential_p2_r1.bin"
} > expected.txt
mkdir "$work/tiny"
cp "$here/../../../../storage/tests/data/interop/llmc/tiny_val_000000.bin" \
   "$here/../../../../storage/tests/data/interop/llmc/tiny_train_000001.bin" "$work/tiny/"
"$h" "$work/tiny/*.bin" 1 2 0 1 0 8 > tiny_glob.txt
