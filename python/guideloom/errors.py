"""guideloom's exceptions: one class per error family of the Rust crates.

Every class derives from :class:`GuideloomError` and, where one fits, from the matching builtin
(``FileNotFoundError``, ``ValueError``, ``OSError``, ``IndexError``), so ``except ValueError``
keeps working. The context of the error (``path``, ``shard``, ``index``, ``field``, ``element``,
``offset``, ``length``, ``total``, ``url``, ``expected``, ``found``, where known) is given as
attributes (``None`` when not known) and in :attr:`GuideloomError.context`. Exceptions pickle
across processes with their context.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GuideloomError",
    "StorageError",
    "StorageNotFoundError",
    "StorageExistsError",
    "StorageMismatchError",
    "StorageLockedError",
    "StorageClosedError",
    "CorruptStorageError",
    "ForeignLayoutError",
    "RemoteError",
    "ConcurrentCommitError",
    "PartError",
    "ReceiptError",
    "PartMismatchError",
    "PartFileError",
    "FormatError",
    "LoaderError",
    "ConfigError",
    "StateError",
    "OutOfRangeError",
    "OamapError",
    "OamapSchemaError",
    "OamapArrayError",
    "OamapMissingArrayError",
    "OamapLimitError",
]

_CONTEXT = ("path", "shard", "index", "field", "element", "offset", "length", "total", "url",
            "expected", "found", "batch", "epoch", "array", "partition")


class GuideloomError(Exception):
    """Root of guideloom's exceptions. ``str(e)`` is the whole chain of the Rust error."""

    path: str | None
    shard: int | None
    index: int | None
    field: str | None
    element: int | None

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.context: dict[str, Any] = dict(context)
        for name in _CONTEXT:
            setattr(self, name, context.get(name))
        for name, value in context.items():
            setattr(self, name, value)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), str(self), self.context))


def _rebuild(cls: type[GuideloomError], message: str, context: dict[str, Any]) -> GuideloomError:
    return cls(message, **context)


class StorageError(GuideloomError, OSError):
    """A storage could not be opened, read or written (guideloom-storage's ``StorageError``)."""


class StorageNotFoundError(StorageError, FileNotFoundError):
    """No storage (no ``manifest.json``) or no file where one was expected."""


class StorageExistsError(StorageError, FileExistsError):
    """``mode="w"`` where a storage is already committed."""


class StorageMismatchError(StorageError, ValueError):
    """The storage holds another kind or dtype than the format asks for."""


class StorageLockedError(StorageError):
    """Another writer has the storage open."""


class StorageClosedError(StorageError, ValueError):
    """The writer or reader is closed."""


class CorruptStorageError(StorageError):
    """A damaged storage: invalid manifest, missing or short shard, corrupt index, checksum."""


class ForeignLayoutError(StorageError, ValueError):
    """A dataset in another project's layout (Megatron, nanoGPT, MDS, ...) is not valid."""


class RemoteError(StorageError):
    """An object-store request failed."""


class ConcurrentCommitError(StorageError):
    """Another writer or committer replaced the manifest since it was read: this commit was
    refused and the other one stands (``path`` names the manifest)."""


class PartError(StorageError):
    """A part of a job (:mod:`guideloom.parts`) could not be written or committed; ``partition``
    names it where known."""


class ReceiptError(PartError, ValueError):
    """A malformed receipt (bad JSON, another version, a shard path outside its part, receipts of
    several jobs) or an unsafe job name."""


class PartMismatchError(PartError, StorageMismatchError):
    """A part disagrees with the others (or with the storage it is appended to) on its kind,
    dtype or format: ``field`` names which, ``expected`` and ``found`` give both values."""


class PartFileError(PartError, CorruptStorageError):
    """A file a receipt names is missing (``found`` is ``None``) or shorter than committed
    (``expected`` and ``found`` in bytes); ``path`` names it."""


class FormatError(GuideloomError, ValueError):
    """A record does not fit its format, or stored bytes do not decode (guideloom-formats)."""


class LoaderError(GuideloomError):
    """A loader or data source failed (guideloom-loader's ``LoaderError``)."""


class ConfigError(LoaderError, ValueError):
    """An invalid option (batch size, seq_len, seed, shard, dtype, ...)."""


class StateError(LoaderError, ValueError):
    """A loader state that does not parse, has another version, or belongs to other data."""


class OutOfRangeError(GuideloomError, IndexError):
    """An index, offset or length past the end."""


class OamapError(GuideloomError, ValueError):
    """An object-array mapping (``guideloom.oamap``) error; ``array`` names the array concerned
    where there is one, ``partition`` the partition."""


class OamapSchemaError(OamapError):
    """A schema, dataset description or value that does not fit OAMap (or Awkward's) model."""


class OamapArrayError(OamapError):
    """An array that cannot be used: wrong dtype or dimensions, too short, a structural value out
    of range (negative start, stop before start, tag or position past the end), bad UTF-8, or a
    source that raised (the source's exception is the ``__cause__``)."""


class OamapMissingArrayError(OamapError, KeyError):
    """The array source has no array of that name (it raised ``KeyError``)."""


class OamapLimitError(OamapError):
    """An OAMap limit was reached (bytes taken from a source, JSON depth); ``total`` is what it
    would have been, ``length`` the limit."""
