"""The compiled part of guideloom (pyo3): Rust writers, readers, token windows and the loader.

Use the public API of :mod:`guideloom`; these classes are its building blocks.
"""

from typing import Any, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "__version__",
    "STATE_VERSION",
    "_StreamWriter",
    "_StreamReader",
    "_DocumentWriter",
    "_DocumentReader",
    "_MetaWriter",
    "_MetaReader",
    "manifest_format",
    "_after_fork_in_child",
    "_TokenWindows",
    "_Loader",
    "_Mixture",
    "_Packed",
    "_TokenRecords",
    "_Schema",
    "_ListProxy",
    "_ListIter",
    "_RecordProxy",
    "_oamap_open_npz",
    "_oamap_from_data",
    "_PartWriter",
    "check_receipt",
    "commit_parts",
    "abort_parts",
    "gc_parts",
]

__version__: str
STATE_VERSION: int

def _after_fork_in_child() -> None:
    """Marks the process as a forked child: readers opened from now on use pread."""

def manifest_format(path: str | Any) -> tuple[str, str | None, str, str]:
    """``(kind, dtype descr JSON or None, format name, format params JSON)`` of a manifest."""

@final
class _StreamWriter:
    def __new__(cls, path: str | Any, descr: str, name: str, params: str, create: bool) -> _StreamWriter: ...
    def append(self, data: npt.NDArray[np.uint8], shard: int) -> int: ...
    def commit(self) -> None: ...
    def shard_len(self, shard: int) -> int: ...
    def close(self) -> None: ...

@final
class _PartWriter:
    def __new__(cls, root: str | Any, job: str, partition: int, attempt: int, descr: str) -> _PartWriter: ...
    def append(self, data: npt.NDArray[np.uint8]) -> int: ...
    def finish(self) -> str: ...
    def close(self) -> None: ...

def check_receipt(text: str) -> str: ...
def commit_parts(root: str | Any, receipts: list[str], mode: str) -> tuple[int, int, int]: ...
def abort_parts(root: str | Any, job: str) -> list[str]: ...
def gc_parts(root: str | Any, apply: bool) -> list[str]: ...

@final
class _StreamReader:
    def __new__(cls, path: str | Any, descr: str | None, name: str, params: str) -> _StreamReader: ...
    def __len__(self) -> int: ...
    def descr(self) -> str: ...
    def fingerprint(self) -> int: ...
    def read_many(
        self, spans: list[tuple[int, int]]
    ) -> tuple[npt.NDArray[np.uint8], list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]]: ...

@final
class _DocumentWriter:
    def __new__(cls, path: str | Any, name: str, params: str, create: bool) -> _DocumentWriter: ...
    def append(self, data: bytes, shard: int) -> int: ...
    def commit(self) -> None: ...
    def close(self) -> None: ...

@final
class _DocumentReader:
    def __new__(cls, path: str | Any, name: str, params: str) -> _DocumentReader: ...
    def __len__(self) -> int: ...
    def fingerprint(self) -> int: ...
    def get_many(self, indices: list[int]) -> list[tuple[bytes, int]]: ...

@final
class _MetaWriter:
    def __new__(cls, path: str | Any, descr: str, name: str, params: str, create: bool) -> _MetaWriter: ...
    def append(
        self, data: npt.NDArray[np.uint8], keys: list[int], payloads: list[bytes | None], shard: int
    ) -> int: ...
    def commit(self) -> None: ...
    def close(self) -> None: ...

@final
class _MetaReader:
    def __new__(cls, path: str | Any, descr: str | None, name: str, params: str) -> _MetaReader: ...
    def __len__(self) -> int: ...
    def descr(self) -> str: ...
    def fingerprint(self) -> int: ...
    def read_many(
        self, spans: list[tuple[int, int]]
    ) -> list[
        tuple[
            npt.NDArray[np.uint8],
            npt.NDArray[np.int64],
            npt.NDArray[np.int64],
            npt.NDArray[np.int64],
            npt.NDArray[np.int32],
            list[bytes],
        ]
    ]: ...

