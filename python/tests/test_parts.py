"""Issue 30: parts written by many writers and one atomic commit (guideloom.parts), engine-free:
the committed storage reads like a single writer's through Python, the Rust readers and the CLI;
duplicates keep the lowest attempt; disagreeing parts, missing or short files and escaping paths
are typed errors; a process killed before the commit leaves the previous manifest in force."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickle
import signal
from pathlib import Path

import numpy as np
import pytest

import guideloom as gl
from guideloom import errors
from guideloom.parts import PartWriter, Receipt, abort, commit_parts, gc

from conftest import run_cli
from test_remote import s3  # noqa: F401 (the fixture)


def docs(p: int, attempt: int = 0) -> list[list[int]]:
    """Partition ``p``'s documents (attempt ``attempt`` holds other tokens, to tell which is kept)."""
    return [[p * 1000 + attempt * 100 + d * 10 + i for i in range(3 + 2 * d)] for d in range(p + 1)]


def flat(p: int, attempt: int = 0) -> tuple[np.ndarray, np.ndarray]:
    ds = docs(p, attempt)
    values = np.array([t for d in ds for t in d], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in ds])]).astype(np.int64)
    return values, offsets


def write_part(root: Path | str, p: int, attempt: int = 0, job: str = "job", dtype: str = "u16") -> Receipt:
    values, offsets = flat(p, attempt)
    with PartWriter(root, job, p, attempt, dtype=dtype) as w:
        assert w.write(values, offsets) == len(values)
    assert w.receipt is not None
    return w.receipt


def stream(root: Path | str) -> list[int]:
    ts = gl.TokenWindows(root, seq_len=1)
    return ts.read_batch(np.arange(len(ts))).ravel().tolist()


def batches(root: Path | str) -> list[tuple[list[int], list[list[int]]]]:
    loader = gl.Loader(gl.TokenWindows(root, seq_len=4), batch_size=3, shuffle=True, seed=5, epochs=2)
    return [(b.indices.tolist(), b.data.tolist()) for b in loader]


def test_issue30_parts_in_any_order_commit_to_what_a_single_writer_writes(tmp_path):
    root = tmp_path / "parts"
    receipts = [write_part(root, 2), write_part(root, 0), write_part(root, 1, attempt=1), write_part(root, 1)]
    commit_parts(root, receipts, mode="error")
    expected = [t for p in range(3) for d in docs(p) for t in d]
    assert stream(root) == expected
    # Each committed shard file holds exactly its partition's tokens (little-endian u16).
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["format_version"] == 2
    assert [s["path"] for s in manifest["shards"]] == [f"_parts/job/{p:06}-0/shard-00000" for p in range(3)]
    for p, s in enumerate(manifest["shards"]):
        data = (root / (s["path"] + ".stream")).read_bytes()
        assert data == np.array(flat(p)[0], "<u2").tobytes()
    # The single-writer reference: the CLI's ingest of the same documents in partition order.
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"ids": d}) + "\n" for p in range(3) for d in docs(p)))
    single = tmp_path / "single"
    run_cli("ingest", "jsonl", "--out", str(single), "--tokens-field", "ids", "--dtype", "u16", str(jsonl))
    assert stream(single) == expected
    assert batches(root) == batches(single)
    assert "ok" in run_cli("inspect", str(root), "--verify").lower()
    assert gc(root) == ["_parts/job/000001-1"]
    assert gc(root, apply=True) == ["_parts/job/000001-1"]
    assert gc(root) == [] and stream(root) == expected


def test_issue30_duplicates_keep_the_lowest_attempt(tmp_path):
    receipts = [write_part(tmp_path, 0, attempt=3), write_part(tmp_path, 0, attempt=1), write_part(tmp_path, 0, 2)]
    commit_parts(tmp_path, receipts)
    assert stream(tmp_path) == [t for d in docs(0, 1) for t in d]
    assert gc(tmp_path) == ["_parts/job/000000-2", "_parts/job/000000-3"]


