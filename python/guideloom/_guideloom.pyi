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
