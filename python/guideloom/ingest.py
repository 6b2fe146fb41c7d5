"""Ingest on many processes of one machine, and the Arrow-to-documents step the engine adapters
share.

:func:`parallel` is litdata's ``optimize`` shape on guideloom's parts and one commit
(:mod:`guideloom.parts`): ``fn`` maps one input to its token documents, the inputs are cut into
partitions of ``inputs_per_part`` consecutive inputs, worker processes (``spawn`` or
``forkserver``, never ``fork``) write one part a partition, and the driver commits every part in
one atomic manifest write, in partition order. The committed storage therefore does not depend on
``num_workers``, on which worker ran which partition, or on timing. A part is a token stream
storage (:data:`guideloom.parts.KINDS`): the documents' tokens are stored one after another, in
order, and read back with :class:`guideloom.TokenWindows`; their boundaries are checked, not kept.

:func:`arrow_documents` turns an Arrow ``list<integer>`` column (a Spark or Ray batch) into the
``(values, offsets)`` pair :meth:`guideloom.parts.PartWriter.write` takes, with no per-row Python.
"""

from __future__ import annotations

import multiprocessing
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from . import parts
from .errors import ConfigError, FormatError

__all__ = ["arrow_documents", "documents_to_arrays", "new_job_id", "parallel", "write_part"]

_MODES = ("error", "append", "overwrite")


def new_job_id() -> str:
    """A job id unique to one write (``uuid4`` hex: 32 lowercase hex digits), the directory under
    ``<root>/_parts/`` that holds the job's parts."""
    return uuid.uuid4().hex


def check_mode(mode: str) -> str:
    """``mode`` if it is one of ``"error"``, ``"append"``, ``"overwrite"``.

    Raises:
        ConfigError: another value.
    """
    if mode not in _MODES:
        raise ConfigError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}", field="mode",
                          expected="|".join(_MODES), found=mode)
    return mode


def _check_range(values: np.ndarray, dtype: np.dtype[Any], where: str) -> None:
    """Every value of ``values`` fits ``dtype`` (checked with one min and one max)."""
    if values.size == 0 or values.dtype == dtype:
        return
    info = np.iinfo(dtype)
    lo, hi = int(values.min()), int(values.max())
    if lo < int(info.min) or hi > int(info.max):
        bad = lo if lo < int(info.min) else hi
        raise FormatError(f"{where}: token {bad} does not fit {dtype} [{info.min}, {info.max}]",
                          expected=str(dtype), found=bad)


def documents_to_arrays(documents: Iterable[Any], dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """``documents`` (each a 1-D sequence of integer token ids) as ``(values, offsets)``:
    ``values`` the concatenated tokens as ``dtype``, ``offsets`` int64 ``[n_documents + 1]``
    with document ``i`` at ``values[offsets[i]:offsets[i + 1]]``.

    Raises:
        FormatError: a document that is not 1-D integers, or a token outside ``dtype``'s range.
    """
    dt = numpy_dtype(dtype)
    arrays = [np.asarray(d) for d in documents]
    for i, a in enumerate(arrays):
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise FormatError(f"document {i} is not a 1-D array of integers (shape {a.shape}, dtype {a.dtype})",
                              index=i, found=str(a.dtype))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    if arrays:
        np.cumsum([a.size for a in arrays], out=offsets[1:])
    values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=dt)
    if values.size and values.dtype.kind not in "iu":
        values = values.astype(np.int64)
    _check_range(values, dt, "documents")
    return np.ascontiguousarray(values, dtype=dt), offsets


