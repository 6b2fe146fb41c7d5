"""guideloom's built-in storage formats.

========================  ==================  =================================================
Format                    Use with            Encoding
========================  ==================  =================================================
``StreamNumpyFormat``     ``StreamStorage``   A mapping of equal-length, one-dimensional arrays,
                                              stored as fields of a structured NumPy dtype.
``DocumentPickleFormat``  ``DocumentStorage`` One pickled Python object per document.
========================  ==================  =================================================

Both are also importable from :mod:`guideloom`.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import numpy as np

from .errors import FormatError
from .types import StorageBufferTypes, Vector

__all__ = ["StreamNumpyFormat", "DocumentPickleFormat"]

DataT = TypeVar("DataT", bound=Mapping[str, Any])
DocumentT = TypeVar("DocumentT")
DType = TypeVar("DType", bound=np.generic)


class StreamNumpyFormat(Generic[DataT, DType]):
    """Pack a mapping of equal-length arrays into one structured stream array.

    ``unpack`` returns those fields and ignores shard segmentation. The dtype is part of the
    schema: reopen the storage with the same format (the storage checks the dtype). Readers
    decode it without a Python call per window: a window is one structured array over the
    bytes Rust read, and its fields are views.
    """

    def __init__(self, stream_dtype: np.dtype[DType], data_type: type[DataT] | None = None) -> None:
        """Create a format for a structured dtype.

        Args:
            stream_dtype: Structured dtype. Its field names are the mapping keys.
            data_type: Mapping type used only to set the ``DataT`` type parameter. Ignored at
                runtime. Defaults to None.

        Raises:
            ValueError: If ``stream_dtype`` is not a structured dtype.
        """
        dtype = np.dtype(stream_dtype)
        if dtype.names is None:
            raise ValueError(f"StreamNumpyFormat needs a structured dtype, got {dtype}")
        self.stream_dtype: np.dtype[DType] = dtype

    def pack(self, data: DataT) -> Vector[DType]:
        """Stack mapping fields into one structured array.

        Every field named by ``stream_dtype`` must be a one-dimensional array of the same
        length.

        Args:
            data: Mapping from field name to array.

        Returns:
            Vector[DType]: Structured array with ``stream_dtype``.

        Raises:
            guideloom.errors.FormatError: naming the field that is missing, not
                one-dimensional or of another length (a ``ValueError``).
        """
        names = self.stream_dtype.names or ()
        length: int | None = None
        first = ""
        columns = {}
        for name in names:
            if name not in data:
                raise FormatError(f"missing field {name!r} (the dtype has fields {list(names)})", field=name)
            column = np.asarray(data[name])
            if column.ndim != 1:
                raise FormatError(f"field {name!r} has {column.ndim} dimensions, expected 1", field=name)
            if length is None:
                length, first = len(column), name
            elif len(column) != length:
                raise FormatError(
                    f"field {name!r} has {len(column)} values but field {first!r} has {length}", field=name
                )
            columns[name] = column
        out = np.empty(length or 0, dtype=self.stream_dtype)
        for name, column in columns.items():
            try:
                out[name] = column
            except (TypeError, ValueError) as e:
                raise FormatError(f"field {name!r}: {e}", field=name) from e
        return out

    def unpack(self, stream: Vector[DType], shard_lengths: Vector[np.int64], shards: Vector[np.int64]) -> DataT:
        """Return each structured field as a mapping entry.

        Args:
            stream: Structured array read from storage.
            shard_lengths: Length of each shard segment. Ignored.
            shards: Shard id of each segment. Ignored.

        Returns:
            DataT: Mapping from field name to that field's array (views of ``stream``).
        """
        fields: Any = stream
        return {name: fields[name] for name in self.stream_dtype.names or ()}  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"StreamNumpyFormat({self.stream_dtype!r})"


class DocumentPickleFormat(Generic[DocumentT]):
    """Pickle each document with ``pickle.dumps`` and ``pickle.loads``.

    ``unpack`` ignores ``shard``.

    .. warning::
       Use it for trusted data only: unpickling can execute arbitrary code. For numeric
       workloads, a custom binary format avoids Python object reconstruction.
    """

    def pack(self, data: DocumentT) -> bytes:
        """Pickle a document.

        Args:
            data: Document to store.

        Returns:
            bytes: Pickled document.
        """
        return pickle.dumps(data)

    def unpack(self, encoded_data: StorageBufferTypes, shard: int) -> DocumentT:
        """Unpickle a document.

        Args:
            encoded_data: Bytes produced by ``pack``.
            shard: Shard the document was read from. Ignored.

        Returns:
            DocumentT: Unpickled document.
        """
        return pickle.loads(encoded_data)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return "DocumentPickleFormat()"
