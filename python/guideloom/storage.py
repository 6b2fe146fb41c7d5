"""Storages: ``StreamStorage``, ``DocumentStorage`` and ``StreamWithMetaStorage``.

Each is a directory of shards and a ``manifest.json``, the layout the Rust library and the
``guideloom`` CLI read and write. A storage opened with ``mode="w"`` (create; a committed storage
there is a :class:`~guideloom.errors.StorageExistsError`) or ``mode="a"`` (append, creating it when
missing) has a ``writer``; every storage has a ``reader`` over its last commit. Used as a context
manager, a storage commits its writer on a clean exit; on an exception the last commit stays in
force (appends since are discarded).

The format's ``pack`` runs in Python, then the Rust writer appends the bytes; reads run in Rust
(one batched read call, the GIL released), then the format's ``unpack`` runs in Python, once per
window or document. A format records itself in the manifest by name (``"columns"`` for
:class:`~guideloom.StreamNumpyFormat`, ``"python:module.QualName"`` otherwise) and dtype, never
as pickled bytes.
"""

from __future__ import annotations

import importlib
import json
import operator
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from . import _guideloom as _rs
from .errors import ConfigError, FormatError, OutOfRangeError, StorageClosedError
from .storage_format import DocumentPickleFormat, StreamNumpyFormat

__all__ = ["StreamStorage", "DocumentStorage", "StreamWithMetaStorage"]

_U64 = 2**64


def _index(value: Any, what: str) -> int:
    """``value`` as a non-negative integer below 2**64 (``SupportsIndex``)."""
    try:
        i = operator.index(value)
    except TypeError:
        raise ConfigError(f"{what} must be an integer, got {type(value).__name__}", field=what) from None
    if i < 0 or i >= _U64:
        raise ConfigError(f"{what} {i} is outside [0, 2**64)", field=what)
    return i


def _descr(dtype: np.dtype[Any]) -> str:
    """numpy's descr of ``dtype`` as the manifest's JSON."""
    if dtype.names is None:
        return json.dumps(dtype.str)
    return json.dumps([list(f) for f in dtype.descr])


def _dtype_of(descr: str) -> np.dtype[Any]:
    value = json.loads(descr)
    if isinstance(value, str):
        return np.dtype(value)
    if isinstance(value, dict):
        return np.dtype(value)  # type: ignore[call-overload, no-any-return]
    return np.dtype([tuple(f) for f in value])


def _spec(storage_format: Any) -> tuple[str, str]:
    """The manifest's ``(name, params JSON)`` of a format."""
    if isinstance(storage_format, StreamNumpyFormat):
        return "columns", "{}"
    if isinstance(storage_format, _TokenStreamFormat):
        return "tokens", "{}"
    if isinstance(storage_format, DocumentPickleFormat):
        return "python:pickle", "{}"
    cls = type(storage_format)
    return f"python:{cls.__module__}.{cls.__qualname__}", "{}"


class _TokenStreamFormat:
    """The format of a stream of plain (unstructured) elements, read back as the array itself
    (what a storage written by the Rust library with ``TokenFormat`` is opened with)."""

    def __init__(self, stream_dtype: np.dtype[Any]) -> None:
        self.stream_dtype = np.dtype(stream_dtype)

    def pack(self, data: Any) -> np.ndarray:
        return np.asarray(data, dtype=self.stream_dtype)

    def unpack(self, stream: np.ndarray, shard_lengths: np.ndarray, shards: np.ndarray) -> np.ndarray:
        return stream

    def __repr__(self) -> str:
        return f"_TokenStreamFormat({self.stream_dtype!r})"