def arrow_documents(column: Any, dtype: Any, *, name: str = "column") -> tuple[np.ndarray, np.ndarray]:
    """An Arrow ``list<integer>`` or ``large_list<integer>`` array (or chunked array) as
    ``(values, offsets)``: the list's child values from its first offset to its last, as
    ``dtype``, and its offsets rebased to 0 as int64 ``[len(column) + 1]``. O(1) Python calls
    per batch: the buffers are viewed, cast once and range-checked with one min and one max.

    Raises:
        FormatError: the column is not a list of integers, holds a null list or a null token,
            or a token outside ``dtype``'s range (the error names ``name``).
    """
    import pyarrow as pa  # type: ignore[import-untyped]

    dt = numpy_dtype(dtype)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    typ = column.type
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ)) or not pa.types.is_integer(typ.value_type):
        raise FormatError(f"column {name!r} must be list<integer>, got {typ}", field=name,
                          expected="list<integer>", found=str(typ))
    if column.null_count:
        raise FormatError(f"column {name!r} holds {column.null_count} null documents", field=name,
                          found=column.null_count)
    offsets = np.asarray(column.offsets, dtype=np.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    child = column.values.slice(start, stop - start)
    if child.null_count:
        raise FormatError(f"column {name!r} holds {child.null_count} null tokens", field=name,
                          found=child.null_count)
    values = child.to_numpy(zero_copy_only=False)
    _check_range(values, dt, f"column {name!r}")
    return np.ascontiguousarray(values, dtype=dt), offsets - start


def write_part(root: str, job: str, partition: int, attempt: int, batches: Iterable[tuple[np.ndarray, np.ndarray]],
               dtype: Any) -> parts.Receipt:
    """Writes one part of ``job`` from ``(values, offsets)`` pairs and returns its receipt. On an
    exception the part is left uncommitted (``guideloom.parts.gc`` lists it).

    Raises:
        guideloom.errors.GuideloomError: the part writer's errors.
    """
    with parts.PartWriter(root, job, partition, attempt, dtype=_dtype_name(dtype)) as w:
        for values, offsets in batches:
            if len(offsets) > 1:
                w.write(values, offsets)
        return w.close()


def _dtype_name(dtype: Any) -> str:
    """The part writer's dtype name (``"u16"``, ``"u32"``) of a numpy dtype or name."""
    if isinstance(dtype, str) and dtype in ("u16", "u32"):
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = np.dtype(np.float64)  # refused below
    if dt.kind != "u" or dt.itemsize not in (2, 4):
        raise ConfigError(f"token dtype must be u16 or u32 (uint16, uint32), got {dtype!r}", field="dtype",
                          expected="u16|u32", found=str(dtype))
    return f"u{dt.itemsize * 8}"


def numpy_dtype(dtype: Any) -> np.dtype[Any]:
    """The numpy dtype of a part dtype name (``"u16"`` -> ``uint16``) or numpy dtype.

    Raises:
        ConfigError: not u16 or u32.
    """
    return np.dtype({"u16": "<u2", "u32": "<u4"}[_dtype_name(dtype)])


def _run_partition(args: tuple[Callable[[Any], Iterable[Any]], Sequence[Any], str, str, int, str]) -> str:
    fn, inputs, root, job, partition, dtype = args
    dt = numpy_dtype(dtype)

    def batches() -> Iterable[tuple[np.ndarray, np.ndarray]]:
        for item in inputs:
            yield documents_to_arrays(fn(item), dt)

    receipt = write_part(root, job, partition, 0, batches(), dtype)
    return receipt.to_json()


def parallel(fn: Callable[[Any], Iterable[Any]], inputs: Sequence[Any], out: str | os.PathLike[str],
             num_workers: int = 1, *, dtype: str = "u16", mode: str = "error", inputs_per_part: int = 1,
             start_method: str = "spawn") -> list[parts.Receipt]:
    """Writes the documents ``fn`` makes of every input of ``inputs`` into the storage ``out``
    with ``num_workers`` processes, in one commit.

    ``fn(input)`` returns an iterable of documents (1-D integer arrays or sequences of token ids).
    Partition ``p`` is ``inputs[p * inputs_per_part:(p + 1) * inputs_per_part]``; its documents,
    in input order, form part ``p``; the commit appends the parts in partition order after the
    storage's shards (``mode``: ``"error"``: the storage must not exist, ``"append"``,
    ``"overwrite"``). ``fn`` and the inputs must pickle (a module-level function), as for any
    ``spawn``/``forkserver`` pool. With ``num_workers == 0`` the partitions run in this process.

    Returns the committed receipts in partition order. On any failure the job's parts are
    removed (``guideloom.parts.abort``), the storage's last commit stays in force, and the
    error is raised.

    Raises:
        ConfigError: a bad ``num_workers``, ``inputs_per_part``, ``mode``, ``dtype`` or
            ``start_method``.
        guideloom.errors.GuideloomError: ``fn``'s documents do not fit ``dtype``, or the part
            writer's and ``commit_parts``' errors (an existing storage with ``mode="error"``).
    """
    check_mode(mode)
    _dtype_name(dtype)
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ConfigError(f"num_workers must be a non-negative integer, got {num_workers!r}", field="num_workers")
    if isinstance(inputs_per_part, bool) or not isinstance(inputs_per_part, int) or inputs_per_part < 1:
        raise ConfigError(f"inputs_per_part must be a positive integer, got {inputs_per_part!r}",
                          field="inputs_per_part")
    if start_method not in ("spawn", "forkserver"):
        raise ConfigError(f"start_method must be spawn or forkserver, got {start_method!r}", field="start_method")
    root = os.fspath(out)
    items = list(inputs)
    job = new_job_id()
    tasks = [(fn, items[i:i + inputs_per_part], root, job, i // inputs_per_part, dtype)
             for i in range(0, len(items), inputs_per_part)]
    try:
        if num_workers == 0:
            texts = [_run_partition(t) for t in tasks]
        else:
            ctx = multiprocessing.get_context(start_method)
            with ProcessPoolExecutor(max_workers=num_workers, mp_context=ctx) as pool:
                texts = list(pool.map(_run_partition, tasks))
        receipts = [parts.Receipt.from_json(t) for t in texts]
        parts.commit_parts(root, receipts, mode=mode)
    except BaseException:
        parts.abort(root, job)
        raise
    return receipts
