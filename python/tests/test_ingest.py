"""guideloom.ingest (issue 30): ``parallel`` on spawned processes, parts and one commit, and the
Arrow-to-documents step the Spark and Ray writers share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import committed_files, loader_batches, read_stream, token_documents

from guideloom import errors, ingest, parts


def docs_of_input(i: int) -> list[np.ndarray]:
    """Input ``i``'s documents (module level: a spawned worker imports it by name)."""
    return token_documents(3 + i % 4, seed=100 + i)


def docs_failing_on_5(i: int) -> list[np.ndarray]:
    if i == 5:
        raise RuntimeError("issue30 injected failure on input 5")
    return docs_of_input(i)


def stream_of(documents: list[np.ndarray]) -> list[int]:
    """The token stream a storage of ``documents`` holds (a part is a token stream storage)."""
    return np.concatenate(documents).tolist() if documents else []


def test_issue30_parallel_result_independent_of_num_workers(tmp_path: Path) -> None:
    inputs = list(range(9))
    expected = [d for i in inputs for d in docs_of_input(i)]
    one = ingest.parallel(docs_of_input, inputs, tmp_path / "one", num_workers=1, inputs_per_part=2)
    two = ingest.parallel(docs_of_input, inputs, tmp_path / "two", num_workers=2, inputs_per_part=2)
    # 9 inputs in partitions of 2: partitions 0..4, receipts in partition order.
    assert [r.partition for r in one] == [0, 1, 2, 3, 4]
    assert [r.partition for r in two] == [0, 1, 2, 3, 4]
    assert committed_files(tmp_path / "one") == committed_files(tmp_path / "two")
    assert read_stream(tmp_path / "two").tolist() == stream_of(expected)
    assert len(loader_batches(tmp_path / "one")) > 0
    for a, b in zip(loader_batches(tmp_path / "one"), loader_batches(tmp_path / "two"), strict=True):
        np.testing.assert_array_equal(a, b)
    # Nothing left over: every part file is referenced by the manifest.
    assert parts.gc(tmp_path / "two") == []


def test_issue30_parallel_failure_aborts_and_keeps_last_commit(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    ingest.parallel(docs_of_input, [0, 1], out, num_workers=0)
    before = committed_files(out)
    with pytest.raises(RuntimeError, match="injected failure on input 5"):
        ingest.parallel(docs_failing_on_5, list(range(8)), out, num_workers=2, mode="append")
    assert committed_files(out) == before
    # The failed job's parts are gone; only the first job's parts are under _parts/.
    assert len(list((out / "_parts").iterdir())) == 1
    assert parts.gc(out) == []
    # mode="error" refuses the existing storage; "append" and "overwrite" do what they say.
    with pytest.raises(errors.StorageExistsError):
        ingest.parallel(docs_of_input, [2], out, num_workers=0, mode="error")
    ingest.parallel(docs_of_input, [2], out, num_workers=0, mode="append")
    assert read_stream(out).tolist() == stream_of(docs_of_input(0) + docs_of_input(1) + docs_of_input(2))
    ingest.parallel(docs_of_input, [3], out, num_workers=0, mode="overwrite")
    assert read_stream(out).tolist() == stream_of(docs_of_input(3))


def test_issue30_parallel_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError):
        ingest.parallel(docs_of_input, [0], tmp_path / "x", num_workers=-1)
    with pytest.raises(errors.ConfigError):
        ingest.parallel(docs_of_input, [0], tmp_path / "x", inputs_per_part=0)
    with pytest.raises(errors.ConfigError):
        ingest.parallel(docs_of_input, [0], tmp_path / "x", mode="ignore")
    with pytest.raises(errors.ConfigError):
        ingest.parallel(docs_of_input, [0], tmp_path / "x", dtype="i64")
    with pytest.raises(errors.ConfigError):
        ingest.parallel(docs_of_input, [0], tmp_path / "x", start_method="fork")
    assert not (tmp_path / "x").exists()


def test_issue30_arrow_documents_views_list_buffers() -> None:
    pa = pytest.importorskip("pyarrow")
    column = pa.array([[1, 2, 3], [], [65535], [7, 8]], type=pa.list_(pa.int64()))
    sliced = column.slice(1, 3)  # offsets start at 3, not 0
    values, offsets = ingest.arrow_documents(sliced, np.uint16)
    assert values.dtype == np.uint16 and values.tolist() == [65535, 7, 8]
    assert offsets.dtype == np.int64 and offsets.tolist() == [0, 0, 1, 3]
    large = pa.array([[5], [6, 7]], type=pa.large_list(pa.int32()))
    values, offsets = ingest.arrow_documents(pa.chunked_array([large]), "u32")
    assert values.dtype == np.uint32 and values.tolist() == [5, 6, 7] and offsets.tolist() == [0, 1, 3]
    with pytest.raises(errors.FormatError, match="65536 does not fit"):
        ingest.arrow_documents(pa.array([[1], [65536]], type=pa.list_(pa.int32())), np.uint16)
    with pytest.raises(errors.FormatError, match="-1 does not fit"):
        ingest.arrow_documents(pa.array([[-1]], type=pa.list_(pa.int32())), np.uint32)
    with pytest.raises(errors.FormatError, match="null documents"):
        ingest.arrow_documents(pa.array([[1], None], type=pa.list_(pa.int32())), np.uint16)
    with pytest.raises(errors.FormatError, match="null tokens"):
        ingest.arrow_documents(pa.array([[1, None]], type=pa.list_(pa.int32())), np.uint16)
    with pytest.raises(errors.FormatError, match="list<integer>"):
        ingest.arrow_documents(pa.array(["a"]), np.uint16)


def test_issue30_documents_to_arrays() -> None:
    values, offsets = ingest.documents_to_arrays([[1, 2], np.array([3], np.int64), []], "u16")
    assert values.dtype == np.uint16 and values.tolist() == [1, 2, 3] and offsets.tolist() == [0, 2, 3, 3]
    with pytest.raises(errors.FormatError, match="document 0"):
        ingest.documents_to_arrays([np.zeros((2, 2), np.int64)], "u16")
    with pytest.raises(errors.FormatError, match="70000 does not fit"):
        ingest.documents_to_arrays([[70000]], "u16")
