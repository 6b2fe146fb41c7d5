"""guideloom.ray (issue 30): a Ray Dataset written with ``GuideloomDatasink`` on a local Ray
(``ray.init(num_cpus=2)``), one Ray instance for the module, write tasks retried on errors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_same_storage, committed_files, read_stream, row_tokens, rows_stream

ray = pytest.importorskip("ray", reason="ray is not installed (python/setup-engines.sh)")
pytest.importorskip("ray.data")
pa = pytest.importorskip("pyarrow")

from guideloom import errors, parts  # noqa: E402
from guideloom.ray import GuideloomDatasink  # noqa: E402

ROWS, BLOCKS, FAIL_ID = 120, 4, 65  # FAIL_ID is in block 2 (ids 60..89)
RETRY = {"max_retries": 2, "retry_exceptions": True}


@pytest.fixture(scope="module")
def local_ray() -> Any:
    # The Ray workers cannot import the test modules: pickle their functions by value.
    import conftest
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(conftest)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    yield ray
    ray.shutdown()


def dataset(first: int = 0, marker: Path | None = None, always: bool = False) -> Any:
    """Rows ``first .. first + ROWS`` in ``BLOCKS`` blocks, columns ``id`` and ``input_ids``.
    With ``marker``: the first attempt of the task holding ``first + FAIL_ID`` (the marker file
    does not exist yet; the attempt creates it) puts the token 70000 (outside u16) in that row,
    so the guideloom writer fails in the middle of that part; ``always``: every attempt does."""

    def docs(batch: Any) -> Any:
        ids = batch.column("id").to_pylist()
        lists = [row_tokens(i) for i in ids]
        if marker is not None and first + FAIL_ID in ids:
            if always or not marker.exists():
                marker.touch()
                lists[ids.index(first + FAIL_ID)].append(70_000)
        return pa.table({"id": pa.array(ids, pa.int64()), "input_ids": pa.array(lists, pa.list_(pa.int32()))})

    return ray.data.range(ROWS, override_num_blocks=BLOCKS).map_batches(
        lambda b: b.set_column(0, "id", pa.compute.add(b.column("id"), first)), batch_format="pyarrow", **RETRY
    ).map_batches(docs, batch_format="pyarrow", batch_size=10, **RETRY)


def expected_stream(*firsts: int) -> list[int]:
    return rows_stream(ROWS, *firsts)


def read_tokens(root: Path) -> list[int]:
    return read_stream(root).tolist()


def test_issue30_ray_retried_task_equals_clean_run_and_orphan_is_gc_listed(local_ray: Any, tmp_path: Path) -> None:
    clean, retried = tmp_path / "clean", tmp_path / "retried"
    dataset().write_datasink(GuideloomDatasink(clean, mode="error"), ray_remote_args=RETRY)
    sink = GuideloomDatasink(retried, column="input_ids", dtype="u16", mode="error")
    dataset(marker=tmp_path / "failed-once").write_datasink(sink, ray_remote_args=RETRY)
    assert (tmp_path / "failed-once").exists()
    assert_same_storage(clean, retried, expected_stream(0))
    assert parts.gc(clean) == []
    assert parts.gc(retried) == [f"_parts/{sink.job}/{2:06}-0"]
    # One sink writes one dataset.
    with pytest.raises(Exception, match="writes one dataset"):
        dataset().write_datasink(sink)


def test_issue30_ray_failed_write_aborts(local_ray: Any, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    dataset().write_datasink(GuideloomDatasink(root), ray_remote_args=RETRY)
    committed = committed_files(root)
    sink = GuideloomDatasink(root, mode="append")
    with pytest.raises(Exception, match="70000 does not fit"):
        dataset(first=ROWS, marker=tmp_path / "m", always=True).write_datasink(sink, ray_remote_args=RETRY)
    assert not (root / "_parts" / sink.job).exists()
    assert committed_files(root) == committed
    with pytest.raises(errors.ConfigError):
        GuideloomDatasink(root, mode="ignore")
