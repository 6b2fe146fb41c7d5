"""Many writers, one storage: parts written in parallel and published by one atomic commit.

A job's tasks (processes, a Slurm array, Spark or Ray tasks) each write one *part* with
:class:`PartWriter`: a complete, committed token stream storage of its own under
``<root>/_parts/<job>/<partition:06>-<attempt>/``. Closing it returns a :class:`Receipt` (small,
picklable JSON: what the task returns to its driver). The driver calls :func:`commit_parts` once:
it checks that the parts agree (kind, dtype, format; with the storage when appending), keeps one
attempt per partition (the lowest), checks that every file a receipt names exists with its
committed length, appends the parts' shards after the storage's in partition order (no byte is
copied: the manifest names the part files by their paths) and publishes one manifest atomically.
Readers see nothing of the job before that and all of it after; the committed stream and its
fingerprint depend only on the parts' contents and partition numbers, not on which task ran
where, on retries or on timing. :func:`abort` removes a job's uncommitted parts; :func:`gc` lists
(and with ``apply=True`` deletes) the part directories no manifest references.

Example::

    from guideloom.parts import PartWriter, commit_parts
    receipts = []
    for partition, docs in enumerate([[[1, 2], [3]], [[4, 5, 6]]]):
        with PartWriter(root, "job-1", partition, 0, dtype="u16") as w:
            w.write_documents(docs)
        receipts.append(w.receipt)
    commit_parts(root, receipts, mode="error")

The storage then reads like one written by a single writer (``guideloom.TokenWindows(root, ...)``,
``guideloom inspect --verify``, the Rust readers). Local paths only.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Sequence

import numpy as np

from . import _guideloom as _rs
from .errors import ConfigError, FormatError, StorageClosedError

__all__ = ["KINDS", "MODES", "PartWriter", "Receipt", "abort", "commit_parts", "gc"]

#: The storage kinds a part may have: ``"stream"``, a token stream (format ``tokens``), the kind of
#: :class:`guideloom.StreamStorage` and of ``guideloom ingest``'s storages.
KINDS = ("stream",)

#: The modes of :func:`commit_parts`.
MODES = ("error", "append", "overwrite")

_DTYPES = {"u16": "<u2", "u32": "<u4", "uint16": "<u2", "uint32": "<u4", "<u2": "<u2", "<u4": "<u4"}


def _descr(dtype: Any) -> str:
    """The little-endian numpy descr of ``dtype`` (``"u16"``, ``"u32"``, a numpy dtype)."""
    key = dtype if isinstance(dtype, str) else np.dtype(dtype).newbyteorder("<").str
    descr = _DTYPES.get(key)
    if descr is None:
        raise ConfigError(f"a part stores u16 or u32 token ids, not {dtype!r}", field="dtype")
    return descr


class Receipt:
    """What a written part is: its job, partition and attempt, dtype and shards (with their files'
    paths relative to the root, lengths and checksums). Picklable; :meth:`to_json` and
    :meth:`from_json` give and take the JSON text the Rust crates and the CLI's
    ``commit-parts`` use.

    Attributes:
        job: The job name.
        partition: The partition (parts are committed in increasing partition order).
        attempt: The attempt (of two receipts of a partition the lower is kept).
        kind: The storage kind (``"stream"``).
        dtype: The element dtype's numpy descr (``"<u2"``, ``"<u4"``).
        shards: The part's shard entries, as dicts (``id``, ``elements``, ``bytes``,
            ``checksum``, ``path``).
    """

    __slots__ = ("_json", "job", "partition", "attempt", "kind", "dtype", "shards")

    def __init__(self, text: str) -> None:
        self._json = _rs.check_receipt(text)
        data = json.loads(self._json)
        self.job: str = data["job"]
        self.partition: int = data["partition"]
        self.attempt: int = data["attempt"]
        self.kind: str = data["kind"]
        self.dtype: Any = data["dtype"]
        self.shards: list[dict[str, Any]] = data["shards"]

    @classmethod
    def from_json(cls, text: str) -> Receipt:
        """A receipt from its JSON text (checked: version, job name, shard paths inside the part).

        Raises:
            ReceiptError: The text is not a valid receipt.
        """
        return cls(text)

    def to_json(self) -> str:
        """The receipt as JSON text."""
        return self._json

    def __reduce__(self) -> tuple[Any, ...]:
        return (Receipt.from_json, (self._json,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Receipt) and other._json == self._json

    def __hash__(self) -> int:
        return hash(self._json)

    def __repr__(self) -> str:
        return (f"Receipt(job={self.job!r}, partition={self.partition}, attempt={self.attempt}, "
                f"dtype={self.dtype!r}, shards={len(self.shards)})")


class PartWriter:
    """Writes one part of a job: a token stream storage of its own under
    ``<root>/_parts/<job>/<partition:06>-<attempt>/``, invisible in ``root`` until
    :func:`commit_parts`.

    Args:
        root: The storage directory the part belongs to (it need not hold a storage yet): a
            local path, or an object-store URL (``s3://BUCKET/PREFIX``, ``gs://``, ``az://``;
            the store's options from the environment, as for reading): the part is then
            written straight to the store, its shard held in memory until :meth:`close`.
        job: The job name: 1 to 128 ASCII letters, digits, ``.``, ``_``, ``-``, not starting
            with ``.``.
        partition: The partition number (parts are committed in increasing partition order).
        attempt: The attempt number (a retried or speculative task writes another attempt).
        dtype: The stored element type: ``"u16"`` (default) or ``"u32"``.
        kind: The storage kind, one of :data:`KINDS` (``"stream"``).

    A context manager: leaving the ``with`` block without an exception commits the part
    (:meth:`close`; the receipt is then :attr:`receipt`), with one closes it without committing.

    Raises:
        ReceiptError: An unsafe job name.
        StorageExistsError: That attempt of the partition was already written.
        StorageLockedError: Another writer has the part open.
    """

    def __init__(self, root: str | os.PathLike[str], job: str, partition: int, attempt: int, *,
                 dtype: Any = "u16", kind: str = "stream") -> None:
        if kind not in KINDS:
            raise ConfigError(f"a part's kind is one of {KINDS}, not {kind!r}", field="kind")
        if partition < 0 or attempt < 0:
            raise ConfigError("partition and attempt are non-negative integers", field="partition")
        self.root = os.fspath(root)
        self.job = job
        self.partition = int(partition)
        self.attempt = int(attempt)
        self.kind = kind
        self._descr = _descr(dtype)
        self.dtype = np.dtype(self._descr)
        self.receipt: Receipt | None = None
        self._writer: Any = _rs._PartWriter(self.root, job, self.partition, self.attempt,
                                            json.dumps(self._descr))

    def write(self, values: Any, offsets: Any = None) -> int:
        """Appends documents given as one flat array of token ids and their boundaries, with no
        per-document Python and the GIL released while the bytes are written.

        Args:
            values: A 1-D array of integer token ids (any integer dtype; each must fit the
                part's dtype).
            offsets: ``None`` (``values`` is one run of tokens), or a 1-D int64 array of
                ``n_docs + 1`` increasing offsets into ``values``, the first 0 and the last
                ``len(values)``: document ``i`` is ``values[offsets[i]:offsets[i+1]]`` (a stream
                storage keeps the tokens in order; the offsets are checked).

        Returns:
            The part's element count so far.

        Raises:
            FormatError: A value that is not an integer, does not fit the dtype, or bad offsets.
            StorageClosedError: The writer is closed.
        """
        v = np.asarray(values)
        if v.ndim != 1:
            raise FormatError(f"values has {v.ndim} dimensions, expected 1")
        if v.size and v.dtype.kind not in "iu":
            raise FormatError(f"values has dtype {v.dtype}, expected integers")
        if offsets is not None:
            o = np.asarray(offsets)
            if o.ndim != 1 or o.size == 0 or (o.size and o.dtype.kind not in "iu"):
                raise FormatError("offsets is a 1-D integer array of n_docs + 1 offsets")
            if int(o[0]) != 0 or int(o[-1]) != v.size or bool(np.any(np.diff(o.astype(np.int64)) < 0)):
                raise FormatError(f"offsets must start at 0, not decrease and end at len(values) = {v.size}")
        if v.size and v.dtype != self.dtype:
            lo, hi = int(v.min()), int(v.max())
            limit = int(np.iinfo(self.dtype).max)
            if lo < 0 or hi > limit:
                bad = lo if lo < 0 else hi
                raise FormatError(f"token id {bad} does not fit {self.dtype} (0 to {limit})")
        data = np.ascontiguousarray(v, dtype=self.dtype)
        if self._writer is None:
            raise StorageClosedError("the part writer is closed")
        return int(self._writer.append(data.view(np.uint8)))

    def write_documents(self, documents: Iterable[Sequence[int]]) -> int:
        """Appends documents given as sequences of token ids (a convenience over :meth:`write`).

        Returns:
            The part's element count so far.
        """
        docs = [np.asarray(d, dtype=np.int64) for d in documents]
        if not docs:
            return self.write(np.zeros(0, dtype=self.dtype))
        return self.write(np.concatenate(docs))

    def close(self) -> Receipt:
        """Commits the part and returns its receipt (also kept as :attr:`receipt`); the writer is
        then closed. Calling it again returns the same receipt.

        Raises:
            StorageError: The part could not be committed.
        """
        if self.receipt is not None:
            return self.receipt
        if self._writer is None:
            raise StorageClosedError("the part writer was closed without committing")
        text = self._writer.finish()
        self._writer = None
        self.receipt = Receipt(text)
        return self.receipt

    def discard(self) -> None:
        """Closes the writer without committing (the part's files stay until :func:`abort` or
        :func:`gc`)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()

    def __repr__(self) -> str:
        return (f"PartWriter({self.root!r}, {self.job!r}, {self.partition}, {self.attempt}, "
                f"dtype={self.dtype.str!r})")


def commit_parts(root: str | os.PathLike[str], receipts: Iterable[Receipt | str], mode: str = "error") -> None:
    """Publishes the parts of ``receipts`` in ``root`` with one atomic manifest write.

    Args:
        root: The storage directory (a local path or an object-store URL; on a store the
            manifest is put on the condition that it is still the one read: of two committers
            one wins, the other gets :class:`ConcurrentCommitError`).
        receipts: :class:`Receipt` objects (or their JSON texts), all of one job, in any order;
            of several receipts of one partition the lowest attempt is kept.
        mode: ``"error"`` (default: refuse a root that already holds a storage), ``"append"``
            (after the storage's shards; kind, dtype and format must agree) or ``"overwrite"``
            (replace its shards).

    Raises:
        PartMismatchError: Parts (or a part and the storage) disagree on kind, dtype or format.
        PartFileError: A file a receipt names is missing or short (``path`` names it).
        ReceiptError: A malformed receipt, receipts of several jobs.
        StorageExistsError: ``mode="error"`` and ``root`` holds a storage.
        ConcurrentCommitError: Another commit replaced the manifest meanwhile (nothing committed).
        StorageLockedError: A writer has ``root`` open.
        ConfigError: An unknown mode.
    """
    if mode not in MODES:
        raise ConfigError(f"mode is one of {MODES}, not {mode!r}", field="mode")
    texts = [r.to_json() if isinstance(r, Receipt) else str(r) for r in receipts]
    _rs.commit_parts(os.fspath(root), texts, mode)


def abort(root: str | os.PathLike[str], job: str) -> None:
    """Removes the parts of ``job`` under ``root`` that no committed manifest references (all of
    them when the job was never committed); what a commit published stays readable. ``root``
    is a local path or an object-store URL.

    Raises:
        ReceiptError: An unsafe job name.
    """
    _rs.abort_parts(os.fspath(root), job)


def gc(root: str | os.PathLike[str], apply: bool = False) -> list[str]:
    """The part directories under ``root/_parts`` that the committed manifest does not reference
    (failed attempts, speculative duplicates, crashed or aborted jobs), as paths relative to
    ``root``, sorted; deleted when ``apply``. ``root`` is a local path or an object-store URL.
    Run it only when no job is writing parts.
    """
    out: list[str] = _rs.gc_parts(os.fspath(root), bool(apply))
    return out