def _format_from_manifest(path: str, name: str, descr: str | None) -> Any:
    """The format a manifest names, for a storage opened without one: a built-in format, or a
    Python class imported by its recorded name (never unpickled)."""
    dtype = _dtype_of(descr) if descr is not None else None
    if name == "columns" and dtype is not None:
        return StreamNumpyFormat(dtype)
    if name in ("tokens", "int_tokens") and dtype is not None:
        return _TokenStreamFormat(dtype)
    if name == "python:pickle":
        return DocumentPickleFormat()
    if name.startswith("python:"):
        module, _, qualname = name[len("python:"):].rpartition(".")
        try:
            obj: Any = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            raise ConfigError(
                f"{path} was written with the format {name[7:]}, which cannot be imported: pass storage_format",
                path=path,
            ) from None
        return obj(stream_dtype=dtype) if dtype is not None else obj()
    raise ConfigError(f"{path} holds the format {name!r}: pass storage_format", path=path)


def _check_mode(mode: str) -> None:
    if mode not in ("r", "w", "a"):
        raise ConfigError(f'mode must be "r", "w" or "a", got {mode!r}', field="mode")


class _Writer:
    """Shared part of the writers: commit, close, closed checks."""

    _rust: Any

    def commit(self) -> None:
        """Makes every record appended so far visible to readers (atomically: the manifest is
        written and renamed)."""
        self._rust.commit()

    def close(self) -> None:
        """Closes the writer; records appended since the last commit are discarded."""
        self._rust.close()


class StreamWriter(_Writer):
    """Appends records to a stream storage: ``append(data, shard=0)`` runs the format's
    ``pack`` and appends the elements to ``shard``."""

    def __init__(self, path: str, storage_format: Any, create: bool) -> None:
        self._format = storage_format
        self._dtype = np.dtype(storage_format.stream_dtype)
        name, params = _spec(storage_format)
        self._rust = _rs._StreamWriter(path, _descr(self._dtype), name, params, create)

    def append(self, data: Any, shard: int = 0) -> int:
        """Packs ``data`` and appends it to ``shard``; returns the number of elements.

        Raises:
            guideloom.errors.FormatError: ``pack`` did not return a one-dimensional array of
                ``stream_dtype``.
            guideloom.errors.ConfigError: ``shard`` is not an integer in ``[0, 2**64)``.
        """
        shard = _index(shard, "shard")
        packed = _packed(self._format.pack(data), self._dtype)
        return int(self._rust.append(packed.view(np.uint8), shard))


def _packed(array: Any, dtype: np.dtype[Any], size: int | None = None) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise FormatError(f"pack returned {type(array).__name__}, expected a numpy array of dtype {dtype}")
    if array.ndim != 1:
        raise FormatError(f"pack returned an array of {array.ndim} dimensions, expected 1")
    if array.dtype != dtype:
        raise FormatError(f"pack returned an array of dtype {array.dtype}, the format's dtype is {dtype}")
    if size is not None and len(array) != size:
        raise FormatError(f"pack returned {len(array)} elements but size(data) is {size}")
    return np.ascontiguousarray(array)


def _spans(spans: Iterable[Sequence[Any]]) -> list[tuple[int, int]]:
    out = []
    for span in spans:
        try:
            offset, length = span
        except (TypeError, ValueError):
            raise ConfigError(f"a read is an (offset, length) pair, got {span!r}") from None
        out.append((_index(offset, "offset"), _index(length, "length")))
    return out


class _WindowReader:
    """What the two stream readers share: ``len()`` and ``read(offset, length)``."""

    _rust: Any

    def __len__(self) -> int:
        """Elements in the stream."""
        return len(self._rust)

    def read(self, offset: int, length: int) -> Any:
        """The window of ``length`` elements from ``offset``, decoded by the format."""
        return self.read_many([(offset, length)])[0]

    def read_many(self, spans: Iterable[Sequence[Any]]) -> list[Any]:
        raise NotImplementedError