def test_issue30_disagreeing_dtypes_are_refused(tmp_path):
    a = write_part(tmp_path, 0, dtype="u16")
    b = write_part(tmp_path, 1, dtype="u32")
    with pytest.raises(errors.PartMismatchError) as e:
        commit_parts(tmp_path, [a, b])
    assert (e.value.partition, e.value.field, e.value.expected, e.value.found) == (1, "dtype", '"<u2"', '"<u4"')
    assert isinstance(e.value, errors.StorageMismatchError)
    assert not (tmp_path / "manifest.json").exists()
    commit_parts(tmp_path, [a])
    with pytest.raises(errors.PartMismatchError):
        commit_parts(tmp_path, [b], mode="append")
    with pytest.raises(errors.StorageExistsError):
        commit_parts(tmp_path, [write_part(tmp_path, 2)], mode="error")
    with pytest.raises(errors.ConfigError):
        commit_parts(tmp_path, [a], mode="sideways")


def test_issue30_receipts_pickle_and_round_trip_through_json(tmp_path):
    r = write_part(tmp_path, 4, attempt=2)
    assert (r.job, r.partition, r.attempt, r.dtype, r.kind) == ("job", 4, 2, "<u2", "stream")
    assert [s["path"] for s in r.shards] == ["_parts/job/000004-2/shard-00000"]
    assert r.shards[0]["elements"] == sum(len(d) for d in docs(4)) and r.shards[0]["bytes"] == 2 * r.shards[0]["elements"]
    assert pickle.loads(pickle.dumps(r)) == r
    assert Receipt.from_json(r.to_json()) == r
    for bad in ["../shard-00000", "/abs/shard-00000", "_parts/job/000004-2/../../x", "_parts/other/000004-2/shard-00000"]:
        with pytest.raises(errors.ReceiptError):
            Receipt.from_json(r.to_json().replace("_parts/job/000004-2/shard-00000", bad))
    with pytest.raises(errors.ReceiptError):
        PartWriter(tmp_path, "../escape", 0, 0)


def test_issue30_a_receipt_naming_a_missing_or_short_file_is_an_error_naming_it(tmp_path):
    receipts = [write_part(tmp_path, 0), write_part(tmp_path, 1)]
    f = tmp_path / "_parts/job/000001-0/shard-00000.stream"
    size = f.stat().st_size
    os.truncate(f, size - 2)
    with pytest.raises(errors.PartFileError) as e:
        commit_parts(tmp_path, receipts)
    assert (e.value.path, e.value.partition, e.value.expected, e.value.found) == (str(f), 1, size, size - 2)
    f.unlink()
    with pytest.raises(errors.PartFileError) as e:
        commit_parts(tmp_path, receipts)
    assert (e.value.path, e.value.found) == (str(f), None)
    assert not (tmp_path / "manifest.json").exists()


def test_issue30_write_checks_values_and_offsets(tmp_path):
    with PartWriter(tmp_path, "job", 0, 0) as w:
        with pytest.raises(errors.FormatError):
            w.write(np.array([1, 70000]))
        with pytest.raises(errors.FormatError):
            w.write(np.array([-1]))
        with pytest.raises(errors.FormatError):
            w.write(np.array([1, 2, 3]), np.array([0, 2]))
        with pytest.raises(errors.FormatError):
            w.write(np.array([1.5]))
        assert w.write_documents([[1, 2], [3]]) == 3
        assert w.write(np.array([4], np.uint16), None) == 4
    commit_parts(tmp_path, [w.receipt])
    assert stream(tmp_path) == [1, 2, 3, 4]


def _die_while_writing(root: str) -> None:
    w = PartWriter(root, "second", 0, 0)
    w.write(np.arange(1000) % 50000)
    os.kill(os.getpid(), signal.SIGKILL)


