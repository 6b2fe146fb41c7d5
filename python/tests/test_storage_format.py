"""The seed's formats and its three example formats, with the documented outputs."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import guideloom as gl
from guideloom import errors, storage_format, types


def test_built_in_formats_import_from_both_places():
    assert gl.StreamNumpyFormat is storage_format.StreamNumpyFormat
    assert gl.DocumentPickleFormat is storage_format.DocumentPickleFormat
    assert set(types.__all__) >= {"StreamStorageFormat", "DocumentStorageFormat", "StreamWithMetaStorageFormat", "StorageFormat"}


def test_stream_numpy_format_needs_a_structured_dtype():
    with pytest.raises(ValueError, match="structured"):
        gl.StreamNumpyFormat(np.dtype("<u2"))


def test_stream_numpy_format_pack_and_unpack():
    dt = np.dtype([("tokens", "<u4"), ("mask", "u1")])
    f = gl.StreamNumpyFormat(dt, data_type=dict)
    packed = f.pack({"tokens": np.array([5, 6, 7]), "mask": np.array([1, 0, 1])})
    assert packed.dtype == dt and packed.tolist() == [(5, 1), (6, 0), (7, 1)]
    out = f.unpack(packed, np.array([3]), np.array([0]))
    assert out["tokens"].tolist() == [5, 6, 7] and out["mask"].tolist() == [1, 0, 1]
    assert out["tokens"].base is not None  # a view of the read array


def test_stream_numpy_format_errors_name_the_field():
    f = gl.StreamNumpyFormat(np.dtype([("tokens", "<u4"), ("mask", "u1")]))
    with pytest.raises(errors.FormatError, match="'mask'") as e:
        f.pack({"tokens": np.arange(3)})
    assert e.value.field == "mask"
    with pytest.raises(errors.FormatError, match="'mask' has 2 values but field 'tokens' has 3"):
        f.pack({"tokens": np.arange(3), "mask": np.arange(2)})
    with pytest.raises(ValueError, match="2 dimensions"):
        f.pack({"tokens": np.zeros((2, 2)), "mask": np.arange(2)})


def test_document_pickle_format_round_trips_and_warns_in_its_docstring():
    f = gl.DocumentPickleFormat()
    assert f.unpack(f.pack({"a": [1, 2]}), 3) == {"a": [1, 2]}
    assert f.pack(7) == pickle.dumps(7)
    assert "trusted data" in (gl.DocumentPickleFormat.__doc__ or "")
    assert "execute" in (gl.DocumentPickleFormat.__doc__ or "")


class ShardIds:
    """The seed's custom stream format: unpack reports each element's shard."""

    def __init__(self, stream_dtype=np.dtype(np.int64)):
        self.stream_dtype = np.dtype(stream_dtype)

    def pack(self, data):
        return data["tokens"]

    def unpack(self, stream, shard_lengths, shards):
        shard_ids = np.concat([
            np.full((length,), shard, dtype=np.int64)
            for length, shard in zip(shard_lengths.tolist(), shards.tolist(), strict=True)
        ])
        return {"tokens": stream, "shard": shard_ids}


def test_seed_example_shard_ids_in_unpack(tmp_path):
    with gl.StreamStorage(tmp_path / "s", storage_format=ShardIds(), mode="w") as st:
        st.writer.append({"tokens": np.array([1, 2, 3], dtype=np.int64)}, shard=0)
        st.writer.append({"tokens": np.array([4, 5], dtype=np.int64)}, shard=1)
        st.writer.append({"tokens": np.array([6, 7, 8, 9], dtype=np.int64)}, shard=2)
    st = gl.StreamStorage(tmp_path / "s", storage_format=ShardIds())
    w = st.reader.read(2, 5)
    assert w["tokens"].tolist() == [3, 4, 5, 6, 7]
    assert w["shard"].tolist() == [0, 1, 1, 2, 2]
    w0, w1 = st.reader.read_many([(0, 2), (4, 5)])
    assert w0["shard"].tolist() == [0, 0] and w1["shard"].tolist() == [1, 2, 2, 2, 2]


class Concepts:
    """The seed's stream-with-meta example: one concept payload per chunk."""

    def __init__(self, stream_dtype=np.dtype(np.int64)):
        self.stream_dtype = np.dtype(stream_dtype)

    def size(self, data):
        return len(data["tokens"])

    def pack(self, data):
        for chunk_id in data["chunk_ids"]:
            payload = data["concepts"][int(chunk_id)].tobytes()
            yield ((data["document_id"], int(chunk_id)), payload)
        return np.asarray(data["tokens"], dtype=self.stream_dtype)

    def unpack(self, stream_data, document_shard, document_index, document_data):
        return {
            "tokens": stream_data,
            "annotation_index": document_index,
            "annotations": [np.frombuffer(payload, dtype=np.int32) for payload in document_data],
            "shards": document_shard,
        }