@final
class _TokenWindows:
    def __new__(
        cls,
        location: str | Any,
        seq_len: int,
        stride: int,
        format: str | None = None,
        dtype: str | None = None,
        column: str | None = None,
    ) -> _TokenWindows: ...
    def __len__(self) -> int: ...
    @property
    def seq_len(self) -> int: ...
    @property
    def stride(self) -> int: ...
    @property
    def elements(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    def fingerprint(self) -> int: ...
    def read(self, indices: list[int]) -> npt.NDArray[Any]: ...

@final
class _Loader:
    def __new__(cls, source: Any, options: dict[str, Any]) -> _Loader:
        """``options``: batch_size, shuffle, seed, epochs, workers, prefetch, rank, world_size,
        drop_remainder, global_batch (the arguments of ``guideloom.Loader``)."""
    @staticmethod
    def megatron(datasets: list[tuple[float | None, str]], options: dict[str, Any]) -> _Loader:
        """Megatron-Core's samples over ``datasets`` (``options``: the arguments of
        ``guideloom.Loader.megatron``)."""
    @staticmethod
    def llmc(path: str, options: dict[str, Any]) -> _Loader:
        """llm.c's batches over the shards at ``path`` (``options``: the arguments of
        ``guideloom.Loader.llmc``)."""
    def __len__(self) -> int: ...
    def start(self, state: str | None = None, round_down: bool = False) -> None: ...
    def next(
        self,
    ) -> (
        tuple[Any, npt.NDArray[np.uint64], int, int, npt.NDArray[np.bool_] | None, npt.NDArray[np.uint32] | None] | None
    ): ...
    def state(self) -> str: ...
    def close(self) -> None: ...

@final
class _TokenRecords:
    def __new__(
        cls,
        location: str,
        seq_len: int | None = None,
        stride: int | None = None,
        format: str | None = None,
        dtype: str | None = None,
        column: str | None = None,
    ) -> _TokenRecords:
        """Windows (``seq_len`` given) or documents (``seq_len`` ``None``) of the dataset at ``location``."""
    def __len__(self) -> int: ...
    @property
    def tokens(self) -> int:
        """Tokens in the dataset."""
    @property
    def documents(self) -> bool:
        """Whether the records are documents (else windows)."""
    def fingerprint(self) -> int:
        """The source's fingerprint (what a loader state records)."""
    def read(self, indices: list[int]) -> list[npt.NDArray[np.uint32]]:
        """Records ``indices`` as ``uint32`` arrays (one Rust read call)."""

@final
class _Mixture:
    def __new__(cls, sources: list[tuple[_TokenRecords, float]], options: dict[str, Any]) -> _Mixture:
        """The mixture of ``sources`` (``(records, weight)``; weights in records or tokens, ``options``)."""
    def __len__(self) -> int: ...
    @property
    def documents(self) -> bool:
        """Whether the mixed records are documents."""
    def fingerprint(self) -> int:
        """The source's fingerprint."""
    def read(self, indices: list[int]) -> tuple[list[npt.NDArray[np.uint32]], list[int], list[int]]:
        """Positions ``indices``: ``(records as uint32 arrays, their sources, their indices in them)``."""

@final
class _Packed:
    def __new__(cls, source: _TokenRecords | _Mixture, options: dict[str, Any]) -> _Packed:
        """Packs the documents of ``source`` (a ``_TokenRecords`` of documents or a ``_Mixture`` of them)."""
    def __len__(self) -> int: ...
    @property
    def dropped_tokens(self) -> int:
        """Tokens ``overflow="truncate"`` dropped."""
    def fingerprint(self) -> int:
        """The source's fingerprint."""
    def read(self, indices: list[int]) -> dict[str, npt.NDArray[np.int64]]:
        """Rows ``indices`` as one batch: a dict of ``[len(indices), seq_len]`` arrays (see ``Packed``)."""

@final
class _Schema:
    """An OAMap schema (``guideloom.oamap.Schema`` wraps it)."""
    @staticmethod
    def from_json(text: str, prefix: str = "object", delimiter: str = "-") -> _Schema: ...
    def to_json(self, explicit: bool = False) -> str: ...
    @property
    def prefix(self) -> str: ...
    @property
    def delimiter(self) -> str: ...
    @property
    def _root(self) -> int: ...
    @property
    def _root_content(self) -> int | None: ...
    def array_names(self) -> list[str]: ...
    def bind(self, source: Any, max_bytes: int = ...) -> Any:
        """The root value read through a Python mapping of array names."""
    def bind_npy_dir(self, dir: str | Any) -> Any:
        """The root value read from ``<dir>/<array name>.npy`` files."""
    @staticmethod
    def bind_partitions(
        description: str, prefix: str, sources: list[Any], max_bytes: int = ...
    ) -> tuple[_Schema, list[Any]]:
        """The top-level lists of a partitioned dataset, one per partition source."""

@final
class _ListProxy:
    """A list read lazily: ``len``, indexing, slices, sequences of indices, iteration."""
    def __len__(self) -> int: ...
    def __getitem__(self, key: Any, /) -> Any: ...
    def __iter__(self) -> _ListIter: ...
    def loaded(self) -> list[str]: ...
    def array(self, name: str) -> npt.NDArray[Any]: ...
    def _loaded(self) -> list[str]: ...
    def _array(self, name: str) -> npt.NDArray[Any]: ...
    @property
    def _schema(self) -> _Schema: ...
    @property
    def _range(self) -> tuple[int, int, int, int]: ...

@final
class _ListIter:
    def __iter__(self) -> _ListIter: ...
    def __next__(self) -> Any: ...

@final
class _RecordProxy:
    """A record read lazily: its fields are attributes (looked up by the binding's
    ``tp_getattro`` slot, so the stub lists only the fixed ones)."""
    @property
    def fields(self) -> list[str]: ...
    @property
    def _name(self) -> str | None: ...
    @property
    def _index(self) -> int: ...
    @property
    def _node(self) -> int: ...
    @property
    def _schema(self) -> _Schema: ...
    def _loaded(self) -> list[str]: ...
    def _array(self, name: str) -> npt.NDArray[Any]: ...

def _oamap_open_npz(path: str | Any) -> tuple[_Schema, Any]:
    """The schema stored in an OAMap ``.npz`` and its root value."""

def _oamap_from_data(schema: _Schema, data: str) -> list[tuple[str, npt.NDArray[Any]]]:
    """The named arrays of ``data`` (JSON text) under ``schema``."""