class StreamReader(_WindowReader):
    """Reads windows of a stream storage: ``read(offset, length)`` and ``read_many``.

    The elements of a read arrive as one numpy array over memory Rust owns (no copy); the
    format's ``unpack(stream, shard_lengths, shards)`` gets the read's real shard segmentation.
    A format may also define ``unpack_many(stream, offsets, shard_lengths, shards)`` to decode
    a whole ``read_many`` in one call (``offsets``: window starts in ``stream``, plus its end).
    """

    def __init__(self, path: str, storage_format: Any) -> None:
        self._format = storage_format
        self._dtype = np.dtype(storage_format.stream_dtype)
        name, params = _spec(storage_format)
        self._rust = _rs._StreamReader(path, _descr(self._dtype), name, params)

    def read_many(self, spans: Iterable[Sequence[Any]]) -> list[Any]:
        """The windows ``[(offset, length), ...]`` with one Rust read call, each decoded.

        Raises:
            guideloom.errors.OutOfRangeError: a window past the end (an ``IndexError``).
        """
        spans = _spans(spans)
        data, segments = self._rust.read_many(spans)
        stream = data.view(self._dtype)
        unpack_many = getattr(self._format, "unpack_many", None)
        if unpack_many is not None:
            offsets = np.zeros(len(spans) + 1, dtype=np.int64)
            np.cumsum([length for _, length in spans], out=offsets[1:])
            return list(unpack_many(stream, offsets, [s[0] for s in segments], [s[1] for s in segments]))
        out = []
        start = 0
        for (_, length), (shard_lengths, shards) in zip(spans, segments):
            out.append(self._format.unpack(stream[start:start + length], shard_lengths, shards))
            start += length
        return out


