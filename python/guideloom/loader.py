"""``Loader``: guideloom's loader (Rust worker threads, bounded prefetch, the same batches for any
worker count, an O(1) versioned JSON state shared with the CLI and the Rust library)."""

from __future__ import annotations

import json
import operator
from typing import Any

import numpy as np

from . import _guideloom as _rs
from .errors import ConfigError, StateError
from .sources import TokenWindows

__all__ = ["Loader", "Batch"]


class Batch:
    """One batch: ``data`` (for token windows a ``[batch, seq_len]`` numpy array over memory Rust
    owns, writable, taken by ``torch.from_numpy`` or ``np.from_dlpack`` without a copy; a list of
    records for a Python source), ``indices`` (record indices, ``uint64``), ``number`` (the batch
    number of this rank from the first batch of epoch 0), ``epoch`` and ``padding`` (``True``
    for records repeated to complete the final global batch of an epoch)."""

    __slots__ = ("data", "indices", "number", "epoch", "padding")

    def __init__(self, data: Any, indices: np.ndarray, number: int, epoch: int, padding: np.ndarray) -> None:
        self.data = data
        self.indices = indices
        self.number = number
        self.epoch = epoch
        self.padding = padding

    @property
    def inputs(self) -> np.ndarray:
        """``data[:, :-1]``: a language model's inputs (a view)."""
        return self.data[:, :-1]  # type: ignore[no-any-return]

    @property
    def targets(self) -> np.ndarray:
        """``data[:, 1:]``: the next-token targets (a view)."""
        return self.data[:, 1:]  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self.indices)

    def __repr__(self) -> str:
        return f"Batch(number={self.number}, epoch={self.epoch}, records={len(self.indices)})"


def _count(value: Any, what: str, minimum: int = 0, limit: int = 2**63) -> int:
    try:
        i = operator.index(value)
    except TypeError:
        raise ConfigError(f"{what} must be an integer, got {type(value).__name__}", field=what) from None
    if i < minimum or i >= limit:
        raise ConfigError(f"{what} {i} is outside [{minimum}, {limit})", field=what)
    return i


class Loader:
    """Batches of ``source`` in a deterministic order.

    ``source`` is a :class:`~guideloom.TokenWindows` (read in Rust: the fast path) or any Python
    object with ``__len__`` and ``__getitem__`` (and optionally ``__getitems__``): the slow path,
    its records fetched by the Rust workers under the GIL.

    Args:
        batch_size: records per batch of this rank.
        shuffle: shuffle each epoch with the permutation keyed by ``(seed, epoch)``.
        seed: the seed of the shuffle (an integer in ``[0, 2**64)``).
        epochs: epochs to run; ``None``: unbounded.
        workers: Rust worker threads (0: batches made on the consumer's ``next``).
        prefetch: batches in flight ahead of the consumer (default: the library's).
        rank, world_size: this process's data-parallel rank and the number of ranks.
        drop_remainder: drop the incomplete final global batch of each epoch.
        global_batch: records per global step over all ranks (instead of ``batch_size``); a state
            then resumes onto another world size.
        round_down: a loaded state of another global batch resumes at the start of its step.

    Iterating gives :class:`Batch` es; ``iter(loader)`` starts over, or from the state given to
    :meth:`load_state_dict` / :meth:`set_state` (``next(loader)`` before any ``iter`` starts it
    too; once exhausted it stays so until the next ``iter``). The GIL is released while Rust works and while
    the consumer waits. The state is the JSON the CLI's ``--save-state`` writes and
    ``--resume`` reads; it holds no worker count, so it resumes onto any ``workers``.
    """

    def __init__(
        self,
        source: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        epochs: int | None = 1,
        workers: int = 0,
        prefetch: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        drop_remainder: bool = False,
        global_batch: int | None = None,
        round_down: bool = False,
    ) -> None:
        self.source = source
        rust_source = source._rust() if isinstance(source, TokenWindows) else source
        if not isinstance(source, TokenWindows) and not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
            raise ConfigError(f"a source needs __len__ and __getitem__, {type(source).__name__} has not", field="source")
        options = {
            "batch_size": _count(batch_size, "batch_size"),
            "shuffle": bool(shuffle),
            "seed": _count(seed, "seed", limit=2**64),
            "epochs": None if epochs is None else _count(epochs, "epochs"),
            "workers": _count(workers, "workers"),
            "prefetch": None if prefetch is None else _count(prefetch, "prefetch"),
            "rank": _count(rank, "rank"),
            "world_size": _count(world_size, "world_size"),
            "drop_remainder": bool(drop_remainder),
            "global_batch": None if global_batch is None else _count(global_batch, "global_batch"),
        }
        self._rust = _rs._Loader(rust_source, options)
        self._round_down = bool(round_down)
        self._pending: str | None = None
        # "new": not started (next() starts it); "running"; "done": exhausted until iter() again.
        self._phase = "new"

    def __len__(self) -> int:
        """Batches per epoch of this rank."""
        return len(self._rust)

    def __iter__(self) -> Loader:
        self._rust.start(self._pending, self._round_down)
        self._pending = None
        self._phase = "running"
        return self

    def __next__(self) -> Batch:
        if self._phase == "new":
            self.__iter__()
        elif self._phase == "done":
            raise StopIteration
        got = self._rust.next()
        if got is None:
            self._phase = "done"
            raise StopIteration
        return Batch(*got)

    def close(self) -> None:
        """Stops the worker threads."""
        self._rust.close()
        self._phase = "new"

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> Any:
        raise TypeError("a Loader holds threads and cannot be pickled: save its state_dict() instead")

    # --- state: torchdata's Stateful protocol and Grain's get_state/set_state -------------------

    def _state_json(self) -> str:
        if self._pending is not None:
            return self._pending
        return self._rust.state()

    def state_dict(self) -> dict[str, Any]:
        """The state after the last batch taken (a JSON-able dict, ~250 bytes)."""
        return json.loads(self._state_json())  # type: ignore[no-any-return]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resumes from ``state_dict`` on the next ``iter(loader)`` (checked then: another
        version, other data or another configuration is a :class:`~guideloom.errors.StateError`)."""
        if not isinstance(state_dict, dict):
            raise StateError(f"a loader state is a dict, got {type(state_dict).__name__}")
        try:
            text = json.dumps(state_dict)
        except (TypeError, ValueError) as e:
            raise StateError(f"the state does not serialize to JSON: {e}") from e
        self._rust.start(text, self._round_down)  # validates it now
        self._rust.close()
        self._pending = text
        self._phase = "new"

    def get_state(self) -> bytes:
        """The state as JSON bytes (Grain's protocol)."""
        return self._state_json().encode()

    def set_state(self, state: bytes | str | dict[str, Any]) -> None:
        """Resumes from a state of :meth:`get_state` (or the CLI's state file's contents)."""
        if isinstance(state, (bytes, bytearray)):
            try:
                state = state.decode()
            except UnicodeDecodeError as e:
                raise StateError(f"the state is not UTF-8 JSON: {e}") from e
        if isinstance(state, str):
            try:
                state = json.loads(state)
            except ValueError as e:
                raise StateError(f"the state is not JSON: {e}") from e
        self.load_state_dict(state)  # type: ignore[arg-type]
