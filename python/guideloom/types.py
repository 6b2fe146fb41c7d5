"""The format protocols of guideloom's storages (the seed's ``guideloom.types``).

Implement the protocol matching the storage layout and pass an instance as ``storage_format`` to
:class:`~guideloom.StreamStorage`, :class:`~guideloom.DocumentStorage` or
:class:`~guideloom.StreamWithMetaStorage`. Input and output types can differ: a record appended
during preprocessing need not have the shape of a window read during training.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence
from typing import Any, Protocol, TypeVar, Union

import numpy as np

__all__ = [
    "Vector",
    "UserBufferTypes",
    "StorageBufferTypes",
    "StreamStorageFormat",
    "StreamWithMetaStorageFormat",
    "DocumentStorageFormat",
    "StorageFormat",
]

InDataT = TypeVar("InDataT", contravariant=True)
OutDataT = TypeVar("OutDataT", covariant=True)
StreamDType = TypeVar("StreamDType", bound=np.generic)

#: A one-dimensional numpy array of the given scalar type.
Vector = np.ndarray[tuple[int], np.dtype[StreamDType]]
#: What a format's ``pack`` may hand to a storage: ``bytes`` or ``memoryview``.
UserBufferTypes = Union[bytes, memoryview]
#: What a storage hands to a format's ``unpack``.
StorageBufferTypes = Union[bytes, memoryview]


class StreamStorageFormat(Protocol[InDataT, OutDataT, StreamDType]):
    """A stream format: ``stream_dtype``, ``pack`` and ``unpack`` define a fixed-size stream
    element and its decoded window."""

    stream_dtype: np.dtype[StreamDType]

    def __init__(self, stream_dtype: np.dtype[StreamDType]) -> None:
        """Create the storage format.

        Example:
            ``StreamStorageFormat(stream_dtype=np.dtype(np.int64))``

        Args:
            stream_dtype: the numpy.dtype of the stream data.
        """

    def pack(self, data: InDataT) -> Vector[StreamDType]:
        """Pack the data for the database to store.

        Example:
            ``return data['tokens']``

        Args:
            data: user provided data structure.

        Returns:
            Vector[StreamDType]: The stream data, should be a 1d numpy vector. A structured
            dtype can be used to store more complex data, such as multiple columns.
        """
        ...

    def unpack(
        self, stream: Vector[StreamDType], shard_lengths: Vector[np.int64], shards: Vector[np.int64]
    ) -> OutDataT:
        """Decode a window from concatenated stream segments.

        ``stream`` is the concatenation of the arrays returned by ``pack`` for this read.
        Segment ``i`` is ``shard_lengths[i]`` elements long and comes from ``shards[i]``. The
        segments are in order, so ``stream[:shard_lengths[0]]`` comes from ``shards[0]`` when
        the window is non-empty.

        Example::

            shard_ids = np.concat([
                np.full((length,), shard, dtype=np.int64)
                for length, shard in zip(shard_lengths.tolist(), shards.tolist(), strict=True)
            ])
            return {"tokens": stream, "shard": shard_ids}

        Args:
            stream: Concatenated stream elements for this read.
            shard_lengths: Length of each contiguous shard segment, in read order.
            shards: Shard id of each segment, parallel to ``shard_lengths``.

        Returns:
            OutDataT: Decoded window.
        """
        ...


class StreamWithMetaStorageFormat(Protocol[InDataT, OutDataT, StreamDType]):
    """A stream-with-meta format: ``size`` counts stream elements; ``pack`` yields metadata
    pairs and returns the stream array; ``unpack`` aligns metadata with the read window."""

    stream_dtype: np.dtype[StreamDType]

    def __init__(self, stream_dtype: np.dtype[StreamDType]) -> None:
        """Create the storage format.

        Example:
            ``StreamWithMetaStorageFormat(stream_dtype=np.dtype(np.int64))``

        Args:
            stream_dtype: the numpy.dtype of the stream data.
        """

    def size(self, data: InDataT) -> int:
        """Return the number of stream elements in data. ``pack`` must yield this many pairs.

        Args:
            data: Record passed to ``pack``.

        Returns:
            int: Number of stream elements.
        """
        ...

    def pack(
        self, data: InDataT
    ) -> Generator[tuple[Hashable, UserBufferTypes | None], None, Vector[StreamDType]]:
        """Encode one record as one metadata pair per stream element and a stream array.

        Yield exactly ``size(data)`` pairs, then return a one-dimensional array with dtype
        ``stream_dtype`` and that same length. Return the array from the generator. Do not yield
        it. A structured dtype can store several columns in that array.

        A key may repeat only inside a contiguous run: ``[0, 0, 1, 1]`` is valid and
        ``[0, 1, 0]`` is not. The first pair in a run must include a ``bytes`` or
        ``memoryview`` payload. Later pairs in that run may pass ``None`` instead of repeating
        the payload. Keys are compared only within this call and are not stored. Encode
        document and chunk ids in the payload when readers need them. A key can be any
        hashable object.

        Example::

            for chunk_id in data["chunk_ids"]:
                payload = data["concepts"][int(chunk_id)].tobytes()
                yield ((data["document_id"], int(chunk_id)), payload)
            return np.asarray(data["tokens"], dtype=self.stream_dtype)

        ``data["chunk_ids"]`` has one id per stream element, in stream order.

        Args:
            data: User-provided record.

        Yields:
            tuple[Hashable, bytes | memoryview | None]: Key and payload for one stream element.

        Returns:
            Vector[StreamDType]: Stream array of length ``size(data)``.
        """
        ...

    def unpack(
        self,
        stream_data: Vector[StreamDType],
        document_shard: Vector[np.int64],
        document_index: Vector[np.int32],
        document_data: Sequence[StorageBufferTypes],
    ) -> OutDataT:
        """Decode a window into stream elements and the metadata payloads they reference.

        ``document_index`` has one entry per stream element and indexes ``document_data``.
        ``document_shard[i]`` is the shard that stored ``document_data[i]``. Both are remapped
        for this read. They are not original chunk ids. Decode ids from the payload itself when
        you need provenance. The shard of the element at ``token_idx`` is
        ``document_shard[document_index[token_idx]]``. Each payload still belongs to a single
        shard: one append call writes its metadata into the shard it was given, while a read
        can span several shards.

        Example::

            return {
                "tokens": stream_data,
                "annotation_index": document_index,
                "annotations": [np.frombuffer(payload, dtype=np.int32) for payload in document_data],
            }

        Args:
            stream_data: Concatenated stream array for this read. It may span several records,
                so it is not aligned with one ``pack`` call.
            document_shard: Shard of each payload in ``document_data``.
            document_index: Index into ``document_data`` for each stream element.
                ``document_index.shape == stream_data.shape``. The payload for element
                ``token_idx`` is ``document_data[document_index[token_idx]]``.
            document_data: Payloads for the distinct metadata objects referenced by this read.
                Decode them in ``unpack``.

        Returns:
            OutDataT: Decoded window.
        """
        ...


class DocumentStorageFormat(Protocol[InDataT, OutDataT]):
    """A document format: ``pack`` serializes a document; ``unpack`` decodes its bytes."""

    def pack(self, data: InDataT) -> UserBufferTypes:
        """Encode one document for storage.

        Built-in document storage accepts bytes or memoryview from this method.

        Example:
            ``return pickle.dumps(data)``

        Args:
            data: User-provided document.

        Returns:
            UserBufferTypes: Encoded document. Built-in storage accepts bytes or memoryview.
        """
        ...

    def unpack(self, encoded_data: StorageBufferTypes, shard: int) -> OutDataT:
        """Decode one document.

        Storage does not keep a document index. Encode one in ``pack`` when you need it.
        Together with ``shard``, that identifies the shard and the document within that shard.

        Example:
            ``return pickle.loads(encoded_data)``

        Args:
            encoded_data: Bytes produced by ``pack``.
            shard: Shard the document was read from.

        Returns:
            OutDataT: Decoded document.
        """
        ...


#: The union of the three format interfaces, ``StorageFormat[InT, OutT]``.
StorageFormat = Union[
    StreamStorageFormat[InDataT, OutDataT, Any],
    StreamWithMetaStorageFormat[InDataT, OutDataT, Any],
    DocumentStorageFormat[InDataT, OutDataT],
]
