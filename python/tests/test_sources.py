"""Data sources (seed 004): TokenWindows over native and foreign layouts, RangeDataSource."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest

import guideloom as gl
from guideloom import errors

from conftest import interop, stream_of


def test_token_windows_over_a_native_storage(tokens, records):
    stream = stream_of(records)
    ts = gl.TokenWindows(tokens, seq_len=64, stride=48)
    n = (len(stream) - 64) // 48 + 1
    assert len(ts) == n
    assert ts.dtype == np.dtype("uint16") and ts.elements == len(stream)
    for i in (0, 1, n - 1):
        assert ts[i].tolist() == stream[i * 48:i * 48 + 64].tolist()
    assert ts[-1].tolist() == ts[n - 1].tolist()
    assert ts[np.int64(2)].tolist() == ts[2].tolist()  # any SupportsIndex
    batch = ts.read_batch([3, 0, 3])
    assert batch.shape == (3, 64) and batch[1].tolist() == ts[0].tolist()
    assert [w.tolist() for w in ts.__getitems__([5, 1])] == [ts[5].tolist(), ts[1].tolist()]
    assert ts._getitems([1])[0].tolist() == ts[1].tolist()


def test_token_windows_index_errors(tokens):
    ts = gl.TokenWindows(tokens, seq_len=64)
    with pytest.raises(IndexError):
        ts[len(ts)]
    with pytest.raises(IndexError):
        ts[-len(ts) - 1]
    with pytest.raises(errors.OutOfRangeError):
        ts.read_batch([0, 2**70])
    with pytest.raises(TypeError):
        ts["a"]
    with pytest.raises(TypeError):
        ts[1.5]


def test_token_windows_repr_is_stable_and_pickles_as_location_and_options(tokens):
    ts = gl.TokenWindows(tokens, seq_len=64, stride=32)
    assert repr(ts) == f"TokenWindows({str(tokens)!r}, seq_len=64, stride=32)"
    clone = pickle.loads(pickle.dumps(ts))
    assert repr(clone) == repr(ts)
    assert clone._handle is None  # reopened lazily
    assert clone[3].tolist() == ts[3].tolist()
    assert len(pickle.dumps(ts)) < 500


def test_token_windows_close_and_context_manager(tokens):
    with gl.TokenWindows(tokens, seq_len=64) as ts:
        first = ts[0].tolist()
    assert ts._handle is None
    assert ts[0].tolist() == first  # reopens on use


def _child_sum(ts, q):
    q.put(int(ts.read_batch(range(len(ts))).sum()))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_token_windows_in_child_processes(tokens, method):
    ts = gl.TokenWindows(tokens, seq_len=64)
    expected = int(ts.read_batch(range(len(ts))).sum())
    ctx = mp.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=_child_sum, args=(ts, q))
    p.start()
    assert q.get(timeout=60) == expected
    p.join(60)
    assert p.exitcode == 0


def test_token_windows_reopen_after_fork_without_pickling(tokens):
    ts = gl.TokenWindows(tokens, seq_len=64)
    handle = ts._rust()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the handle is reopened, the parent's is not used
        ok = ts._rust() is not handle and ts[1].tolist() == ts.read_batch([1])[0].tolist()
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    assert ts._rust() is handle


def test_token_windows_over_nanogpt_in_place():
    sample = interop("nanogpt") / "train.bin"
    ids = np.fromfile(sample, dtype="<u2")
    ts = gl.TokenWindows(sample, seq_len=5, stride=4, format="nanogpt", dtype="u2")
    assert len(ts) == (len(ids) - 5) // 4 + 1
    assert ts[1].tolist() == ids[4:9].tolist()
    assert "format='nanogpt'" in repr(ts)
    assert pickle.loads(pickle.dumps(ts))[1].tolist() == ids[4:9].tolist()


def test_token_windows_over_megatron_is_detected():
    prefix = interop("megatron") / "gpt2_text_document"
    ts = gl.TokenWindows(prefix, seq_len=8)
    ids = np.fromfile(str(prefix) + ".bin", dtype=ts.dtype)
    assert ts[0].tolist() == ids[:8].tolist()
    assert ts[len(ts) - 1].tolist() == ids[(len(ts) - 1) * 8:len(ts) * 8].tolist()


def test_token_windows_refuse_bad_options(tokens, tmp_path):
    with pytest.raises(errors.ConfigError):
        gl.TokenWindows(tokens, seq_len=0)
    with pytest.raises(errors.StorageNotFoundError):
        gl.TokenWindows(tmp_path / "missing", seq_len=4, format="nanogpt", dtype="u2")
    with pytest.raises(errors.ConfigError):
        gl.TokenWindows(tokens, seq_len=10**9)


def test_range_data_source():
    r = gl.RangeDataSource(start=1, stop=10, step=2)
    assert list(r) == [1, 3, 5, 7, 9]
    assert len(r) == 5 and r[-1] == 9 and r.__getitems__([0, 2]) == [1, 5]
    with pytest.raises(IndexError):
        r[5]
    assert repr(r) == "RangeDataSource(start=1, stop=10, step=2)"
    assert list(pickle.loads(pickle.dumps(r))) == [1, 3, 5, 7, 9]
