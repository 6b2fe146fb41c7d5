"""Object-array mapping (OAMap) in Python: nested records as named numpy arrays, read lazily.

The walkthrough of OAMap's README runs as written here::

    >>> from guideloom import oamap
    >>> stars = oamap.open("planets.npz")          # doctest: +SKIP
    >>> stars[0].planets[0].name                   # doctest: +SKIP
    'Kepler-1239 b'

- :func:`open` reads an OAMap ``.npz`` (the schema in its member ``object``) or a directory of
  ``.npy`` arrays described by its ``dataset.json``; :class:`Dataset` (``fromjson``,
  ``fromjsonfile``) and :class:`Schema` bind a schema to **any mapping-like array source**: an
  object whose ``__getitem__(name)`` returns a numpy array (or anything ``numpy.asarray``
  accepts) and raises ``KeyError`` for a missing one. The source is asked for each array once,
  when a proxy first touches it; the arrays are cached per partition and :func:`loaded` (or a
  list proxy's ``loaded()``) names those fetched so far.
- Values: a list is a list-like proxy (``len``, indexing with negative indices, slices, a
  sequence of indices, iteration; ``repr`` like ``[<Star at index 0>, ...]``), a record a proxy
  with its fields as attributes and ``.fields``, a tuple a Python ``tuple``, a null ``None``, a
  ``UTF8String`` a ``str``, a ``ByteString`` ``bytes``, an ``S<n>`` value ``bytes`` without its
  NUL padding (as numpy gives it); a ``float32`` comes back as the Python ``float`` with the same
  shortest decimal form (``293.12738``). Unions and pointers are resolved.
- Checks: the Rust reader (``guideloom-oamap``) checks every array a Python source returns (one
  dimension, a dtype OAMap stores, at most ``max_bytes`` in a partition) and every structural
  value and index before use; a damaged or hostile source gives an
  :class:`~guideloom.errors.OamapArrayError` (or ``OamapMissingArrayError``) naming the array,
  and a Python exception the source raises comes back chained as ``__cause__``. The Rust reader
  decodes each array into its own memory once, on first touch (one copy, in any byte order or
  stride); the numpy arrays stay the source's own objects (:func:`arrays`), and those are what
  :func:`to_awkward` shares.
- :func:`fromdata` writes nested Python values as named arrays (a dict, or an ``.npz`` that
  :func:`open` reads back), :meth:`Schema.with_field` extends a schema with a field whose arrays
  come from elsewhere while the others are shared.
- :func:`to_awkward` / :func:`from_awkward` convert to and from Awkward Array (OAMap's successor)
  sharing the buffers where the layouts agree; compiled scans run with ``@numba.njit`` over the
  Awkward view (Awkward's Numba extension: records, lists, options ``is None``; a scan returns
  indices, e.g. a list of ints, and ``stars[indices]`` gives the proxies back; the seed's
  ``period_ratio`` body compiles as written).
"""

from __future__ import annotations

import builtins
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from guideloom._guideloom import (
    _ListProxy,
    _oamap_from_data,
    _oamap_open_npz,
    _RecordProxy,
    _Schema,
)
from guideloom.errors import OamapSchemaError

__all__ = [
    "Dataset",
    "ListProxy",
    "PartitionedList",
    "RecordProxy",
    "Schema",
    "arrays",
    "from_awkward",
    "fromdata",
    "infer_schema",
    "loaded",
    "open",
    "schema_of",
    "to_awkward",
    "tolist",
    "DEFAULT_MAX_BYTES",
]

ListProxy = _ListProxy
RecordProxy = _RecordProxy

#: The most bytes the arrays of one partition may take from a Python source (4 GiB), unless a
#: binding call gives ``max_bytes``.
DEFAULT_MAX_BYTES: int = 1 << 32


