"""``Loader``: guideloom's loader (Rust worker threads, bounded prefetch, the same batches for any
worker count, an O(1) versioned JSON state shared with the CLI and the Rust library)."""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _guideloom as _rs
from .errors import ConfigError, StateError
from .mixing import Mixture, Packed
from .sources import TokenWindows

__all__ = ["Loader", "Batch"]


class Batch:
    """One batch: ``data`` (for token windows a ``[batch, seq_len]`` numpy array over memory Rust
    owns, writable, taken by ``torch.from_numpy`` or ``np.from_dlpack`` without a copy; a list of
    records for a Python source), ``indices`` (record indices, ``uint64``), ``number`` (the batch
    number of this rank from the first batch of epoch 0), ``epoch`` and ``padding`` (``True``
    for records repeated to complete the final global batch of an epoch) and ``sources`` (per
    record, the source of a Megatron blend or a :class:`~guideloom.Mixture` it came from,
    ``uint32``; ``None`` otherwise; packed rows of a mixture carry theirs per token in
    ``data["sources"]``).

    A batch of :meth:`Loader.llmc` is one llm.c batch: ``data`` holds its ``B * T + 1`` tokens
    (1-D, ``int64``), ``inputs``/``targets`` are the ``[B, T]`` views llm.c's ``inputs`` and
    ``targets`` are, and ``indices`` the window's number."""

    __slots__ = ("data", "indices", "number", "epoch", "_padding", "sources", "_rows")

    def __init__(
        self,
        data: Any,
        indices: np.ndarray,
        number: int,
        epoch: int,
        padding: np.ndarray | None,
        sources: np.ndarray | None = None,
        rows: int | None = None,
    ) -> None:
        self.data = data
        self.indices = indices
        self.number = number
        self.epoch = epoch
        self._padding = padding
        self.sources = sources
        self._rows = rows

    @property
    def padding(self) -> np.ndarray:
        """Per record, ``True`` when it repeats a record to complete the final global batch of an
        epoch (``bool``; all ``False`` in every other batch)."""
        if self._padding is None:
            self._padding = np.zeros(len(self.indices), dtype=np.bool_)
        return self._padding

    @property
    def inputs(self) -> np.ndarray:
        """``data[:, :-1]``: a language model's inputs (a view); for an llm.c batch
        ``data[:-1]`` as ``[B, T]``; for packed rows ``data["tokens"]``."""
        if self._rows is not None:
            return self.data[:-1].reshape(self._rows, -1)  # type: ignore[no-any-return]
        if isinstance(self.data, dict):
            return self.data["tokens"]  # type: ignore[no-any-return]
        return self.data[:, :-1]  # type: ignore[no-any-return]

    @property
    def targets(self) -> np.ndarray:
        """``data[:, 1:]``: the next-token targets (a view); for an llm.c batch ``data[1:]`` as
        ``[B, T]``; for packed rows ``data["targets"]`` (per document, -100 where none)."""
        if self._rows is not None:
            return self.data[1:].reshape(self._rows, -1)  # type: ignore[no-any-return]
        if isinstance(self.data, dict):
            return self.data["targets"]  # type: ignore[no-any-return]
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

    ``source`` is a :class:`~guideloom.TokenWindows`, a :class:`~guideloom.Mixture` or a
    :class:`~guideloom.Packed` (read in Rust: the fast path) or any Python
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
        fast = isinstance(source, (TokenWindows, Mixture, Packed))
        rust_source = source._rust() if fast else source
        if not fast and not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
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
        self._start(_rs._Loader(rust_source, options), round_down)

    def _start(self, rust: _rs._Loader, round_down: bool, rows: int | None = None) -> None:
        self._rust: _rs._Loader = rust
        self._round_down = bool(round_down)
        self._rows = rows
        self._pending: str | None = None
        # "new": not started (next() starts it); "running"; "done": exhausted until iter() again.
        self._phase = "new"

    @classmethod
    def megatron(
        cls,
        data_path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | Sequence[tuple[float, str | os.PathLike[str]]],
        seq_length: int,
        micro_batch_size: int,
        *,
        split: str = "969,30,1",
        which: str = "train",
        train_samples: int | None = None,
        seed: int = 1234,
        consumed_samples: int = 0,
        rank: int = 0,
        world_size: int = 1,
        epochs: int = 1,
        workers: int = 0,
    ) -> Loader:
        """Megatron-Core's training samples, in Megatron's order, read in place from its
        ``.bin``/``.idx`` datasets (local prefixes or URLs).

        The samples are those of megatron-core's ``GPTDataset`` (one prefix) or
        ``BlendedDataset`` (``[(weight, prefix), ...]``; a list of prefixes without weights is
        Megatron's blend of prefixes without weights) built with ``split`` (Megatron's
        ``--split``), ``which`` (``"train"``, ``"valid"``, ``"test"``), ``train_samples``
        (``--train-samples``; needed for a weighted blend) and ``seed`` (``--seed``, default
        1234 as Megatron's), each ``seq_length + 1`` tokens. They are dealt as Megatron's
        ``MegatronPretrainingSampler`` deals them: ``micro_batch_size`` samples per batch of
        this ``rank`` of ``world_size`` data-parallel ranks, the incomplete last global batch
        dropped, continuing at ``consumed_samples`` (all ranks together).

        A batch's ``data`` is a ``[micro_batch_size, seq_length + 1]`` ``int64`` array,
        ``indices`` Megatron's sample numbers, ``sources`` the blend's dataset of each sample.
        The state is the CLI's (``guideloom batches --order megatron``).

        Raises:
            ForeignLayoutError: a prefix is not a Megatron dataset.
            ConfigError: a setting Megatron refuses (an empty split, a blend without
                ``train_samples``, weights mixed with bare prefixes, ...).
        """
        if isinstance(data_path, (str, os.PathLike)):
            datasets: list[tuple[float | None, str]] = [(None, os.fspath(data_path))]
        else:
            datasets = []
            for entry in data_path:
                if isinstance(entry, tuple):
                    weight, prefix = entry
                    datasets.append((float(weight), os.fspath(prefix)))
                else:
                    datasets.append((None, os.fspath(entry)))
        if not datasets:
            raise ConfigError("data_path names no dataset", field="data_path")
        if str(which) not in ("train", "valid", "test"):
            raise ConfigError(f"which must be 'train', 'valid' or 'test', got {which!r}", field="which")
        options = {
            "seq_length": _count(seq_length, "seq_length", minimum=1),
            "micro_batch_size": _count(micro_batch_size, "micro_batch_size", minimum=1),
            "split": str(split),
            "which": str(which),
            "train_samples": None if train_samples is None else _count(train_samples, "train_samples"),
            "seed": _count(seed, "seed", limit=2**32),
            "consumed_samples": _count(consumed_samples, "consumed_samples"),
            "rank": _count(rank, "rank"),
            "world_size": _count(world_size, "world_size", minimum=1),
            "epochs": _count(epochs, "epochs"),
            "workers": _count(workers, "workers"),
        }
        loader = cls.__new__(cls)
        loader.source = datasets
        loader._start(_rs._Loader.megatron(datasets, options), False)
        return loader

    @classmethod
    def llmc(
        cls,
        path: str | os.PathLike[str],
        batch: int,
        seq: int,
        *,
        rank: int = 0,
        processes: int = 1,
        epochs: int = 1,
        shuffle: bool = False,
        workers: int = 0,
        position: tuple[int, int, int] | None = None,
    ) -> Loader:
        """llm.c's batches, in llm.c's order, read in place from its ``.bin`` shards.

        ``path`` is one shard, a directory or a glob of shards (sorted by name, as llm.c's
        ``glob`` sorts them); ``batch`` and ``seq`` are llm.c's ``B`` and ``T``; ``rank`` of
        ``processes`` is llm.c's ``process_rank`` of ``num_processes``; ``shuffle`` is llm.c's
        ``should_shuffle`` (every process and epoch its own order, as llm.c's ``mt19937``
        shuffles). ``position=(epoch, current_shard_idx, current_sample_idx)`` continues an
        llm.c run where llm.c's checkpoint says it stood (``epoch`` only when shuffled).

        A batch is one llm.c batch: ``data`` its ``B * T + 1`` tokens (``int64``),
        ``inputs``/``targets`` the ``[B, T]`` views, ``epoch`` llm.c's epoch.

        Raises:
            ForeignLayoutError: the shards are not llm.c shards.
            ConfigError: ``B``, ``T`` or ``processes`` is 0, or a position llm.c never reaches.
        """
        options = {
            "batch": _count(batch, "batch", minimum=1),
            "seq": _count(seq, "seq", minimum=1),
            "rank": _count(rank, "rank"),
            "processes": _count(processes, "processes", minimum=1),
            "epochs": _count(epochs, "epochs"),
            "shuffle": bool(shuffle),
            "workers": _count(workers, "workers"),
            "position": None
            if position is None
            else tuple(_count(v, f"position[{i}]") for i, v in enumerate(position)),
        }
        if position is not None and len(position) != 3:
            raise ConfigError("position is (epoch, shard, sample)", field="position")
        loader = cls.__new__(cls)
        loader.source = os.fspath(path)
        loader._start(_rs._Loader.llmc(os.fspath(path), options), False, rows=int(batch))
        return loader

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
        data, indices, number, epoch, padding, sources = got
        return Batch(data, indices, number, epoch, padding, sources, rows=self._rows)

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
