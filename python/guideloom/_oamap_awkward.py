"""OAMap <-> Awkward Array: :func:`to_awkward` and :func:`from_awkward` (``guideloom.oamap``).

The layouts map one to one, so most buffers are shared, not copied:

==========================  =====================================  =======================
OAMap                       Awkward                                buffers
==========================  =====================================  =======================
list ``-B``/``-E``          ``ListArray(starts, stops, content)``  shared
nullable ``-M``             ``IndexedOptionArray(mask, content)``  shared
union ``-T``/``-O``         ``UnionArray(tags, index, contents)``  shared
pointer ``-P``              ``IndexedArray(positions, target)``    shared
record / tuple              ``RecordArray``                        (no buffer)
primitive ``-D``            ``NumpyArray``                         shared
``UTF8String``/``ByteString``  ``ListArray`` of ``uint8`` (string)     shared
``S<n>`` primitive          ``RegularArray`` of ``uint8`` (size n)  shared (a view)
==========================  =====================================  =======================

Conversions (copies): a structural array of another integer type than ``int32``/``int64``
(``uint32`` for starts/stops) is converted to ``int64``, a big-endian array to native order
(one pass over that array each). Not representable in Awkward: a pointer that leads back to
its own ancestor (OAMap's trees and graphs: Awkward arrays are trees of buffers without
cycles) and a record with no fields; :func:`to_awkward` raises ``OamapSchemaError`` for them.

:func:`to_awkward` then checks the whole array with ``ak.validity_error`` (and that masks hold
only ``-1`` or indices), so damaged arrays are refused before compiled code can index with them.

The other way, :func:`from_awkward` shares the buffers of ``ListArray``, ``IndexedOptionArray``
(``int32``/``int64``), ``UnionArray``, ``IndexedArray``, ``NumpyArray`` and the offsets of a
``ListOffsetArray`` (``starts = offsets[:-1]``, ``stops = offsets[1:]``, views); it computes
``RegularArray`` starts/stops and converts bit/byte masks to mask-offset indices.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from guideloom._guideloom import _RecordProxy
from guideloom.errors import OamapArrayError, OamapSchemaError

_STRINGS = {"UTF8String": ("string", "char"), "ByteString": ("bytestring", "byte")}


def _ak() -> Any:
    try:
        import awkward as ak  # type: ignore[import-untyped]
    except ImportError as e:  # pragma: no cover - awkward is installed by setup-venv.sh
        raise ImportError("to_awkward/from_awkward need the awkward package") from e
    return ak


class _Builder:
    def __init__(self, value: Any, schema_json: Any) -> None:
        self.ak = _ak()
        self.value = value
        self.labels: dict[str, Any] = {}
        self.built: dict[str, Any] = {}
        self.building: set[str] = set()
        self._collect(schema_json)

    def _collect(self, n: Any) -> None:
        if not isinstance(n, dict):
            return
        if "label" in n:
            self.labels[n["label"]] = n
        for key in ("content", "target"):
            if key in n:
                self._collect(n[key])
        for key in ("possibilities", "types"):
            for c in n.get(key, []):
                self._collect(c)
        if n.get("type") == "record":
            for _, c in n["fields"]:
                self._collect(c)

    def array(self, name: str) -> np.ndarray:
        a: np.ndarray = self.value._array(name)
        if not a.dtype.isnative:
            a = a.astype(a.dtype.newbyteorder("="))
        return a

    def index(self, name: str, allowed: tuple[str, ...]) -> Any:
        a = self.array(name)
        if a.dtype.name not in allowed:
            a = a.astype(np.int64)
        return self.ak.index.Index(a)

    def build(self, n: Any) -> Any:
        if isinstance(n, str):
            if n in self.building:
                raise OamapSchemaError(
                    f"pointer to {n} leads back to its own ancestor: Awkward arrays have no cycles")
            if n not in self.built:
                self.building.add(n)
                self.built[n] = self.build(self.labels[n])
                self.building.discard(n)
            return self.built[n]
        label = n.get("label")
        if label is not None and label not in self.building:
            if label in self.built:
                return self.built[label]
            self.building.add(label)
            out = self._node(n)
            self.building.discard(label)
            self.built[label] = out
            return out
        return self._node(n)

    def _node(self, n: Any) -> Any:
        c = self.ak.contents
        t = n["type"]
        name = n.get("name")
        if t == "primitive":
            data = self.array(n["data"])
            if data.dtype.kind == "S":
                width = data.dtype.itemsize
                raw = data.view(np.uint8)
                inner = c.NumpyArray(raw, parameters={"__array__": "byte"})
                out = c.RegularArray(inner, width, zeros_length=len(data),
                                     parameters={"__array__": "bytestring"})
            else:
                out = c.NumpyArray(data)
        elif t == "list":
            starts = self.index(n["starts"], ("int32", "uint32", "int64"))
            stops = self.index(n["stops"], (starts.data.dtype.name,))
            content = self.build(n["content"])
            params = None
            if name in _STRINGS:
                outer, inner_name = _STRINGS[name]
                content = c.NumpyArray(content.data, parameters={"__array__": inner_name})
                params = {"__array__": outer}
            out = c.ListArray(starts, stops, content, parameters=params)
        elif t in ("record", "tuple"):
            if t == "record":
                keys = [k for k, _ in n["fields"]]
                contents = [self.build(v) for _, v in n["fields"]]
            else:
                keys = None
                contents = [self.build(v) for v in n["types"]]
            if not contents:
                raise OamapSchemaError("a record with no fields has no length in Awkward")
            params = {"__record__": name} if name else None
            out = c.RecordArray(contents, keys, parameters=params)
        elif t == "union":
            tags = self.index(n["tags"], ("int8",))
            index = self.index(n["offsets"], ("int32", "uint32", "int64"))
            contents = [self.build(v) for v in n["possibilities"]]
            try:
                out = c.UnionArray(tags, index, contents)
            except (TypeError, ValueError):
                out = c.UnionArray.simplified(tags, index, contents)
        elif t == "pointer":
            positions = self.index(n["positions"], ("int32", "uint32", "int64"))
            out = c.IndexedArray(positions, self.build(n["target"]))
        else:  # pragma: no cover - the Rust parser knows no other types
            raise OamapSchemaError(f"unknown node type {t!r}")
        if n.get("nullable"):
            mask = self.array(n["mask"])
            if mask.dtype.name not in ("int32", "int64"):
                mask = mask.astype(np.int64)
            if len(mask) and int(mask.min()) < -1:
                raise OamapArrayError(f"array {n['mask']!r}: a mask value below -1",
                                      array=n["mask"])
            index = self.ak.index.Index(mask)
            if out.is_option or out.is_indexed or out.is_union:
                # Awkward keeps options outermost: compose the mask with a pointer's positions
                # (one new index array) or move it into the union's possibilities.
                out = c.IndexedOptionArray.simplified(index, out)
            else:
                out = c.IndexedOptionArray(index, out)
        return out


def to_awkward(value: Any) -> Any:
    """An ``awkward.Array`` over the same buffers as ``value``: a top-level list proxy (from
    :func:`~guideloom.oamap.open`, a schema or dataset bound to a source), a slice of one, or a
    partitioned list (its partitions concatenated: a copy). Loads every array of the schema
    (through the same per-partition cache). See the module notes for what is shared."""
    ak = _ak()
    from guideloom.oamap import PartitionedList

    if isinstance(value, PartitionedList):
        return ak.concatenate([to_awkward(p) for p in value.partitions])
    if isinstance(value, _RecordProxy):
        schema = value._schema
        if value._node != schema._root:
            raise OamapSchemaError("to_awkward takes a top-level list or record")
        doc = json.loads(schema.to_json(True))
        record = ak.Array(_Builder(value, doc).build(doc))
        _check(ak, record)
        return record[value._index]
    schema = value._schema
    content, start, length, step = value._range
    if schema._root_content != content:
        raise OamapSchemaError("to_awkward takes a top-level list (or a slice of one)")
    doc = json.loads(schema.to_json(True))
    layout = _Builder(value, doc).build(doc["content"])
    out = ak.Array(layout)
    _check(ak, out)
    stop = start + length * step
    return out[start:(stop if stop >= 0 else None):step]


def _check(ak: Any, array: Any) -> None:
    error = ak.validity_error(array)
    if error:
        raise OamapArrayError(f"the arrays do not form a valid Awkward array: {error}")


class _Writer:
    def __init__(self) -> None:
        self.ak = _ak()

    def node(self, layout: Any) -> dict[str, Any]:
        """The simple-form schema node of ``layout``, its arrays under the key ``"@"``."""
        c = self.ak.contents
        params = layout.parameters or {}
        if isinstance(layout, (c.ByteMaskedArray, c.BitMaskedArray, c.UnmaskedArray)):
            layout = layout.to_IndexedOptionArray64()
        if isinstance(layout, c.IndexedOptionArray):
            inner = self.node(layout.content)
            if inner.get("nullable"):
                raise OamapSchemaError("an option of an option has no OAMap form")
            inner["nullable"] = True
            inner["@"]["mask"] = np.asarray(layout.index.data)
            return inner
        if isinstance(layout, c.NumpyArray):
            data = np.asarray(layout.data)
            if data.ndim != 1:
                return self.node(layout.to_RegularArray())
            return {"type": "primitive", "dtype": data.dtype.str, "@": {"data": data}}
        if isinstance(layout, c.EmptyArray):
            return {"type": "primitive", "dtype": "float64", "@": {"data": np.empty(0)}}
        if isinstance(layout, c.ListOffsetArray):
            offsets = np.asarray(layout.offsets.data)
            return self._list(layout, params, offsets[:-1], offsets[1:])
        if isinstance(layout, c.ListArray):
            return self._list(layout, params, np.asarray(layout.starts.data),
                              np.asarray(layout.stops.data))
        if isinstance(layout, c.RegularArray):
            starts = np.arange(layout.length, dtype=np.int64) * layout.size
            return self._list(layout, params, starts, starts + layout.size)
        if isinstance(layout, c.RecordArray):
            if layout.is_tuple:
                node: dict[str, Any] = {"type": "tuple",
                                        "types": [self.node(x) for x in layout.contents]}
            else:
                node = {"type": "record",
                        "fields": {k: self.node(x) for k, x in zip(layout.fields, layout.contents)}}
            if "__record__" in params:
                node["name"] = params["__record__"]
            node["@"] = {}
            return node
        if isinstance(layout, c.UnionArray):
            return {"type": "union", "possibilities": [self.node(x) for x in layout.contents],
                    "@": {"tags": np.asarray(layout.tags.data),
                          "offsets": np.asarray(layout.index.data)}}
        if isinstance(layout, c.IndexedArray):
            return {"type": "pointer", "target": self.node(layout.content),
                    "@": {"positions": np.asarray(layout.index.data)}}
        raise OamapSchemaError(f"no OAMap form for {type(layout).__name__}")

    def _list(self, layout: Any, params: dict[str, Any], starts: Any, stops: Any) -> dict[str, Any]:
        kind = params.get("__array__")
        if kind in ("string", "bytestring"):
            data = np.asarray(layout.content.data)
            return {"type": "list", "name": "UTF8String" if kind == "string" else "ByteString",
                    "content": {"type": "primitive", "dtype": "uint8", "@": {"data": data}},
                    "@": {"starts": starts, "stops": stops}}
        return {"type": "list", "content": self.node(layout.content),
                "@": {"starts": starts, "stops": stops}}


def _strip(n: Any) -> Any:
    if isinstance(n, dict):
        return {k: _strip(v) for k, v in n.items() if k != "@"}
    if isinstance(n, list):
        return [_strip(v) for v in n]
    return n


_ROLES = {"mask": "mask", "data": "data", "starts": "starts", "stops": "stops", "tags": "tags",
          "offsets": "offsets", "positions": "positions"}


def _assign(mine: Any, explicit: Any, out: dict[str, np.ndarray]) -> None:
    for role, arr in mine["@"].items():
        out[explicit[_ROLES[role]]] = arr
    t = mine["type"]
    if t == "list":
        _assign(mine["content"], explicit["content"], out)
    elif t == "record":
        theirs = dict((k, v) for k, v in explicit["fields"])
        for k, v in mine["fields"].items():
            _assign(v, theirs[k], out)
    elif t == "tuple":
        for a, b in zip(mine["types"], explicit["types"]):
            _assign(a, b, out)
    elif t == "union":
        for a, b in zip(mine["possibilities"], explicit["possibilities"]):
            _assign(a, b, out)
    elif t == "pointer":
        _assign(mine["target"], explicit["target"], out)


def from_awkward(array: Any, prefix: str = "object") -> Any:
    """The OAMap form of an ``awkward.Array`` (or ``awkward.Record``): a top-level list (record)
    proxy over its buffers (shared
    where the layouts agree, see the module notes) with OAMap's default array names;
    :func:`~guideloom.oamap.arrays` of it, after :func:`~guideloom.oamap.to_awkward` or a full
    read, gives the named arrays."""
    ak = _ak()
    from guideloom.oamap import Schema

    if isinstance(array, ak.Record):
        # A record: the root record of a one-entry record array.
        mine = _Writer().node(array.layout.array[array.layout.at:array.layout.at + 1])
    else:
        layout = ak.to_layout(array)
        mine = {"type": "list", "content": _Writer().node(layout),
                "@": {"starts": np.array([0], np.int64),
                      "stops": np.array([layout.length], np.int64)}}
    schema = Schema.fromjson(_strip(mine), prefix)
    named: dict[str, np.ndarray] = {}
    _assign(mine, schema.tojson(explicit=True), named)
    return schema(named)
