"""Ingest throughput of guideloom's Spark and Ray writers against MosaicML Streaming's
``dataframe_to_mds`` on the same DataFrame and partitioning (issue 30, item 7). Not run in CI.

The input: ``--docs`` documents of 64..2048 uint16 token ids (uniform lengths, seeded), ``id`` and
``input_ids`` (``array<int>``) columns, in ``--partitions`` range partitions, made once and cached
(Spark: ``df.cache()`` and a count; Ray: ``ray.data.from_arrow`` of the same per-partition Arrow
tables, materialized), so every writer times the write alone: converting Spark's rows or Ray's
blocks, writing the shards, and the commit (guideloom: ``commit_parts``; Streaming:
``merge_index``). Streaming writes uncompressed (``compression=None``; its default is zstd), as
guideloom does. Each writer writes the same partitions on the same Spark master or Ray CPUs
(``--cpus``); each measurement is the best of ``--repeats`` runs into a fresh directory.

    target/py-venv/bin/python benches/engine_ingest.py --docs 20000 --partitions 8 --cpus 2 --repeats 3

Needs pyspark, ray[data] and mosaicml-streaming in the venv:
``GUIDELOOM_BENCH_ENGINES=1 bash python/setup-engines.sh`` (install torch's CPU build first, as
``GUIDELOOM_PY_TORCH=1 bash python/setup-venv.sh`` does: Streaming depends on torch).
Prints one JSON line per writer: tokens, seconds, tokens/s, bytes on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa


def tables(docs: int, partitions: int, seed: int) -> list[pa.Table]:
    """The input, one Arrow table a partition (ids in range order, as Spark's range partitions)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(64, 2049, size=docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.integers(0, 50_257, size=int(offsets[-1]), dtype=np.int32)
    column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    table = pa.table({"id": pa.array(np.arange(docs, dtype=np.int64)), "input_ids": column})
    bounds = np.linspace(0, docs, partitions + 1).astype(int)
    return [table.slice(int(a), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:])]


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def best(label: str, tokens: int, repeats: int, run: Callable[[Path], None], work: Path) -> dict[str, Any]:
    times, size = [], 0
    for r in range(repeats):
        out = work / f"{label}-{r}"
        start = time.perf_counter()
        run(out)
        times.append(time.perf_counter() - start)
        size = du(out)
        shutil.rmtree(out)
    t = min(times)
    row = {"writer": label, "tokens": tokens, "seconds": round(t, 3), "tokens_per_s": round(tokens / t),
           "runs": [round(x, 3) for x in times], "bytes": size}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="spark,ray,streaming")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    parts_tables = tables(args.docs, args.partitions, args.seed)
    tokens = sum(len(t.column("input_ids").combine_chunks().values) for t in parts_tables)
    work = Path(args.work or tempfile.mkdtemp(prefix="guideloom-engine-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(json.dumps({"docs": args.docs, "partitions": args.partitions, "cpus": args.cpus, "tokens": tokens,
                      "python": sys.version.split()[0]}), flush=True)

    if only & {"spark", "streaming"}:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        from guideloom.spark import GuideloomDataSource

        spark = (SparkSession.builder.master(f"local[{args.cpus}]").appName("guideloom-engine-bench")
                 .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
                 .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
        spark.dataSource.register(GuideloomDataSource)
        whole = pa.concat_tables(parts_tables)
        df = spark.createDataFrame(whole.to_pandas()).repartitionByRange(args.partitions, "id").cache()
        assert df.count() == args.docs
        assert df.rdd.getNumPartitions() == args.partitions
        if "spark" in only:
            best("spark guideloom", tokens, args.repeats,
                 lambda out: df.select("input_ids").write.format("guideloom").mode("append").save(str(out)), work)
        if "streaming" in only:
            from streaming.base.converters import dataframe_to_mds
            from pyspark.sql.functions import col

            def mds(out: Path) -> None:
                # Streaming encodes an ndarray column from numpy arrays; the udf_iterable turns
                # each pandas row's list into one (the same conversion Streaming documents for
                # tokenized columns).
                def to_arrays(frame: Any) -> Any:
                    for ids in frame["input_ids"]:
                        yield {"input_ids": np.asarray(ids, dtype=np.uint16)}

                dataframe_to_mds(df.select(col("input_ids")), merge_index=True,
                                 mds_kwargs={"out": str(out), "columns": {"input_ids": "ndarray:uint16"},
                                             "compression": None},
                                 udf_iterable=to_arrays)

            best("streaming dataframe_to_mds", tokens, args.repeats, mds, work)
        spark.stop()

    if "ray" in only:
        import ray

        from guideloom.ray import GuideloomDatasink

        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().execution_options.preserve_order = True
        ds = ray.data.from_arrow(parts_tables).materialize()
        assert ds.num_blocks() == args.partitions
        best("ray guideloom", tokens, args.repeats, lambda out: ds.write_datasink(GuideloomDatasink(out)), work)
        ray.shutdown()
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
