"""Tokenize a DataFrame of text inside Spark and write one guideloom storage.

The text is the repository's Austen corpus (data/austen/*.txt), one row a paragraph, in
``--partitions`` range partitions. A tokenizer UDF (a ``pandas_udf`` over a batch of texts) turns
each paragraph into token ids: tiktoken's ``gpt2`` encoding where tiktoken is installed and its
vocabulary can be loaded, else the UTF-8 bytes (a byte-level tokenizer, ids 0..255). The writer is
guideloom's Spark data source: each task writes one part, the driver commits them all in one
manifest write, in partition order.

    python python/examples/spark_tokenize.py --out /tmp/austen-tokens [--master local[2]] [--partitions 8]
    guideloom inspect --verify /tmp/austen-tokens

Prints the storage's token count and its first ids (the paragraphs' tokens follow one another in
the stream, in id order).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import ArrayType, IntegerType

import guideloom as gl
from guideloom.spark import GuideloomDataSource

ROOT = Path(__file__).resolve().parents[2]


def paragraphs(limit: int | None) -> list[str]:
    """The corpus's non-empty paragraphs (blank-line separated), in file order."""
    out: list[str] = []
    for path in sorted((ROOT / "data" / "austen").glob("*.txt")):
        out += [p.strip() for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return out[:limit] if limit else out


def tokenizer() -> tuple[str, Any]:
    """``(name, encode_batch)``: tiktoken's gpt2 ``encode_ordinary_batch``, else UTF-8 bytes."""
    try:
        import tiktoken

        enc = tiktoken.get_encoding("gpt2")
        return "tiktoken gpt2", enc.encode_ordinary_batch
    except Exception:  # not installed, or its vocabulary cannot be downloaded
        return "utf-8 bytes", lambda texts: [list(t.encode("utf-8")) for t in texts]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the storage directory (or an object-store URL)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--limit", type=int, default=None, help="paragraphs to take (default: all)")
    ap.add_argument("--mode", default="overwrite", choices=["append", "overwrite"])
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(args.master).appName("guideloom-spark-tokenize")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.dataSource.register(GuideloomDataSource)
    name, _ = tokenizer()
    dtype = "u16"  # gpt2's 50257 ids and bytes both fit

    @pandas_udf(ArrayType(IntegerType()))  # type: ignore[call-overload, untyped-decorator]
    def tokenize(texts: pd.Series) -> pd.Series:
        _, encode = tokenizer()  # made once a batch on the executor (tiktoken caches the vocabulary)
        return pd.Series(encode(texts.tolist()))

    texts = paragraphs(args.limit)
    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "id long, text string")
    df = df.repartitionByRange(args.partitions, "id").sortWithinPartitions("id")
    df.select(tokenize("text").alias("input_ids")).write.format("guideloom") \
        .option("dtype", dtype).mode(args.mode).save(args.out)
    spark.stop()

    stream = gl.TokenWindows(args.out, 1)  # the committed token stream, one token a window
    print(f"tokenizer: {name}; {len(texts)} paragraphs -> {stream.elements} tokens ({dtype}) in {args.out}")
    print("first ids:", stream.read_batch(range(min(12, len(stream)))).ravel().tolist())

if __name__ == "__main__":
    main()