def test_issue30_a_process_killed_before_the_commit_leaves_the_previous_manifest(tmp_path):
    commit_parts(tmp_path, [write_part(tmp_path, 0, job="first")])
    before = (tmp_path / "manifest.json").read_bytes()
    expected = stream(tmp_path)
    write_part(tmp_path, 1, job="second")  # a part written, never committed
    child = mp.get_context("spawn").Process(target=_die_while_writing, args=(str(tmp_path),))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    assert (tmp_path / "manifest.json").read_bytes() == before
    assert stream(tmp_path) == expected
    assert gc(tmp_path) == ["_parts/second"]
    abort(tmp_path, "second")
    assert gc(tmp_path) == [] and stream(tmp_path) == expected


def test_issue30_a_storage_committed_from_parts_reads_the_same_from_s3(tmp_path, s3):  # noqa: F811
    """Issue 30 acceptance: a storage committed from parts (its manifest naming part files by
    relative path, format version 2), uploaded to the S3 test server, reads the same stream,
    fingerprint and loader batches from s3:// as locally, and passes ``inspect --verify``."""
    root = tmp_path / "parts"
    receipts = [write_part(root, p) for p in (1, 0, 2)]
    commit_parts(root, receipts, mode="error")
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["format_version"] == 2
    assert all(s["path"].startswith("_parts/job/") for s in manifest["shards"])
    run_cli("inspect", "--verify", str(root))
    run_cli("upload", str(root), "s3://bucket/parts")
    local = gl.TokenWindows(root, seq_len=4)
    remote = gl.TokenWindows("s3://bucket/parts", seq_len=4)
    assert len(remote) == len(local) and remote.fingerprint() == local.fingerprint()
    every = np.arange(len(local))
    assert remote.read_batch(every).tolist() == local.read_batch(every).tolist()
    assert local.read_batch(every).ravel().tolist()[: 4 * len(local)] == [
        t for p in range(3) for d in docs(p) for t in d
    ][: 4 * len(local)]
    a = [b.data.tolist() for b in gl.Loader(remote, batch_size=3, shuffle=True, seed=5, epochs=2)]
    b = [b.data.tolist() for b in gl.Loader(local, batch_size=3, shuffle=True, seed=5, epochs=2)]
    assert a == b and len(a) > 0


def test_issue30_parts_written_straight_to_s3_commit_there_and_read_as_a_local_commit(tmp_path, s3):  # noqa: F811
    """Issue 30: parts written by ``PartWriter`` to an ``s3://`` root (out of partition order,
    partition 1 twice) are invisible until ``commit_parts`` on the URL, which gives the stream,
    fingerprint and loader batches of the same parts committed locally; ``gc`` on the URL lists
    the duplicate attempt and deletes it; ``abort`` removes an uncommitted job's objects."""
    url = "s3://bucket/straight"
    remote = [write_part(url, 2), write_part(url, 0), write_part(url, 1, attempt=1), write_part(url, 1)]
    with pytest.raises(errors.StorageError):
        gl.TokenWindows(url, seq_len=4)
    local_root = tmp_path / "local"
    commit_parts(local_root, [write_part(local_root, p) for p in (0, 1, 2)], mode="error")
    commit_parts(url, remote, mode="error")
    local, there = gl.TokenWindows(local_root, seq_len=4), gl.TokenWindows(url, seq_len=4)
    assert there.fingerprint() == local.fingerprint() and len(there) == len(local)
    assert stream(url) == stream(local_root) == [t for p in range(3) for d in docs(p) for t in d]
    assert batches(url) == batches(local_root)
    assert "ok" in run_cli("inspect", url, "--verify").lower()
    assert gc(url) == ["_parts/job/000001-1"]
    assert gc(url, apply=True) == ["_parts/job/000001-1"]
    assert gc(url) == [] and stream(url) == stream(local_root)
    with pytest.raises(errors.StorageExistsError):
        commit_parts(url, remote, mode="error")
    write_part(url, 0, job="late")
    assert gc(url) == ["_parts/late"]
    abort(url, "late")
    assert gc(url) == [] and stream(url) == stream(local_root)
