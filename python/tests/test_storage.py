"""Storages: modes, the writer's context manager, manifests, stream-with-meta's contract, and the
layout shared with the Rust library and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

import guideloom as gl
from guideloom import errors

from conftest import U16Tokens, interop, run_cli, stream_of, write_tokens


def test_stream_storage_reads_windows_across_shards(tokens, records):
    st = gl.StreamStorage(tokens, storage_format=U16Tokens())
    stream = stream_of(records)
    assert len(st) == len(stream)
    for offset, length in [(0, 10), (len(stream) - 7, 7), (100, 1000), (5, 0)]:
        assert st.read(offset, length).tolist() == stream[offset:offset + length].tolist()
    got = st.read_many([(3, 4), (200, 50)])
    assert [g.tolist() for g in got] == [stream[3:7].tolist(), stream[200:250].tolist()]


def test_reads_are_arrays_over_rust_memory(tokens):
    w = gl.StreamStorage(tokens, storage_format=U16Tokens()).read(0, 8)
    assert w.dtype == np.dtype("<u2")
    assert not w.flags.owndata and w.base is not None


def test_context_manager_commits_on_clean_exit_and_keeps_the_last_commit_on_error(tmp_path):
    p = tmp_path / "s"
    with gl.StreamStorage(p, storage_format=U16Tokens(), mode="w") as st:
        st.writer.append([1, 2, 3])
    with pytest.raises(RuntimeError):
        with gl.StreamStorage(p, storage_format=U16Tokens(), mode="a") as st:
            st.writer.append([4, 5])
            st.writer.commit()
            st.writer.append([6, 7, 8])
            raise RuntimeError("boom")
    st = gl.StreamStorage(p, storage_format=U16Tokens())
    assert st.read(0, len(st)).tolist() == [1, 2, 3, 4, 5]


def test_modes(tmp_path):
    p = tmp_path / "s"
    with pytest.raises(errors.StorageNotFoundError):
        gl.StreamStorage(p, storage_format=U16Tokens())
    with gl.StreamStorage(p, storage_format=U16Tokens(), mode="w") as st:
        st.writer.append([1])
    with pytest.raises(FileExistsError):
        gl.StreamStorage(p, storage_format=U16Tokens(), mode="w")
    with gl.StreamStorage(p, storage_format=U16Tokens(), mode="a") as st:
        st.writer.append([2])
        assert len(st.reader) == 1  # the last commit
        st.commit()
        assert len(st.reader) == 2
    with pytest.raises(ValueError, match="mode"):
        gl.StreamStorage(p, storage_format=U16Tokens(), mode="x")
    ro = gl.StreamStorage(p, storage_format=U16Tokens())
    with pytest.raises(errors.StorageClosedError):
        ro.writer


def test_a_second_writer_is_refused_while_one_is_open(tmp_path):
    p = tmp_path / "s"
    st = gl.StreamStorage(p, storage_format=U16Tokens(), mode="w")
    with pytest.raises(errors.StorageLockedError):
        gl.StreamStorage(p, storage_format=U16Tokens(), mode="a")
    st.close()
    gl.StreamStorage(p, storage_format=U16Tokens(), mode="a").close()


def test_python_formats_are_recorded_by_name_and_dtype_and_reopening_checks_the_dtype(tokens):
    m = json.loads((tokens / "manifest.json").read_text())
    assert m["format"] == {"name": "python:conftest.U16Tokens", "params": {}}
    assert m["dtype"] == "<u2"
    with pytest.raises(errors.StorageMismatchError) as e:
        gl.StreamStorage(tokens, storage_format=U16Tokens(np.dtype("<u4")))
    assert isinstance(e.value, ValueError) and e.value.path == str(tokens / "manifest.json")
    # Without a format, the recorded class is imported by name (never unpickled).
    st = gl.StreamStorage(tokens)
    assert type(st.storage_format).__name__ == "U16Tokens"


def test_structured_storages_are_the_rust_columns_layout(tmp_path):
    dt = np.dtype([("tokens", "<u4"), ("mask", "u1")])
    with gl.StreamStorage(tmp_path / "c", storage_format=gl.StreamNumpyFormat(dt), mode="w") as st:
        st.writer.append({"tokens": np.arange(4), "mask": np.array([1, 1, 0, 1])}, shard=2)
    m = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert m["format"]["name"] == "columns" and m["dtype"] == [["tokens", "<u4"], ["mask", "|u1"]]
    # numpy's own memmap reads the shard file (the layout is numpy's).
    raw = np.fromfile(tmp_path / "c" / "shard-00002.stream", dtype=dt)
    assert raw["tokens"].tolist() == [0, 1, 2, 3]
    # The CLI (the Rust library) opens it and verifies its checksums.
    out = run_cli("inspect", str(tmp_path / "c"), "--verify")
    assert "columns" in out and "4 elements" in out
    # Reopened without a format: the built-in StreamNumpyFormat.
    w = gl.StreamStorage(tmp_path / "c").read(1, 2)
    assert w["tokens"].tolist() == [1, 2] and w["mask"].tolist() == [1, 0]


def test_cli_reads_a_storage_written_from_python(tokens, records):
    stream = stream_of(records)
    out = run_cli("inspect", str(tokens))
    assert str(len(stream)) in out
    lines = [json.loads(x) for x in run_cli("batches", str(tokens), "--seq-len", "16", "--batch-size", "2",
                                            "--max-batches", "2").splitlines()]
    assert lines[0]["tokens"] == [stream[0:16].tolist(), stream[16:32].tolist()]
    assert lines[1]["windows"] == [2, 3]


def test_python_reads_a_storage_written_by_the_cli(tmp_path):
    sample = interop("nanogpt") / "train.bin"
    run_cli("import", str(sample), "--format", "nanogpt", "--dtype", "u16", "--out", str(tmp_path / "n"))
    st = gl.StreamStorage(tmp_path / "n")
    ids = np.fromfile(sample, dtype="<u2")
    assert st.read(0, len(st)).tolist() == ids.tolist()


class BadMeta:
    def __init__(self, pairs, array, size=None):
        self.stream_dtype = np.dtype("<u2")
        self.pairs, self.array, self._size = pairs, array, size

    def size(self, data):
        return len(self.pairs) if self._size is None else self._size

    def pack(self, data):
        for p in self.pairs:
            yield p
        return self.array


@pytest.mark.parametrize(
    "pairs, array, size, message",
    [
        ([(0, b"a"), (1, b"b"), (0, b"c")], np.arange(3, dtype="<u2"), None, "element 2"),
        ([(0, b"a"), (1, None)], np.arange(2, dtype="<u2"), None, "element 1"),
        ([(0, None)], np.arange(1, dtype="<u2"), None, "element 0"),
        ([(0, b"a")], np.arange(2, dtype="<u2"), None, "2 elements but size"),
        ([(0, b"a")], np.arange(1, dtype="<u2"), 2, "1 pairs but size"),
        ([(0, b"a"), (0, None)], np.arange(2, dtype="<u2"), 1, "more than size"),
        ([(0, "text")], np.arange(1, dtype="<u2"), None, "payload of element 0 is str"),
        ([([1], b"a")], np.arange(1, dtype="<u2"), None, "not hashable"),
        ([(0, b"a")], np.arange(1, dtype="<u4"), None, "dtype uint32"),
        ([(0, b"a")], None, None, "no stream array"),
    ],
)
def test_stream_with_meta_contract_violations_name_the_element(tmp_path, pairs, array, size, message):
    p = tmp_path / "m"
    good = BadMeta([(0, b"x"), (0, None)], np.array([7, 8], dtype="<u2"))
    with gl.StreamWithMetaStorage(p, storage_format=good, mode="w") as st:
        st.writer.append(None)
    with gl.StreamWithMetaStorage(p, storage_format=BadMeta(pairs, array, size), mode="a") as st:
        with pytest.raises(errors.FormatError, match=message):
            st.writer.append(None)
    assert len(gl.StreamWithMetaStorage(p, storage_format=good)) == 2


def test_stream_with_meta_yielding_the_array_is_an_error(tmp_path):
    class Yields(BadMeta):
        def pack(self, data):
            yield (0, b"a")
            yield self.array

    with gl.StreamWithMetaStorage(tmp_path / "m", storage_format=Yields([(0, b"a")], np.arange(1, dtype="<u2"), 2), mode="w") as st:
        with pytest.raises(errors.FormatError, match="yielded an array at element 1"):
            st.writer.append(None)
