"""Mixing and packing, as the CLI's ``batches --mix ... --pack ...`` offers them: documents of any
token dataset (:class:`TokenDocuments`), a weighted :class:`Mixture` of token windows or documents
(weights in records or in tokens, Megatron's greedy or a proportional schedule, four stop rules),
and :class:`Packed` rows of documents (of one dataset or a mixture) with per-document targets,
positions, segment ids and, for a mixture, the source of every token.

All three are sources of :class:`~guideloom.Loader` (read in Rust by its worker threads, the
same batches for any worker count, the state the CLI writes) and random-access data sources
(``len``, ``[i]``, ``__getitems__``) that pickle as their arguments and reopen lazily after
unpickling or a fork.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _guideloom as _rs
from .errors import ConfigError
from .sources import TokenWindows, _positions

__all__ = ["TokenDocuments", "Mixture", "Packed"]


class _Lazy:
    """A Rust handle (re)made from the object's arguments in each process."""

    _handle: Any
    _pid: int | None

    def _make(self) -> Any:
        raise NotImplementedError

    def _rust(self) -> Any:
        if self._handle is None or self._pid != os.getpid():
            self._handle = self._make()
            self._pid = os.getpid()
        return self._handle

    def __len__(self) -> int:
        return len(self._rust())

    def fingerprint(self) -> int:
        """The source fingerprint a loader state records."""
        return int(self._rust().fingerprint())

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_handle"], state["_pid"] = None, None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def close(self) -> None:
        """Drops the Rust handle (reopened on the next use)."""
        self._handle, self._pid = None, None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _records(source: TokenWindows | TokenDocuments) -> Any:
    if isinstance(source, TokenDocuments):
        return source._rust()
    if isinstance(source, TokenWindows):
        return _rs._TokenRecords(source.location, source.seq_len, source.stride, source.format,
                                 source.dtype_option, source.column)
    raise ConfigError(f"a mixture mixes TokenWindows or TokenDocuments, not {type(source).__name__}", field="sources")


class TokenDocuments(_Lazy):
    """The documents of a token dataset: a guideloom stream-with-meta storage of ``u16``/``u32``
    document tokens (what ``ingest --doc-meta`` writes), or a dataset in another project's layout
    that records document boundaries (Megatron, MDS, litdata, OLMo with its documents, ...), local
    or at an object-store URL. ``docs[i]`` is document ``i`` as a ``uint32`` array.

    Raises:
        ConfigError: the dataset records no document boundaries (a plain token stream).
    """

    def __init__(self, location: str | os.PathLike[str], *, format: str | None = None, dtype: Any = None,
                 column: str | None = None) -> None:
        self.location = os.fspath(location)
        self.format = format
        self.dtype_option = None if dtype is None else np.dtype(dtype).str
        self.column = column
        self._handle, self._pid = None, None
        self._rust()

    def _make(self) -> Any:
        return _rs._TokenRecords(self.location, None, None, self.format, self.dtype_option, self.column)

    @property
    def tokens(self) -> int:
        """Tokens in the dataset."""
        return int(self._rust().tokens)

    def __getitem__(self, index: Any) -> np.ndarray:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[Any]) -> list[np.ndarray]:
        """Documents ``indices`` (one Rust read call)."""
        return list(self._rust().read(_positions(indices, len(self))))

    def __repr__(self) -> str:
        return f"TokenDocuments({self.location!r})"


_STOPS = ("first-exhausted", "all-exhausted")


class Mixture(_Lazy):
    """A weighted mixture of token windows or documents (``[(source, weight), ...]``, every
    source a :class:`~guideloom.TokenWindows` or every one a :class:`TokenDocuments`): record
    ``p`` of the mixture is record ``r`` of source ``s`` as the schedule deals positions.

    Args:
        sources: ``(source, weight)`` pairs; weights are exact decimals (0.29 is 29/100), shares
            of the mixture's records (``unit="records"``: windows or documents) or of its tokens
            (``unit="tokens"``: each weight divided by its source's mean record length, so 0.7
            is 70 % of the tokens).
        schedule: ``"proportional"`` (the default, as the CLI's) or ``"greedy"`` (Megatron's
            ``BlendedDataset`` schedule).
        stop: when the mixture ends: ``"first-exhausted"`` (the default: no source wraps),
            ``"all-exhausted"`` (every record of every source once), ``"budget:N"`` (exactly N
            records, sources wrap into re-shuffled epochs) or ``"repeat:N"``.
        shuffle_seed: permute each source's records with this seed (the CLI's ``--shuffle``
            does it with ``--seed``); ``None``: in order.

    A loader batch over a mixture has ``data`` (a ``[batch, seq_len]`` ``uint32`` array for
    windows, a list of arrays for documents) and ``sources`` (per record, its source's index).
    """

    def __init__(self, sources: Sequence[tuple[TokenWindows | TokenDocuments, float]], *, schedule: str = "proportional",
                 stop: str = "first-exhausted", unit: str = "records", shuffle_seed: int | None = None) -> None:
        self.sources = [(s, float(w)) for s, w in sources]
        if not self.sources:
            raise ConfigError("a mixture needs at least one source", field="sources")
        self.schedule = schedule
        self.stop = stop
        self.unit = unit
        self.shuffle_seed = None if shuffle_seed is None else operator.index(shuffle_seed)
        self._handle, self._pid = None, None
        self._rust()

    def _make(self) -> Any:
        name, count = self.stop, None
        if self.stop not in _STOPS:
            name, _, n = self.stop.partition(":")
            try:
                count = int(n)
            except ValueError:
                raise ConfigError(f"stop {self.stop!r}: expected first-exhausted, all-exhausted, budget:N or repeat:N",
                                  field="stop") from None
        options = {"schedule": self.schedule, "stop": name, "stop_count": count, "unit": self.unit,
                   "shuffle_seed": self.shuffle_seed}
        return _rs._Mixture([(_records(s), w) for s, w in self.sources], options)

    def __getitem__(self, index: Any) -> np.ndarray:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[Any]) -> list[np.ndarray]:
        """Records ``indices`` of the mixture (one Rust read call)."""
        return list(self._rust().read(_positions(indices, len(self)))[0])

    def read_sourced(self, indices: Sequence[Any]) -> tuple[list[np.ndarray], list[int], list[int]]:
        """Records ``indices``, with each one's source and its index in that source."""
        records, sources, within = self._rust().read(_positions(indices, len(self)))
        return list(records), list(sources), list(within)

    def __repr__(self) -> str:
        return f"Mixture({self.sources!r}, schedule={self.schedule!r}, stop={self.stop!r}, unit={self.unit!r})"


