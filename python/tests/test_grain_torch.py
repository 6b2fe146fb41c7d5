"""guideloom sources inside Grain (MapDataset, DataLoader with two worker processes) and torch's
DataLoader (two workers, fork and spawn): exactly the records of direct indexing."""

from __future__ import annotations

import numpy as np
import pytest

import guideloom as gl


def test_grain_map_dataset_pipeline(tokens):
    grain = pytest.importorskip("grain")
    ts = gl.TokenWindows(tokens, seq_len=32)
    ds = grain.MapDataset.source(ts).shuffle(seed=1).batch(4)
    batches = [np.asarray(b) for b in ds]
    got = np.concatenate(batches)
    assert got.shape == (len(ts), 32)
    # A permutation of the windows: every window once, each equal to direct indexing.
    rows = sorted(map(tuple, got.tolist()))
    assert rows == sorted(tuple(ts[i].tolist()) for i in range(len(ts)))
    order = grain.MapDataset.source(gl.RangeDataSource(0, len(ts))).shuffle(seed=1)
    assert got.tolist() == [ts[i].tolist() for i in order]


def test_grain_data_loader_with_two_workers(tokens):
    grain = pytest.importorskip("grain")
    ts = gl.TokenWindows(tokens, seq_len=32)
    sampler = grain.samplers.IndexSampler(num_records=len(ts), shuffle=True, seed=3, num_epochs=1)
    loader = grain.DataLoader(
        data_source=ts, sampler=sampler, worker_count=2, operations=[grain.transforms.Batch(batch_size=4)]
    )
    got = np.concatenate([np.asarray(b) for b in loader])
    # The same pipeline over the record indices (each worker batches its own records).
    direct = grain.DataLoader(
        data_source=gl.RangeDataSource(0, len(ts)), sampler=sampler, worker_count=2,
        operations=[grain.transforms.Batch(batch_size=4)],
    )
    order = np.concatenate([np.asarray(b) for b in direct]).tolist()
    assert sorted(order) == list(range(len(ts)))
    assert got.tolist() == [ts[i].tolist() for i in order]


def test_grain_data_loader_over_documents(tmp_path):
    grain = pytest.importorskip("grain")
    with gl.DocumentStorage(tmp_path / "d", storage_format=gl.DocumentPickleFormat(), mode="w") as ds:
        for i in range(20):
            ds.writer.append({"i": i}, shard=i % 3)
    docs = gl.DocumentStorage(tmp_path / "d", storage_format=gl.DocumentPickleFormat())
    sampler = grain.samplers.IndexSampler(num_records=len(docs), shuffle=False, num_epochs=1)
    got = list(grain.DataLoader(data_source=docs, sampler=sampler, worker_count=2))
    assert got == [docs[i] for i in range(len(docs))]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_torch_data_loader_with_two_workers(tokens, method):
    torch = pytest.importorskip("torch")
    ts = gl.TokenWindows(tokens, seq_len=32)
    loader = torch.utils.data.DataLoader(ts, batch_size=4, shuffle=False, num_workers=2, multiprocessing_context=method)
    got = torch.cat(list(loader)).numpy()
    assert got.tolist() == ts.read_batch(range(len(ts))).tolist()


def test_torch_takes_loader_batches_without_a_copy(tokens):
    torch = pytest.importorskip("torch")
    b = next(iter(gl.Loader(gl.TokenWindows(tokens, seq_len=16), batch_size=2)))
    t = torch.from_numpy(b.data)
    assert t.data_ptr() == b.data.ctypes.data
    d = torch.from_dlpack(b.data)
    assert d.data_ptr() == b.data.ctypes.data
