"""Hostile input: every case a typed Python exception (never a Rust panic), the last commit
intact."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import guideloom as gl
from guideloom import errors

from conftest import U16Tokens, stream_of, write_tokens


def typed(excinfo):
    """The exception is ours or a builtin raised on purpose, never pyo3's PanicException."""
    e = excinfo.value
    assert type(e).__name__ != "PanicException", e
    assert isinstance(e, (errors.GuideloomError, TypeError)), repr(e)
    return e


@pytest.fixture
def committed(tmp_path, records):
    p = write_tokens(tmp_path / "s", records)
    return p, stream_of(records)


def assert_intact(path, stream):
    st = gl.StreamStorage(path, storage_format=U16Tokens())
    assert st.read(0, len(st)).tolist() == stream.tolist()


class ListPack(U16Tokens):
    def pack(self, data):
        return list(data)


class WrongDtype(U16Tokens):
    def pack(self, data):
        return np.asarray(data, dtype=np.float32)


class TwoD(U16Tokens):
    def pack(self, data):
        return np.zeros((2, 2), dtype=self.stream_dtype)


class Raises(U16Tokens):
    def pack(self, data):
        raise RuntimeError("pack failed")


@pytest.mark.parametrize(
    "fmt, data, shard, exc",
    [
        (U16Tokens(), [1, 2], -1, errors.ConfigError),
        (U16Tokens(), [1, 2], 2**64, errors.ConfigError),
        (U16Tokens(), [1, 2], "0", errors.ConfigError),
        (U16Tokens(), [1, 2], 1.0, errors.ConfigError),
        (ListPack(), [1, 2], 0, errors.FormatError),
        (WrongDtype(), [1, 2], 0, errors.FormatError),
        (TwoD(), [1, 2], 0, errors.FormatError),
    ],
)
def test_bad_appends_are_typed_and_lose_nothing(committed, fmt, data, shard, exc):
    path, stream = committed
    with pytest.raises(exc) as e:
        with gl.StreamStorage(path, storage_format=fmt, mode="a") as st:
            st.writer.append([5, 6], shard=0)
            st.writer.append(data, shard=shard)
    typed(e)
    assert_intact(path, stream)


def test_a_raising_pack_keeps_the_last_commit(committed):
    path, stream = committed
    with pytest.raises(RuntimeError, match="pack failed"):
        with gl.StreamStorage(path, storage_format=Raises(), mode="a") as st:
            st.writer.append([1])
    assert_intact(path, stream)


def test_huge_shard_ids(committed):
    path, stream = committed
    for shard in (2**32, 2**63, 2**64 - 1):
        try:
            with gl.StreamStorage(path, storage_format=U16Tokens(), mode="a") as st:
                st.writer.append([1], shard=shard)
                raise KeyboardInterrupt  # never commit
        except KeyboardInterrupt:
            pass
        except BaseException as e:  # a refusal must be typed
            assert isinstance(e, errors.GuideloomError), repr(e)
    assert_intact(path, stream)


@pytest.mark.parametrize(
    "spans, exc",
    [
        ([(-1, 2)], errors.ConfigError),
        ([(0, -2)], errors.ConfigError),
        ([(2**64, 1)], errors.ConfigError),
        ([(2**64 - 1, 2)], errors.OutOfRangeError),
        ([(0, 2**63)], errors.OutOfRangeError),
        ([(10**12, 1)], errors.OutOfRangeError),
        ([(0, 1), (5,)], errors.ConfigError),
        ([("a", 1)], errors.ConfigError),
        ([None], errors.ConfigError),
    ],
)
def test_bad_reads_are_typed(committed, spans, exc):
    path, _ = committed
    st = gl.StreamStorage(path, storage_format=U16Tokens())
    with pytest.raises(exc) as e:
        st.read_many(spans)
    typed(e)