def test_seed_example_concept_payloads(tmp_path):
    concepts = [np.array([10, 11], dtype=np.int32), np.array([20], dtype=np.int32), np.array([30, 31, 32], dtype=np.int32)]
    with gl.StreamWithMetaStorage(tmp_path / "m", storage_format=Concepts(), mode="w") as st:
        st.writer.append(
            {"document_id": 0, "tokens": [1, 2, 3, 4, 5], "chunk_ids": [0, 0, 1, 2, 2], "concepts": concepts}, shard=0
        )
        st.writer.append({"document_id": 1, "tokens": [6, 7], "chunk_ids": [1, 1], "concepts": concepts}, shard=1)
    st = gl.StreamWithMetaStorage(tmp_path / "m", storage_format=Concepts())
    assert len(st) == 7
    w = st.reader.read(1, 5)
    assert w["tokens"].tolist() == [2, 3, 4, 5, 6]
    # Remapped for this read: payloads in first-touch order.
    assert w["annotation_index"].tolist() == [0, 1, 2, 2, 3]
    assert [a.tolist() for a in w["annotations"]] == [[10, 11], [20], [30, 31, 32], [20]]
    assert w["shards"].tolist() == [0, 0, 0, 1]
    assert w["annotation_index"].dtype == np.int32 and w["shards"].dtype == np.int64


def test_seed_example_pickle_documents(tmp_path):
    docs = [{"url": "https://example.org", "score": 0.9}, ["a", 1], None]
    with gl.DocumentStorage(tmp_path / "d", storage_format=gl.DocumentPickleFormat(), mode="w") as ds:
        for i, d in enumerate(docs):
            ds.writer.append(d, shard=i % 2)
    ds = gl.DocumentStorage(tmp_path / "d", storage_format=gl.DocumentPickleFormat())
    # Global index order is shard order: shard 0 holds documents 0 and 2.
    assert len(ds) == 3
    assert [ds[i] for i in range(3)] == [docs[0], docs[2], docs[1]]
    assert ds.reader.read(-1) == docs[1]
    assert ds.__getitems__([2, 0]) == [docs[1], docs[0]]


class ShardTagged:
    def __init__(self, stream_dtype=np.dtype("<u2")):
        self.stream_dtype = np.dtype(stream_dtype)

    def pack(self, data):
        return np.asarray(data, self.stream_dtype)

    def unpack(self, stream, shard_lengths, shards):
        raise AssertionError("unpack_many is used")

    def unpack_many(self, stream, offsets, shard_lengths, shards):
        return [(stream[a:b], int(s[0])) for a, b, s in zip(offsets[:-1], offsets[1:], shards)]


def test_unpack_many_decodes_a_read_in_one_call(tmp_path):
    with gl.StreamStorage(tmp_path / "t", storage_format=ShardTagged(), mode="w") as st:
        st.writer.append([1, 2, 3], shard=0)
        st.writer.append([4, 5, 6], shard=1)
    st = gl.StreamStorage(tmp_path / "t", storage_format=ShardTagged())
    (a, sa), (b, sb) = st.read_many([(0, 2), (3, 3)])
    assert a.tolist() == [1, 2] and sa == 0 and b.tolist() == [4, 5, 6] and sb == 1