class Packed(_Lazy):
    """Documents packed into rows of ``seq_len`` tokens: the documents of a
    :class:`TokenDocuments` or of a :class:`Mixture` of them (then every token also carries its
    source), planned before the first row (the CLI's ``--pack concat-split|first-fit|best-fit|
    planned-bfd``).

    A row (``packed[i]``, or a loader batch's ``data``) is a dict of ``[rows, seq_len]``
    ``int64`` arrays: ``tokens`` (``pad_id`` after the last segment), ``targets`` (the next token
    of the same document, ``-100`` where there is none: torch's ``cross_entropy`` ignores it),
    ``segment_ids`` (1-based per document, 0 for padding), ``positions`` (within the document),
    ``loss_mask`` (1 where ``targets`` is real) and, over a mixture, ``sources`` (the mixture
    source of each token's document, -1 for padding).

    Args:
        strategy: ``"concat-split"``, ``"first-fit"``, ``"best-fit"`` (the default; ``bins``
            open rows) or ``"planned-bfd"`` (best-fit decreasing over the whole epoch).
        bins: open rows of first-fit and best-fit (default 8, as the CLI's).
        overflow: a document longer than a row: ``"error"`` (the default), ``"truncate"`` (its
            first ``seq_len`` tokens; :attr:`dropped_tokens` counts the rest) or ``"split"``.
        pad_id: the token id of padding (default 0).
    """

    def __init__(self, source: TokenDocuments | Mixture, seq_len: int, *, strategy: str = "best-fit", bins: int = 8,
                 overflow: str = "error", pad_id: int = 0) -> None:
        if not isinstance(source, (TokenDocuments, Mixture)):
            raise ConfigError(f"Packed packs TokenDocuments or a Mixture of them, not {type(source).__name__}",
                              field="source")
        self.source = source
        self.seq_len = operator.index(seq_len)
        self.strategy = strategy
        self.bins = operator.index(bins)
        self.overflow = overflow
        self.pad_id = operator.index(pad_id)
        for name, v, lo, hi in (("seq_len", self.seq_len, 1, 2**63), ("bins", self.bins, 1, 2**63),
                                ("pad_id", self.pad_id, 0, 2**32 - 1)):
            if not lo <= v < hi:
                raise ConfigError(f"{name} {v} is outside [{lo}, {hi})", field=name)
        self._handle, self._pid = None, None
        self._rust()

    def _make(self) -> Any:
        options = {"seq_len": self.seq_len, "strategy": self.strategy, "bins": self.bins, "overflow": self.overflow,
                   "pad_id": self.pad_id}
        return _rs._Packed(self.source._rust(), options)

    @property
    def dropped_tokens(self) -> int:
        """Tokens ``overflow="truncate"`` dropped."""
        return int(self._rust().dropped_tokens)

    def read_batch(self, indices: Sequence[Any]) -> dict[str, np.ndarray]:
        """Rows ``indices`` as one batch: a dict of ``[len(indices), seq_len]`` arrays."""
        return self._rust().read(_positions(indices, len(self)))  # type: ignore[no-any-return]

    def __getitem__(self, index: Any) -> dict[str, np.ndarray]:
        return {k: v[0] for k, v in self.read_batch([index]).items()}

    def __repr__(self) -> str:
        return (f"Packed({self.source!r}, seq_len={self.seq_len}, strategy={self.strategy!r}, bins={self.bins}, "
                f"overflow={self.overflow!r}, pad_id={self.pad_id})")
