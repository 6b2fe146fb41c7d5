"""Packing peers on the document lengths guideloom packs (benches/packing.sh).

  packing.py --lengths FILE --seq-len L --bins K --run R   one JSON line per peer
  packing.py --report RESULTS.jsonl                         the markdown table

Every document is cut to L tokens first (guideloom runs with --overflow truncate; TRL's
"bfd" truncates; Grain's packers refuse a longer element), and documents are packed in the
order of the file (the storage's order). Tokens are dummy ids: packing only looks at lengths.

- Grain: `grain.experimental.FirstFitPackIterDataset(..., num_packing_bins=K,
  shuffle_bins=False)` over a `MapDataset` of one int32 array per document; every packed
  element is drawn.
- TRL: `trl.data_utils.pack_dataset(Dataset, L, strategy="bfd")` (best-fit-decreasing, run by
  `datasets.map(batched=True)` over chunks of 1,000 documents); the time includes building the
  Arrow table of the packed rows, as the call does.
"""

import argparse
import json
import statistics
import sys
import time
from importlib.metadata import version


def read_lengths(path, seq_len):
    with open(path) as f:
        lengths = [min(int(line), seq_len) for line in f if line.strip()]
    return [n for n in lengths if n > 0]


def report(system, strategy, seq_len, run, rows, real, seconds):
    tokens = rows * seq_len
    print(json.dumps({
        "system": system,
        "strategy": strategy,
        "seq_len": seq_len,
        "run": run,
        "report": {
            "rows": rows,
            "tokens": tokens,
            "real_tokens": real,
            "padding_share": (tokens - real) / tokens if tokens else 0.0,
            "seconds": seconds,
            "rows_per_s": rows / seconds,
        },
    }))
    sys.stdout.flush()


def grain_first_fit(lengths, seq_len, bins, run):
    import grain
    import numpy as np

    docs = [{"tokens": np.ones(n, dtype=np.int32)} for n in lengths]
    start = time.perf_counter()
    ds = grain.MapDataset.source(docs).to_iter_dataset()
    packed = grain.experimental.FirstFitPackIterDataset(
        ds, length_struct={"tokens": seq_len}, num_packing_bins=bins, shuffle_bins=False
    )
    rows = real = 0
    for row in packed:
        rows += 1
        real += int(np.count_nonzero(row["tokens_segment_ids"]))
    report("grain " + version("grain"), "first-fit", seq_len, run, rows, real, time.perf_counter() - start)


def trl_bfd(lengths, seq_len, run):
    from datasets import Dataset, disable_progress_bars
    from trl.data_utils import pack_dataset

    disable_progress_bars()
    data = Dataset.from_dict({"input_ids": [[1] * n for n in lengths]})
    start = time.perf_counter()
    packed = pack_dataset(data, seq_len, strategy="bfd")
    seconds = time.perf_counter() - start
    real = sum(sum(s) for s in packed["seq_lengths"])
    report("trl " + version("trl"), "bfd", seq_len, run, len(packed), real, seconds)


def table(path):
    runs = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            key = (r["seq_len"], r["system"], r["strategy"])
            runs.setdefault(key, []).append(r["report"])
    print("| L | system | strategy | rows | padding | rows/s (median, min-max) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (seq_len, system, strategy), reps in sorted(runs.items(), key=lambda kv: (-kv[0][0], kv[0][1], kv[0][2])):
        rates = [r["rows_per_s"] for r in reps]
        rows = {r["rows"] for r in reps}
        pad = reps[0]["padding_share"]
        print(f"| {seq_len} | {system} | {strategy} | {'/'.join(map(str, sorted(rows)))} | {pad * 100:.2f} % "
              f"| {statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lengths")
    p.add_argument("--seq-len", type=int)
    p.add_argument("--bins", type=int, default=16)
    p.add_argument("--run", type=int, default=1)
    p.add_argument("--report")
    a = p.parse_args()
    if a.report:
        table(a.report)
        return
    lengths = read_lengths(a.lengths, a.seq_len)
    grain_first_fit(lengths, a.seq_len, a.bins, a.run)
    trl_bfd(lengths, a.seq_len, a.run)


if __name__ == "__main__":
    main()