def test_bad_document_indices(tmp_path):
    with gl.DocumentStorage(tmp_path / "d", storage_format=gl.DocumentPickleFormat(), mode="w") as ds:
        ds.writer.append(1)
    ds = gl.DocumentStorage(tmp_path / "d", storage_format=gl.DocumentPickleFormat())
    for bad, exc in [(1, IndexError), (-2, IndexError), (2**80, IndexError), ("0", TypeError), (0.0, TypeError)]:
        with pytest.raises(exc) as e:
            ds[bad]
        typed(e)


def test_document_pack_must_return_bytes(tmp_path):
    class NotBytes:
        def pack(self, data):
            return "text"

        def unpack(self, encoded, shard):
            return encoded

    with gl.DocumentStorage(tmp_path / "d", storage_format=NotBytes(), mode="w") as ds:
        with pytest.raises(errors.FormatError):
            ds.writer.append(1)


def test_stream_with_meta_broken_generators(tmp_path):
    class Broken:
        stream_dtype = np.dtype("<u2")

        def size(self, data):
            return data

        def pack(self, data):
            yield (0, b"a")
            raise ValueError("generator broke")

        def unpack(self, *a):
            return a

    class NotAGenerator(Broken):
        def pack(self, data):
            return np.zeros(1, dtype=self.stream_dtype)

    class BadSize(Broken):
        def size(self, data):
            return "two"

    for fmt, exc, match in [
        (Broken(), errors.FormatError, "element 1"),
        (NotAGenerator(), errors.FormatError, "expected a generator"),
        (BadSize(), errors.FormatError, "size"),
    ]:
        with gl.StreamWithMetaStorage(tmp_path / "m", storage_format=fmt, mode="a") as st:
            with pytest.raises(exc, match=match) as e:
                st.writer.append(2)
            typed(e)


def test_storage_needs_a_format_with_a_dtype(tmp_path):
    with pytest.raises((errors.GuideloomError, AttributeError, TypeError)):
        gl.StreamStorage(tmp_path / "x", storage_format=object(), mode="w")
    with pytest.raises(errors.ConfigError):
        gl.StreamStorage(tmp_path / "x", mode="w")


@pytest.mark.parametrize(
    "damage, exc",
    [
        ("manifest_garbage", errors.CorruptStorageError),
        ("manifest_missing", errors.StorageNotFoundError),
        ("manifest_huge_count", errors.CorruptStorageError),
        ("shard_truncated", errors.CorruptStorageError),
        ("shard_missing", errors.CorruptStorageError),
        ("manifest_wrong_kind", errors.StorageError),
    ],
)
def test_damaged_storages(committed, damage, exc):
    path, _ = committed
    m = path / "manifest.json"
    if damage == "manifest_garbage":
        m.write_text("{not json")
    elif damage == "manifest_missing":
        m.unlink()
    elif damage == "manifest_huge_count":
        d = json.loads(m.read_text())
        d["shards"][0]["elements"] = 2**62
        d["shards"][0]["bytes"] = 2**63
        m.write_text(json.dumps(d))
    elif damage == "shard_truncated":
        f = path / "shard-00001.stream"
        f.write_bytes(f.read_bytes()[:10])
    elif damage == "shard_missing":
        (path / "shard-00002.stream").unlink()
    elif damage == "manifest_wrong_kind":
        d = json.loads(m.read_text())
        d["kind"] = "document"
        m.write_text(json.dumps(d))
    with pytest.raises(exc) as e:
        gl.StreamStorage(path, storage_format=U16Tokens()).read(0, 4)
    typed(e)
    with pytest.raises(errors.GuideloomError) as e:
        gl.TokenWindows(path, seq_len=4)[0]
    typed(e)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_size": 0},
        {"batch_size": -1},
        {"seed": 2**64, "shuffle": True},
        {"seed": -1},
        {"rank": 2, "world_size": 2},
        {"world_size": 0},
        {"workers": 10**6},
        {"epochs": -1},
        {"batch_size": "4"},
        {"global_batch": 3, "world_size": 2},
    ],
)
def test_bad_loader_options(committed, kwargs):
    path, _ = committed
    with pytest.raises(errors.ConfigError) as e:
        loader = gl.Loader(gl.TokenWindows(path, seq_len=8), **kwargs)
        next(iter(loader))
    typed(e)
    assert isinstance(e.value, ValueError)


