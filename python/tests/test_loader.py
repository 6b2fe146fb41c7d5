"""guideloom.Loader from Python: batches, zero-copy arrays, worker invariance, resume (also onto
another worker count), the state shared with the CLI, the slow path over Python sources."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

import guideloom as gl
from guideloom import errors

from conftest import cli_batches


def collect(loader, n=None):
    out = []
    for b in loader:
        out.append((b.number, b.epoch, b.indices.tolist(), b.data.tolist()))
        if n is not None and len(out) == n:
            break
    return out


def test_batches_are_the_windows_of_their_indices(tokens):
    ts = gl.TokenWindows(tokens, seq_len=32)
    loader = gl.Loader(ts, batch_size=4, shuffle=True, seed=3, epochs=2, workers=2)
    batches = list(loader)
    assert len(batches) == 2 * len(loader)
    with pytest.raises(StopIteration):  # exhausted until the next iter()
        next(loader)
    assert [x.number for x in loader] == [x.number for x in batches]
    seen = []
    for b in batches:
        assert b.data.shape == (len(b.indices), 32) and b.data.dtype == np.uint16
        assert b.data.tolist() == ts.read_batch(b.indices).tolist()
        seen.extend(b.indices.tolist())
    n = len(ts)
    assert sorted(seen[:n]) == list(range(n))  # each epoch is a permutation
    assert seen[:n] != list(range(n))


def test_batch_data_is_owned_by_rust_and_shared_without_copy(tokens):
    b = next(iter(gl.Loader(gl.TokenWindows(tokens, seq_len=16), batch_size=2)))
    assert not b.data.flags.owndata and b.data.base is not None and b.data.flags.writeable
    shared = np.from_dlpack(b.data)
    assert shared.ctypes.data == b.data.ctypes.data
    assert b.inputs.tolist() == b.data[:, :-1].tolist() and b.targets.tolist() == b.data[:, 1:].tolist()
    assert b.inputs.base is not None


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_order_is_the_same_for_every_worker_count(tokens, workers):
    ts = gl.TokenWindows(tokens, seq_len=24)
    ref = collect(gl.Loader(ts, batch_size=5, shuffle=True, seed=11, epochs=2))
    assert collect(gl.Loader(ts, batch_size=5, shuffle=True, seed=11, epochs=2, workers=workers, prefetch=3)) == ref


@pytest.mark.parametrize("before, after", [(0, 2), (2, 0), (1, 3)])
def test_resume_mid_epoch_onto_another_worker_count(tokens, before, after):
    ts = gl.TokenWindows(tokens, seq_len=24)
    full = collect(gl.Loader(ts, batch_size=4, shuffle=True, seed=5, epochs=2))
    a = gl.Loader(ts, batch_size=4, shuffle=True, seed=5, epochs=2, workers=before)
    head = collect(a, n=7)
    state = a.state_dict()
    assert state["version"] == gl.STATE_VERSION
    b = gl.Loader(ts, batch_size=4, shuffle=True, seed=5, epochs=2, workers=after)
    b.load_state_dict(json.loads(json.dumps(state)))
    assert head + collect(b) == full
    # Grain's protocol holds the same JSON.
    c = gl.Loader(ts, batch_size=4, shuffle=True, seed=5, epochs=2, workers=after)
    c.set_state(a.get_state())
    assert collect(c) == full[7:]


def test_state_before_iterating_and_after_loading(tokens):
    ts = gl.TokenWindows(tokens, seq_len=24)
    a = gl.Loader(ts, batch_size=4)
    s0 = a.state_dict()
    assert s0["version"] == gl.STATE_VERSION
    collect(a, n=2)
    s2 = a.state_dict()
    b = gl.Loader(ts, batch_size=4)
    b.load_state_dict(s2)
    assert b.state_dict() == s2


def _write_state(path, state):
    path.write_text(json.dumps(state))


def test_a_python_state_resumes_in_the_cli_and_the_reverse(tokens, tmp_path):
    ts = gl.TokenWindows(tokens, seq_len=20)
    args = ["--seq-len", "20", "--batch-size", "3", "--shuffle", "--seed", "9", "--epochs", "2"]
    full = cli_batches(str(tokens), *args)
    py_full = collect(gl.Loader(ts, batch_size=3, shuffle=True, seed=9, epochs=2, workers=2))
    assert [(b["batch"], b["epoch"], b["windows"], b["tokens"]) for b in full] == [tuple(x) for x in py_full]
    # Python -> CLI
    a = gl.Loader(ts, batch_size=3, shuffle=True, seed=9, epochs=2, workers=1)
    collect(a, n=5)
    _write_state(tmp_path / "py.json", a.state_dict())
    resumed = cli_batches(str(tokens), *args, "--workers", "2", "--resume", str(tmp_path / "py.json"))
    assert resumed == full[5:]
    # CLI -> Python
    cli_batches(str(tokens), *args, "--max-batches", "8", "--save-state", str(tmp_path / "cli.json"))
    b = gl.Loader(ts, batch_size=3, shuffle=True, seed=9, epochs=2, workers=3)
    b.load_state_dict(json.loads((tmp_path / "cli.json").read_text()))
    assert [tuple(x) for x in collect(b)] == [(x["batch"], x["epoch"], x["windows"], x["tokens"]) for x in full[8:]]


def test_elastic_resume_onto_another_world_size(tokens):
    ts = gl.TokenWindows(tokens, seq_len=16)
    one = gl.Loader(ts, global_batch=8, shuffle=True, seed=1, world_size=1)
    head = collect(one, n=3)
    state = one.state_dict()
    full = collect(gl.Loader(ts, global_batch=8, shuffle=True, seed=1, world_size=1))
    ranks = []
    for rank in range(2):
        r = gl.Loader(ts, global_batch=8, shuffle=True, seed=1, rank=rank, world_size=2)
        r.load_state_dict(state)
        ranks.append(collect(r))
    complete = [b for b in full[3:] if len(b[2]) == 8]
    assert len(complete) >= 3
    for step, want in enumerate(complete):
        b0, b1 = ranks[0][step], ranks[1][step]
        assert sorted(b0[2] + b1[2]) == sorted(want[2])
    assert head == full[:3]


def test_a_state_of_other_data_or_configuration_is_refused(tokens, tmp_path):
    ts = gl.TokenWindows(tokens, seq_len=16)
    state = gl.Loader(ts, batch_size=4, seed=1, shuffle=True).state_dict()
    other = gl.Loader(gl.TokenWindows(tokens, seq_len=17), batch_size=4, seed=1, shuffle=True)
    with pytest.raises(errors.StateError) as e:
        other.load_state_dict(state)
    assert isinstance(e.value, ValueError)
    with pytest.raises(errors.StateError):
        gl.Loader(ts, batch_size=4, seed=2, shuffle=True).load_state_dict(state)


class Squares:
    def __init__(self, n):
        self.n = n
        self.calls = 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls += 1
        return {"i": i, "sq": i * i}


@pytest.mark.parametrize("workers", [0, 2])
def test_any_python_object_is_a_source(workers):
    loader = gl.Loader(Squares(10), batch_size=4, shuffle=True, seed=2, workers=workers)
    batches = list(loader)
    assert [len(b.data) for b in batches] == [4, 4, 2]
    for b in batches:
        assert [r["i"] for r in b.data] == b.indices.tolist()
        assert all(r["sq"] == r["i"] ** 2 for r in b.data)
    ref = [b.indices.tolist() for b in gl.Loader(Squares(10), batch_size=4, shuffle=True, seed=2)]
    assert [b.indices.tolist() for b in batches] == ref


def test_python_sources_with_getitems_and_ranges():
    batches = list(gl.Loader(gl.RangeDataSource(0, 20, 2), batch_size=3, workers=1))
    assert [b.data for b in batches][:2] == [[0, 2, 4], [6, 8, 10]]


def test_a_failing_python_source_raises_its_own_exception():
    class Broken(Squares):
        def __getitem__(self, i):
            if i == 3:
                raise KeyError("record three")
            return i

    with pytest.raises(KeyError, match="record three"):
        list(gl.Loader(Broken(8), batch_size=2, workers=2))


def test_the_gil_is_released_while_waiting_for_batches():
    # The workers call this source under the GIL while the consumer waits in next(): were the
    # GIL held while waiting, this would deadlock; another Python thread runs meanwhile too.
    class Slow(Squares):
        def __getitem__(self, i):
            time.sleep(0.01)
            return i

    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        got = [b.data for b in gl.Loader(Slow(24), batch_size=4, workers=2)]
    finally:
        stop.set()
        t.join()
    assert sum(got, []) == list(range(24))
    assert len(ticks) > 20


def test_the_loader_does_not_pickle(tokens):
    import pickle

    with pytest.raises(TypeError, match="state_dict"):
        pickle.dumps(gl.Loader(gl.TokenWindows(tokens, seq_len=16)))


def test_two_threads_sharing_a_loader_over_a_python_source_do_not_deadlock():
    class Slow(Squares):
        def __getitem__(self, i):
            time.sleep(0.002)
            return i

    loader = gl.Loader(Slow(64), batch_size=2, workers=2)
    iter(loader)
    got: list[int] = []
    lock = threading.Lock()

    def drain():
        while True:
            try:
                b = next(loader)
            except StopIteration:
                return
            with lock:
                got.extend(b.data)

    threads = [threading.Thread(target=drain) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert sorted(got) == list(range(64))
