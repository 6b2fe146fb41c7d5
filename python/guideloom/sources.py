"""Random-access data sources (Grain's ``RandomAccessDataSource`` protocol, seed 004):
``TokenWindows`` over a native storage or a foreign layout, and ``RangeDataSource``.

They implement ``__len__``, ``__getitem__`` (any ``SupportsIndex``; negative indices count from
the end; ``IndexError`` past it), a batched ``__getitems__``/``_getitems`` (one Rust read call),
``close()`` and the context manager, a stable ``__repr__``, and pickling as location + options:
the Rust handle is not pickled but reopened lazily on first use after unpickling and in a forked
child (threads and io_uring rings never cross a fork).
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from . import _guideloom as _rs
from .errors import OutOfRangeError

__all__ = ["TokenWindows", "RangeDataSource"]


def _positions(indices: Iterable[Any], n: int) -> list[int]:
    out = []
    for index in indices:
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"record indices must be integers, not {type(index).__name__}") from None
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise OutOfRangeError(f"record {i} is out of range for a source of {n} records", index=i, total=n)
        out.append(j)
    return out


class TokenWindows:
    """Windows of ``seq_len`` tokens starting every ``stride`` tokens (default ``seq_len``) of a
    token stream: a guideloom stream storage of unsigned ids, or a dataset in another project's
    layout read in place (Megatron, nanoGPT, llm.c, MDS, litdata, OLMo, NumPy; ``format`` names
    it when it is not detected, ``dtype`` gives the ids' numpy type where the layout does not
    record it, ``column`` the MDS/litdata column).

    ``ts[i]`` is window ``i`` as a 1-D numpy array of the stored id type; ``ts.read_batch(idx)``
    reads windows ``idx`` as one ``[len(idx), seq_len]`` array with one Rust call. The window
    ``i`` covers tokens ``[i * stride, i * stride + seq_len)``; the last partial window is left
    out.
    """

    def __init__(
        self,
        location: str | os.PathLike[str],
        seq_len: int,
        stride: int | None = None,
        *,
        format: str | None = None,
        dtype: Any = None,
        column: str | None = None,
    ) -> None:
        self.location = os.fspath(location)
        self.seq_len = operator.index(seq_len)
        self.stride = self.seq_len if stride is None else operator.index(stride)
        self.format = format
        self.dtype_option = None if dtype is None else np.dtype(dtype).str
        self.column = column
        self._handle: Any = None
        self._pid: int | None = None
        self._rust()

    def _rust(self) -> Any:
        """The Rust windows, (re)opened in this process."""
        if self._handle is None or self._pid != os.getpid():
            if self.seq_len <= 0 or self.stride <= 0:
                from .errors import ConfigError

                raise ConfigError(f"seq_len and stride must be positive, got {self.seq_len} and {self.stride}")
            self._handle = _rs._TokenWindows(
                self.location, self.seq_len, self.stride, self.format, self.dtype_option, self.column
            )
            self._pid = os.getpid()
        return self._handle

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of the ids a window holds."""
        return np.dtype(str(self._rust().dtype))

    @property
    def elements(self) -> int:
        """Tokens in the stream."""
        return int(self._rust().elements)

    def fingerprint(self) -> int:
        """The source fingerprint a loader state records."""
        return int(self._rust().fingerprint())

    def __len__(self) -> int:
        return len(self._rust())

    def __getitem__(self, index: Any) -> np.ndarray:
        row: np.ndarray = self.read_batch([index])[0]
        return row

    def read_batch(self, indices: Iterable[Any]) -> np.ndarray:
        """Windows ``indices`` as one ``[len(indices), seq_len]`` array (one Rust read call, the
        GIL released during it; the array owns the memory Rust read into)."""
        rust = self._rust()
        positions = _positions(indices, len(rust))
        if not positions:
            return np.empty((0, self.seq_len), dtype=self.dtype)
        return rust.read(positions)  # type: ignore[no-any-return]

    def __getitems__(self, indices: Sequence[Any]) -> list[np.ndarray]:
        """Windows ``indices`` (rows of one array read with one call), as torch's and Grain's
        batched protocol expect."""
        return list(self.read_batch(indices))

    _getitems = __getitems__

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]

    def close(self) -> None:
        """Drops the Rust handle (reopened on the next use)."""
        self._handle = None
        self._pid = None

    def __enter__(self) -> TokenWindows:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _options(self) -> dict[str, Any]:
        return {
            "location": self.location,
            "seq_len": self.seq_len,
            "stride": self.stride,
            "format": self.format,
            "dtype": self.dtype_option,
            "column": self.column,
        }

    def __repr__(self) -> str:
        extra = "".join(
            f", {k}={v!r}" for k, v in (("format", self.format), ("dtype", self.dtype_option), ("column", self.column))
            if v is not None
        )
        return f"TokenWindows({self.location!r}, seq_len={self.seq_len}, stride={self.stride}{extra})"

    def __getstate__(self) -> dict[str, Any]:
        return self._options()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.location = state["location"]
        self.seq_len = state["seq_len"]
        self.stride = state["stride"]
        self.format = state["format"]
        self.dtype_option = state["dtype"]
        self.column = state["column"]
        self._handle = None
        self._pid = None


class RangeDataSource:
    """A data source like Python's ``range``: record ``i`` is ``start + i * step``.

    >>> list(RangeDataSource(start=1, stop=10, step=2))
    [1, 3, 5, 7, 9]
    """

    def __init__(self, start: int, stop: int, step: int = 1) -> None:
        self._range = range(start, stop, step)
        self.start, self.stop, self.step = self._range.start, self._range.stop, self._range.step

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, index: Any) -> int:
        i = operator.index(index)
        try:
            return self._range[i]
        except IndexError:
            raise OutOfRangeError(
                f"record {i} is out of range for a source of {len(self._range)} records", index=i, total=len(self._range)
            ) from None

    def __getitems__(self, indices: Sequence[Any]) -> list[int]:
        return [self[i] for i in indices]

    _getitems = __getitems__

    def __iter__(self) -> Iterator[int]:
        return iter(self._range)

    def close(self) -> None:
        """Nothing to close."""

    def __enter__(self) -> RangeDataSource:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def __repr__(self) -> str:
        return f"RangeDataSource(start={self.start}, stop={self.stop}, step={self.step})"