class _Storage:
    """What the three storages share: path, mode, the writer's lifetime, the context manager."""

    _writer: Any
    _reader: Any
    _reader_pid: int

    def __init__(self, path: str | os.PathLike[str], storage_format: Any = None, mode: str = "r") -> None:
        _check_mode(mode)
        self.path = os.fspath(path)
        self.mode = mode
        if storage_format is None:
            if mode != "r":
                raise ConfigError('a storage opened for writing needs storage_format', field="storage_format")
            _, descr, name, _ = _rs.manifest_format(self.path)
            storage_format = _format_from_manifest(self.path, name, descr)
        self.storage_format = storage_format
        self._writer = None
        self._reader = None
        self._reader_pid = os.getpid()
        if mode in ("w", "a"):
            self._writer = self._make_writer(create=mode == "w")
        else:
            self._reader = self._make_reader()

    def _make_writer(self, create: bool) -> Any:
        raise NotImplementedError

    def _make_reader(self) -> Any:
        raise NotImplementedError

    @property
    def writer(self) -> Any:
        """The writer (``mode="w"`` or ``"a"``)."""
        if self._writer is None:
            raise StorageClosedError(f"{self.path} is not open for writing (mode={self.mode!r})", path=self.path)
        return self._writer

    @property
    def reader(self) -> Any:
        """The reader over the last commit (reopened after each commit of this storage's writer)."""
        if self._writer is not None:
            return self._make_reader()
        if self._reader is None or self._reader_pid != os.getpid():
            self._reader = self._make_reader()
            self._reader_pid = os.getpid()
        return self._reader

    def commit(self) -> None:
        """Commits the writer; the reader then shows the new data."""
        self.writer.commit()
        self._reader = None

    def close(self) -> None:
        """Closes the writer (without committing) and the reader."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._reader = None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None and self._writer is not None:
                self._writer.commit()
        finally:
            self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, storage_format={self.storage_format!r}, mode={self.mode!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        if self.mode != "r":
            raise TypeError(f"a {type(self).__name__} open for writing cannot be pickled")
        return (type(self), (self.path, self.storage_format, "r"))


class _StreamKind(_Storage):
    """What the two stream storages share: ``len()``, ``read``, ``read_many`` of the last commit."""

    def __len__(self) -> int:
        """Elements in the stream (last commit)."""
        return len(self.reader)

    def read(self, offset: int, length: int) -> Any:
        """``reader.read(offset, length)``."""
        return self.reader.read(offset, length)

    def read_many(self, spans: Iterable[Sequence[Any]]) -> list[Any]:
        """``reader.read_many(spans)``."""
        out: list[Any] = self.reader.read_many(spans)
        return out


class StreamStorage(_StreamKind):
    """A stream storage: fixed-size elements of the format's ``stream_dtype``, appended a record at
    a time, read as windows ``(offset, length)`` of the stream.

    Args:
        path: The storage directory.
        storage_format: A :class:`~guideloom.types.StreamStorageFormat` (for example
            :class:`~guideloom.StreamNumpyFormat`); optional for ``mode="r"`` (the manifest's).
        mode: ``"r"`` read, ``"w"`` create, ``"a"`` append (create when missing).
    """

    def _make_writer(self, create: bool) -> StreamWriter:
        return StreamWriter(self.path, self.storage_format, create)

    def _make_reader(self) -> StreamReader:
        return StreamReader(self.path, self.storage_format)


class DocumentWriter(_Writer):
    """Appends documents: ``append(data, shard=0)`` runs the format's ``pack`` (which must return
    ``bytes`` or ``memoryview``) and appends the document to ``shard``."""

    def __init__(self, path: str, storage_format: Any, create: bool) -> None:
        self._format = storage_format
        name, params = _spec(storage_format)
        self._rust = _rs._DocumentWriter(path, name, params, create)

    def append(self, data: Any, shard: int = 0) -> int:
        """Packs and appends one document; returns its global index."""
        shard = _index(shard, "shard")
        encoded = self._format.pack(data)
        if isinstance(encoded, (memoryview, bytearray)):
            encoded = bytes(encoded)
        if not isinstance(encoded, bytes):
            raise FormatError(f"pack returned {type(encoded).__name__}, expected bytes or memoryview")
        return int(self._rust.append(encoded, shard))


class DocumentReader:
    """Reads documents by global index: ``len()``, ``[i]`` (negative counts from the end),
    ``read(i)``, ``read_many([i, ...])`` (one Rust read call); each decoded by the format's
    ``unpack(encoded_data, shard)``."""

    def __init__(self, path: str, storage_format: Any) -> None:
        self._format = storage_format
        name, params = _spec(storage_format)
        self._rust = _rs._DocumentReader(path, name, params)

    def __len__(self) -> int:
        return len(self._rust)

    def _position(self, index: Any) -> int:
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"document indices must be integers, not {type(index).__name__}") from None
        n = len(self._rust)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise OutOfRangeError(f"document {index} is out of range for {n} documents", index=index, total=n)
        return i

    def __getitem__(self, index: Any) -> Any:
        return self.read(index)

    def read(self, index: Any) -> Any:
        """Document ``index``."""
        return self.read_many([index])[0]

    def read_many(self, indices: Iterable[Any]) -> list[Any]:
        """Documents ``indices``, in order."""
        positions = [self._position(i) for i in indices]
        return [self._format.unpack(data, shard) for data, shard in self._rust.get_many(positions)]

    __getitems__ = read_many


class DocumentStorage(_Storage):
    """A document storage: one variable-size payload per document, read by global index. Also a
    Grain/torch random-access data source (``len``, ``[i]``, ``__getitems__``; pickles as its
    path and format in read mode).

    Args:
        path: The storage directory.
        storage_format: A :class:`~guideloom.types.DocumentStorageFormat` (for example
            :class:`~guideloom.DocumentPickleFormat`); optional for ``mode="r"``.
        mode: ``"r"``, ``"w"`` or ``"a"`` as for :class:`StreamStorage`.
    """

    def _make_writer(self, create: bool) -> DocumentWriter:
        return DocumentWriter(self.path, self.storage_format, create)

    def _make_reader(self) -> DocumentReader:
        return DocumentReader(self.path, self.storage_format)

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: Any) -> Any:
        return self.reader.read(index)

    def __getitems__(self, indices: Iterable[Any]) -> list[Any]:
        out: list[Any] = self.reader.read_many(indices)
        return out

    def read(self, index: Any) -> Any:
        """``reader.read(index)``."""
        return self.reader.read(index)


class StreamWithMetaWriter(_Writer):
    """Appends records to a stream-with-meta storage, following the format protocol to the letter:
    ``size(data)`` pairs yielded by ``pack``, a key repeating only inside a contiguous run, the
    first pair of a run with a ``bytes``/``memoryview`` payload (later ones may pass ``None``),
    the stream array as the generator's return value. Each violation is a
    :class:`~guideloom.errors.FormatError` naming the element; the record is refused whole."""

    def __init__(self, path: str, storage_format: Any, create: bool) -> None:
        self._format = storage_format
        self._dtype = np.dtype(storage_format.stream_dtype)
        name, params = _spec(storage_format)
        self._rust = _rs._MetaWriter(path, _descr(self._dtype), name, params, create)

    def append(self, data: Any, shard: int = 0) -> int:
        """Packs and appends one record; returns the number of elements."""
        shard = _index(shard, "shard")
        size = self._format.size(data)
        try:
            size = operator.index(size)
        except TypeError:
            raise FormatError(f"size(data) returned {type(size).__name__}, expected an int") from None
        if size < 0:
            raise FormatError(f"size(data) returned {size}")
        generator = self._format.pack(data)
        if not hasattr(generator, "__next__"):
            raise FormatError(f"pack returned {type(generator).__name__}, expected a generator")
        keys: list[int] = []
        payloads: list[bytes | None] = []
        ids: dict[Any, int] = {}
        while True:
            element = len(keys)
            try:
                pair = next(generator)
            except StopIteration as stop:
                array = stop.value
                break
            except Exception as e:
                raise FormatError(f"pack raised at element {element}: {e!r}", element=element) from e
            if isinstance(pair, np.ndarray):
                raise FormatError(
                    f"pack yielded an array at element {element}: return the stream array, do not yield it",
                    element=element,
                )
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise FormatError(f"pack yielded {pair!r} at element {element}, expected (key, payload)", element=element)
            if element >= size:
                raise FormatError(f"pack yielded more than size(data) = {size} pairs", element=element)
            key, payload = pair
            try:
                keys.append(ids.setdefault(key, len(ids)))
            except TypeError:
                raise FormatError(f"the key of element {element} is not hashable: {key!r}", element=element) from None
            if payload is None:
                payloads.append(None)
            elif isinstance(payload, (bytes, memoryview, bytearray)):
                payloads.append(bytes(payload))
            else:
                raise FormatError(
                    f"the payload of element {element} is {type(payload).__name__}, expected bytes, memoryview or None",
                    element=element,
                )
        if len(keys) != size:
            raise FormatError(f"pack yielded {len(keys)} pairs but size(data) is {size}", element=len(keys))
        if array is None:
            raise FormatError("pack returned no stream array (return it from the generator)")
        packed = _packed(array, self._dtype, size)
        return int(self._rust.append(packed.view(np.uint8), keys, payloads, shard))


class StreamWithMetaReader(_WindowReader):
    """Reads windows of a stream-with-meta storage; the format's ``unpack(stream_data,
    document_shard, document_index, document_data)`` gets the payloads the window touches,
    remapped for the read."""

    def __init__(self, path: str, storage_format: Any) -> None:
        self._format = storage_format
        self._dtype = np.dtype(storage_format.stream_dtype)
        name, params = _spec(storage_format)
        self._rust = _rs._MetaReader(path, _descr(self._dtype), name, params)

    def read_many(self, spans: Iterable[Sequence[Any]]) -> list[Any]:
        """The windows ``[(offset, length), ...]`` with one Rust read call, each decoded."""
        out = []
        for stream, _lengths, _shards, dshard, dindex, ddata in self._rust.read_many(_spans(spans)):
            out.append(self._format.unpack(stream.view(self._dtype), dshard, dindex, ddata))
        return out


class StreamWithMetaStorage(_StreamKind):
    """A stream-with-meta storage: a stream whose elements each point to a metadata payload stored
    once per run (a custom :class:`~guideloom.types.StreamWithMetaStorageFormat` is required).

    Args:
        path: The storage directory.
        storage_format: The format.
        mode: ``"r"``, ``"w"`` or ``"a"`` as for :class:`StreamStorage`.
    """

    def _make_writer(self, create: bool) -> StreamWithMetaWriter:
        return StreamWithMetaWriter(self.path, self.storage_format, create)

    def _make_reader(self) -> StreamWithMetaReader:
        return StreamWithMetaReader(self.path, self.storage_format)
