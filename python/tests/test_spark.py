"""guideloom.spark (issue 30): a DataFrame written with ``format("guideloom")`` in Spark local mode
with task retries (``local[2,4]``: 2 threads, a task may fail 3 times), one SparkSession for the
module (Spark's start-up costs about 10 s)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_same_storage, committed_files, read_stream, row_tokens, rows_stream

pytest.importorskip("pyspark", reason="pyspark is not installed (python/setup-engines.sh)")
pa = pytest.importorskip("pyarrow")

from pyspark import TaskContext  # noqa: E402
from pyspark.errors import AnalysisException  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from guideloom import parts  # noqa: E402
from guideloom.spark import GuideloomDataSource  # noqa: E402

ROWS, PARTITIONS, FAIL_PARTITION = 120, 4, 2


@pytest.fixture(scope="module")
def spark() -> Any:
    # The Python workers cannot import the test modules: pickle their functions by value.
    from pyspark import cloudpickle

    import conftest

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(conftest)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("guideloom-issue30")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.dataSource.register(GuideloomDataSource)
    yield session
    session.stop()


def frame(spark: Any, first: int = 0, fail: str = "never") -> Any:
    """Rows ``first .. first + ROWS`` in ``PARTITIONS`` range partitions, columns ``id`` and
    ``input_ids`` (``array<int>``). ``fail="first"``: partition ``FAIL_PARTITION``'s first attempt
    puts the token 70000 (outside u16) in its second batch, so the guideloom writer fails in the
    middle of that part; ``"always"``: every attempt does."""

    def docs(batches: Any) -> Any:
        ctx = TaskContext.get()
        failing = ctx.partitionId() == FAIL_PARTITION and (fail == "always" or (fail == "first" and ctx.attemptNumber() == 0))
        for n, batch in enumerate(batches):
            ids = batch.column("id").to_pylist()
            lists = [row_tokens(i) for i in ids]
            if failing and n == 1:
                lists[0] = lists[0] + [70_000]
            yield pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), pa.array(lists, pa.list_(pa.int32()))],
                                             names=["id", "input_ids"])

    return spark.range(first, first + ROWS, 1, PARTITIONS).mapInArrow(docs, "id long, input_ids array<int>")


def expected_stream(*firsts: int) -> list[int]:
    return rows_stream(ROWS, *firsts)


def read_tokens(root: Path) -> list[int]:
    return read_stream(root).tolist()


def jobs(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "_parts").iterdir()) if (root / "_parts").exists() else []


def test_issue30_spark_retried_task_equals_clean_run_and_orphan_is_gc_listed(spark: Any, tmp_path: Path) -> None:
    clean, retried = tmp_path / "clean", tmp_path / "retried"
    frame(spark).write.format("guideloom").mode("append").save(str(clean))
    frame(spark, fail="first").write.format("guideloom").option("column", "input_ids").option("dtype", "u16") \
        .mode("append").save(str(retried))
    # The rows in partition (= id) order, byte for byte in the shards and the loader's batches.
    assert_same_storage(clean, retried, expected_stream(0))
    # The clean run leaves nothing to collect; the retried one leaves its failed first attempt
    # of partition FAIL_PARTITION, and nothing else.
    assert parts.gc(clean) == []
    (job,) = jobs(retried)
    assert sorted(p.name for p in (retried / "_parts" / job).iterdir()) == \
        ["000000-0", "000001-0", "000002-0", "000002-1", "000003-0"]
    assert parts.gc(retried) == [f"_parts/{job}/{FAIL_PARTITION:06}-0"]
    assert parts.gc(retried, apply=True) == [f"_parts/{job}/{FAIL_PARTITION:06}-0"]
    assert parts.gc(retried) == []
    assert read_tokens(retried) == expected_stream(0)


def test_issue30_spark_modes_and_abort(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    # Spark refuses its own ErrorIfExists mode for a Python data source before any writer is made.
    with pytest.raises(AnalysisException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        frame(spark).write.format("guideloom").mode("error").save(str(root))
    assert not root.exists()
    frame(spark).write.format("guideloom").option("if_exists", "error").mode("append").save(str(root))
    # "error": the storage exists now; the commit refuses it and the parts are removed.
    with pytest.raises(Exception, match="(?i)exist"):
        frame(spark, first=ROWS).write.format("guideloom").option("if_exists", "error").mode("append").save(str(root))
    assert read_tokens(root) == expected_stream(0)
    # append, then overwrite.
    frame(spark, first=ROWS).write.format("guideloom").mode("append").save(str(root))
    assert read_tokens(root) == expected_stream(0, ROWS)
    frame(spark, first=2 * ROWS).write.format("guideloom").mode("overwrite").save(str(root))
    assert read_tokens(root) == expected_stream(2 * ROWS)
    committed = committed_files(root)
    # A task that fails on every attempt fails the job: Spark calls abort, which removes the
    # job's parts, and the last commit stays in force.
    before = set(jobs(root))
    with pytest.raises(Exception, match="70000 does not fit"):
        frame(spark, first=3 * ROWS, fail="always").write.format("guideloom").mode("append").save(str(root))
    assert set(jobs(root)) == before
    assert committed_files(root) == committed
    assert read_tokens(root) == expected_stream(2 * ROWS)