def test_bad_token_windows_options(committed, tmp_path):
    path, _ = committed
    for kwargs in [{"seq_len": -1}, {"seq_len": 0}, {"seq_len": 8, "stride": 0}, {"seq_len": 2**63}]:
        with pytest.raises((errors.ConfigError, OverflowError)) as e:
            gl.TokenWindows(path, **kwargs)
        assert type(e.value).__name__ != "PanicException"
    (tmp_path / "t.bin").write_bytes(b"\x01\x00\x02\x00\x03")
    for kwargs, exc in [
        ({"format": "nanogpt", "dtype": "u2"}, errors.ForeignLayoutError),
        ({"format": "no-such-layout"}, errors.ConfigError),
        ({"format": "nanogpt", "dtype": "f4"}, errors.GuideloomError),
        ({"format": "nanogpt"}, errors.GuideloomError),
    ]:
        with pytest.raises(exc) as e:
            gl.TokenWindows(tmp_path / "t.bin", seq_len=1, **kwargs)
        typed(e)


def good_state(path):
    loader = gl.Loader(gl.TokenWindows(path, seq_len=8), batch_size=2, shuffle=True, seed=1)
    it = iter(loader)
    next(it)
    return loader.state_dict()


def mutate(state, key, value):
    s = json.loads(json.dumps(state))
    if value is KeyError:
        del s[key]
    else:
        s[key] = value
    return s


@pytest.mark.parametrize("key", ["version", "source", "config", "next_batch", "global_batch", "transforms_fingerprint"])
@pytest.mark.parametrize("value", [KeyError, None, -1, 2**70, "x", [1], {"a": 1}])
def test_damaged_state_dicts(committed, key, value):
    path, _ = committed
    state = good_state(path)
    if key not in state:
        pytest.skip(f"the state has no field {key}")
    bad = mutate(state, key, value)
    loader = gl.Loader(gl.TokenWindows(path, seq_len=8), batch_size=2, shuffle=True, seed=1)
    try:
        loader.load_state_dict(bad)
    except errors.StateError:
        return
    # A mutation the state accepts (e.g. a field it ignores) must still resume without a panic.
    for _ in loader:
        pass


@pytest.mark.parametrize(
    "path_, value",
    [(("source", "records"), 2**64 + 1), (("source", "fingerprint"), -5), (("config", "seed"), 2**33),
     (("config", "epochs"), 0), (("config", "shuffle"), "yes")],
)
def test_damaged_nested_state_fields(committed, path_, value):
    path, _ = committed
    state = json.loads(json.dumps(good_state(path)))
    state[path_[0]][path_[1]] = value
    loader = gl.Loader(gl.TokenWindows(path, seq_len=8), batch_size=2, shuffle=True, seed=1)
    with pytest.raises(errors.StateError) as e:
        loader.load_state_dict(state)
    typed(e)


def test_state_of_wrong_type(committed):
    path, _ = committed
    loader = gl.Loader(gl.TokenWindows(path, seq_len=8), batch_size=2)
    for bad in [None, [], "{}", {"version": 2}, {}]:
        with pytest.raises(errors.StateError) as e:
            loader.load_state_dict(bad)  # type: ignore[arg-type]
        typed(e)
    for bad in [b"\xff", b"not json", "[]", b"{}"]:
        with pytest.raises(errors.StateError):
            loader.set_state(bad)


def test_exceptions_pickle_with_their_context(committed):
    path, _ = committed
    with pytest.raises(errors.StorageMismatchError) as e:
        gl.StreamStorage(path, storage_format=U16Tokens(np.dtype("<u4")))
    clone = pickle.loads(pickle.dumps(e.value))
    assert type(clone) is errors.StorageMismatchError
    assert str(clone) == str(e.value) and clone.path == e.value.path and clone.expected == "<u4"
    assert isinstance(clone, ValueError) and isinstance(clone, OSError)