class Schema:
    """An OAMap schema: the node tree and the array-naming convention (``prefix``, ``delimiter``).

    Calling it with an array source (``schema(source)``) gives the root value read through it.
    """

    def __init__(self, raw: _Schema) -> None:
        self._raw = raw

    @classmethod
    def fromjson(cls, schema: Any, prefix: str = "object", delimiter: str = "-") -> Schema:
        """A schema from OAMap's schema JSON or the simple form (a JSON text or parsed JSON)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        return cls(_Schema.from_json(text, prefix, delimiter))

    @property
    def prefix(self) -> str:
        """The array-name prefix (``object``)."""
        return self._raw.prefix

    @property
    def delimiter(self) -> str:
        """The array-name delimiter (``-``)."""
        return self._raw.delimiter

    def tojson(self, explicit: bool = False) -> Any:
        """OAMap's schema JSON (parsed); with ``explicit`` every array name is written out."""
        return json.loads(self._raw.to_json(explicit))

    def array_names(self) -> list[str]:
        """Every array name the schema reads, in OAMap's generator order."""
        return self._raw.array_names()

    def show(self) -> str:
        """The schema JSON, indented (also printed)."""
        text = json.dumps(self.tojson(), indent=2)
        print(text)
        return text

    def __call__(self, source: Any, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
        """The root value read lazily through ``source`` (a mapping of array names)."""
        return self._raw.bind(source, max_bytes)

    def __repr__(self) -> str:
        return f"Schema({self._raw.to_json(False)})"

    def with_field(self, name: str, node: Any, at: Sequence[str] = ()) -> Schema:
        """This schema with field ``name`` (a schema node: OAMap JSON or the simple form, e.g.
        ``{"type": "primitive", "dtype": "int64", "data": "id-array"}``) added to the record
        reached from the root through lists and the record fields ``at``. Every other array
        keeps its name, so a source that serves the new field's arrays and falls back to the
        old source shares all the other arrays."""
        doc = self.tojson(explicit=True)
        record = _record_at(doc, list(at))
        fields = record["fields"]
        new = [[name, node]]
        if isinstance(fields, dict):
            fields[name] = node
        else:
            record["fields"] = [f for f in fields if f[0] != name] + new
        return Schema.fromjson(doc, self.prefix, self.delimiter)

    def fromdata(self, obj: Any) -> Any:
        """``obj`` written as this schema's arrays, read back as proxies (OAMap's
        ``schema.fromdata``); :func:`arrays` of the result gives the arrays."""
        return self(fromdata(obj, self))


def _record_at(doc: Any, at: list[str]) -> Any:
    node = doc
    while True:
        if isinstance(node, dict) and node.get("type") == "list":
            node = node["content"]
            continue
        if not at:
            break
        if not (isinstance(node, dict) and node.get("type") == "record"):
            raise ValueError(f"no record field {at[0]!r} to descend into")
        fields = node["fields"]
        items = fields.items() if isinstance(fields, dict) else fields
        node = dict((k, v) for k, v in items)[at.pop(0)]
    if not (isinstance(node, dict) and node.get("type") == "record"):
        raise ValueError("the schema has no record there to add a field to")
    return node


class PartitionedList(Sequence[Any]):
    """The top-level list of a partitioned dataset: entry ``k`` lives in partition
    ``searchsorted(offsets, k, side="right") - 1``; ``partitions`` are the per-partition lists
    (each a list proxy with its own array cache)."""

    def __init__(self, partitions: list[Any], offsets: list[int]) -> None:
        self.partitions = partitions
        self.offsets = offsets

    def __len__(self) -> int:
        return self.offsets[-1]

    def _locate(self, k: int) -> tuple[int, int]:
        n = len(self)
        k = k + n if k < 0 else k
        if not 0 <= k < n:
            raise IndexError("list index out of range")
        p = int(np.searchsorted(self.offsets, k, side="right")) - 1
        return p, k - self.offsets[p]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return [self[k] for k in range(*key.indices(len(self)))]
        p, k = self._locate(int(key))
        return self.partitions[p][k]

    def __iter__(self) -> Any:
        for part in self.partitions:
            yield from part

    def loaded(self) -> list[str]:
        """The arrays loaded so far, over all partitions (each name once, first partition first)."""
        out: list[str] = []
        for part in self.partitions:
            out.extend(n for n in part.loaded() if n not in out)
        return out

    def __repr__(self) -> str:
        n = len(self)
        if n > 10:
            head = ", ".join(repr(self[k]) for k in range(5))
            tail = ", ".join(repr(self[k]) for k in range(n - 5, n))
            return f"[{head}, ..., {tail}]"
        return "[" + ", ".join(repr(x) for x in self) + "]"


class Dataset:
    """A dataset description (OAMap's ``dataset.json``): the schema, the naming convention, the
    metadata and, for a partitioned dataset, the partition ``offsets``.

    Both stored forms are read: OAMap 0.10's ``{"schema", "prefix", "delimiter", "metadata"}``
    (one partition) and OAMap 0.12's ``{"schema", "offsets", ...}`` (partitions).
    """

    def __init__(self, description: Mapping[str, Any]) -> None:
        self.description = dict(description)
        self.prefix: str = self.description.get("prefix", "object")
        self.delimiter: str = self.description.get("delimiter", "-")
        self.metadata: Any = self.description.get("metadata")
        self.offsets: list[int] | None = self.description.get("offsets")
        if "schema" not in self.description:
            raise ValueError('a dataset description needs "schema"')
        self.schema = Schema.fromjson(self.description["schema"], self.prefix, self.delimiter)

    @classmethod
    def fromjson(cls, text: str | bytes) -> Dataset:
        """A dataset from its JSON text."""
        return cls(json.loads(text))

    @classmethod
    def fromjsonfile(cls, file: IO[str] | IO[bytes] | str | os.PathLike[str]) -> Dataset:
        """A dataset from a JSON file (an open text or binary file, or a path)."""
        if isinstance(file, (str, os.PathLike)):
            return cls.fromjson(Path(file).read_bytes())
        return cls.fromjson(file.read())

    def __call__(self, source: Any, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
        """The top-level value read lazily: ``source`` is one mapping, or for a partitioned
        dataset a list of mappings, one per partition."""
        if self.offsets is None:
            return self.schema(source, max_bytes=max_bytes)
        sources = list(source) if isinstance(source, (list, tuple)) else [source]
        if len(sources) != len(self.offsets) - 1:
            raise OamapSchemaError(f"{len(sources)} partition sources for "
                                   f"{len(self.offsets) - 1} partitions")
        _, parts = _Schema.bind_partitions(json.dumps(self.description), self.prefix, sources,
                                           max_bytes)
        return PartitionedList(parts, list(self.offsets))

    def show(self) -> str:
        """The description's JSON, indented (also printed)."""
        text = json.dumps(self.description, indent=2)
        print(text)
        return text


def open(path: str | os.PathLike[str]) -> Any:  # noqa: A001 - the seed's name
    """Opens an OAMap ``.npz`` file (the schema stored as member ``object``) or a directory of
    ``<array name>.npy`` files with its description in ``dataset.json``; nothing but the
    description is read until a proxy touches an array."""
    p = Path(path)
    if p.is_dir():
        dataset = Dataset.fromjsonfile(p / "dataset.json")
        if dataset.offsets is not None:
            raise ValueError("a directory of .npy files holds one partition (no \"offsets\")")
        return dataset.schema._raw.bind_npy_dir(p)
    _, value = _oamap_open_npz(p)
    return value


def schema_of(value: Any) -> Schema:
    """The schema behind a list or record proxy (OAMap's ``stars.schema``)."""
    if isinstance(value, PartitionedList):
        value = value.partitions[0]
    return Schema(value._schema)


def loaded(value: Any) -> list[str]:
    """The names of the arrays fetched so far by the partition(s) behind ``value`` (a list or
    record proxy, or a partitioned list), in OAMap's generator order."""
    if isinstance(value, PartitionedList):
        return value.loaded()
    return list(value._loaded())


def arrays(value: Any) -> dict[str, np.ndarray]:
    """The arrays fetched so far behind ``value`` (a list or record proxy), by name: the numpy
    arrays a Python source gave (the same objects), copies of those an ``.npz`` or ``.npy``
    file gave."""
    return {name: value._array(name) for name in loaded(value)}


def tolist(value: Any) -> Any:
    """``value`` as plain Python (the golden files' JSON conventions): lists and tuples as lists,
    records as dicts of their fields; reads everything below it."""
    if isinstance(value, (_ListProxy, PartitionedList, tuple, list)):
        return [tolist(x) for x in value]
    if isinstance(value, _RecordProxy):
        return {f: tolist(getattr(value, f)) for f in value.fields}
    return value


# ---------------------------------------------------------------------------------------------
# Writing: nested Python values -> named arrays


def _infer(values: Iterable[Any]) -> Any:
    """The simple-form schema node of a collection of Python values (None makes it nullable)."""
    vals = list(values)
    nullable = any(v is None for v in vals)
    vals = [v for v in vals if v is not None]
    node: dict[str, Any]
    if not vals:
        node = {"type": "primitive", "dtype": "float64"}
    elif all(isinstance(v, bool) for v in vals):
        node = {"type": "primitive", "dtype": "bool"}
    elif all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        node = {"type": "primitive", "dtype": "int64"}
    elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        node = {"type": "primitive", "dtype": "float64"}
    elif all(isinstance(v, str) for v in vals):
        node = {"type": "list", "name": "UTF8String", "content": {"type": "primitive", "dtype": "uint8"}}
    elif all(isinstance(v, bytes) for v in vals):
        node = {"type": "list", "name": "ByteString", "content": {"type": "primitive", "dtype": "uint8"}}
    elif all(isinstance(v, Mapping) for v in vals):
        keys = sorted({k for v in vals for k in v})
        node = {"type": "record",
                "fields": {k: _infer(v.get(k) for v in vals) for k in keys}}
    elif all(isinstance(v, tuple) for v in vals) and len({len(v) for v in vals}) == 1:
        node = {"type": "tuple", "types": [_infer(v[i] for v in vals) for i in range(len(vals[0]))]}
    elif all(isinstance(v, (list, tuple, np.ndarray)) for v in vals):
        node = {"type": "list", "content": _infer(x for v in vals for x in v)}
    else:
        kinds = sorted({type(v).__name__ for v in vals})
        raise TypeError(f"cannot infer one schema for values of types {kinds}; give schema=")
    if nullable:
        node["nullable"] = True
    return node


def infer_schema(obj: Any) -> Any:
    """The simple-form schema :func:`fromdata` infers for ``obj``: ``bool``, ``int64``,
    ``float64`` (ints and floats mixed), ``UTF8String`` for ``str``, ``ByteString`` for
    ``bytes``, records for dicts (the union of their keys), tuples, lists of the common type of
    their items; ``None`` makes a node nullable."""
    return _infer([obj])


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, bytes):
        return list(obj)
    if isinstance(obj, complex):
        return [obj.real, obj.imag]
    return obj


def fromdata(obj: Any, schema: Schema | Any = None,
             path: str | os.PathLike[str] | None = None) -> dict[str, np.ndarray]:
    """The named arrays of ``obj`` (nested lists, dicts, tuples, numbers, strings, bytes, None)
    under ``schema`` (a :class:`Schema`, schema JSON, or ``None`` to infer one: a list of the
    values' common type, ``None`` making a node nullable), as the Rust writer builds them (the
    compact form OAMap writes). With ``path``, also written as an ``.npz`` whose member
    ``object`` stores the schema, so :func:`open` reads it back."""
    if schema is None:
        schema = Schema.fromjson(infer_schema(obj))
    elif not isinstance(schema, Schema):
        schema = Schema.fromjson(schema)
    out = dict(_oamap_from_data(schema._raw, json.dumps(_jsonable(obj))))
    if path is not None:
        doc = {"schema": schema.tojson(), "prefix": schema.prefix, "delimiter": schema.delimiter}
        meta = np.frombuffer(json.dumps(doc).encode(), dtype=np.uint8)
        members: dict[str, Any] = {**out, schema.prefix: meta}
        with builtins.open(path, "wb") as f:
            np.savez(f, **members)
    return out


from guideloom._oamap_awkward import from_awkward, to_awkward  # noqa: E402
