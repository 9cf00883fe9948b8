"""The dataset schema: for each top-level field, its type and, for arrays, dtype and shape.

Field descriptions (JSON)::

    {"type": "int"}                                  none|bool|int|float|str|bytes|list|dict
    {"type": "ndarray", "dtype": "<i4", "shape": [null]}   also "tensor" and "npscalar";
                                                     a null dim varies between samples
    {"type": "any", "types": ["int", "str"]}         several types were seen
    ... "nullable": true   some samples hold None;  "optional": true  some samples lack it

``SchemaBuilder`` is fed every sample while writing; ``check_sample`` validates one on verify.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from shardkit.errors import ManifestError
from shardkit.format.tensor_dtypes import tensor_dtype_name

_SCALARS: dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}
# Written as msgpack bin, read back as bytes.
_BYTES_LIKE: dict[type, str] = {bytearray: "bytes", memoryview: "bytes"}


def type_name(value: Any) -> str:
    """The schema type of one value."""
    if value is None:
        return "none"
    name = _SCALARS.get(type(value)) or _BYTES_LIKE.get(type(value))
    if name:
        return name
    if isinstance(value, np.ndarray):
        return "ndarray"
    if isinstance(value, np.generic):
        return "npscalar"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "dict"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return "tensor"
    for base, base_name in _SCALARS.items():
        if isinstance(value, base):
            return base_name
    return type(value).__name__


def describe(value: Any) -> dict[str, Any]:
    kind = type_name(value)
    if kind == "tensor":
        return {"type": kind, "dtype": tensor_dtype_name(value), "shape": list(value.shape)}
    if kind in ("ndarray", "npscalar"):
        array = np.asarray(value)
        return {"type": kind, "dtype": array.dtype.str, "shape": list(array.shape)}
    return {"type": kind}


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The narrowest description covering both."""
    flags = {k: True for k in ("nullable", "optional") if old.get(k) or new.get(k)}
    if new["type"] == "none" and old["type"] != "none":
        return {**old, "nullable": True}
    if old["type"] == "none" and new["type"] != "none":
        return {**new, "nullable": True, **flags}
    if old["type"] == "any" or new["type"] == "any" or old["type"] != new["type"]:
        types = sorted(set(_types(old)) | set(_types(new)))
        return {"type": "any", "types": types, **flags}
    if "dtype" in old:
        return {**_merge_array(old, new), **flags}
    return {**old, **flags}


def _types(desc: dict[str, Any]) -> list[str]:
    return list(desc["types"]) if desc["type"] == "any" else [desc["type"]]


def _merge_array(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    dtype = old["dtype"] if old["dtype"] == new["dtype"] else None
    a, b = old["shape"], new["shape"]
    if a is None or b is None or len(a) != len(b):
        shape = None
    else:
        shape = [x if x == y else None for x, y in zip(a, b, strict=True)]
    out: dict[str, Any] = {"type": old["type"], "dtype": dtype, "shape": shape}
    if dtype is None:
        out["dtypes"] = sorted(set(old.get("dtypes") or [old["dtype"]]) | set(new.get("dtypes") or [new["dtype"]]))
    return out


class SchemaBuilder:
    """Accumulates the schema of the samples written so far. Deterministic in input order."""

    def __init__(self) -> None:
        self.fields: dict[str, dict[str, Any]] = {}
        self._num_samples = 0
        # Per field, a cheap test that a value is already covered by its description, so the
        # common case (same type, dtype and fixed dims as before) skips describe/merge.
        self._covered: dict[str, Callable[[Any], bool]] = {}

    def observe(self, sample: dict[str, Any]) -> None:
        fields, covered = self.fields, self._covered
        for key, value in sample.items():
            check = covered.get(key)
            if check is not None and check(value):
                continue
            desc = describe(value)
            old = fields.get(key)
            if old is None:
                fields[key] = {**desc, "optional": True} if self._num_samples else desc
            else:
                fields[key] = merge(old, desc)
            covered[key] = _covered_by(fields[key])
        if len(sample) != len(fields):
            for key, desc in fields.items():
                if key not in sample and not desc.get("optional"):
                    fields[key] = {**desc, "optional": True}
        self._num_samples += 1

    def update(self, other: dict[str, dict[str, Any]], other_num_samples: int) -> None:
        """Merge a schema built elsewhere over the samples that follow (parallel packing)."""
        if other_num_samples == 0:
            return
        for key, desc in other.items():
            old = self.fields.get(key)
            if old is None:
                self.fields[key] = {**desc, "optional": True} if self._num_samples else desc
            elif old != desc:
                self.fields[key] = merge(old, desc)
        for key, desc in self.fields.items():
            if key not in other and not desc.get("optional"):
                self.fields[key] = {**desc, "optional": True}
        self._num_samples += other_num_samples

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {key: dict(sorted(self.fields[key].items())) for key in sorted(self.fields)}


_PY_TYPES = {"none": type(None), "bool": bool, "int": int, "float": float, "str": str, "bytes": bytes,
             "list": list, "dict": dict}


def _covered_by(desc: dict[str, Any]) -> Callable[[Any], bool]:
    """A fast predicate implying ``merge(desc, describe(value)) == desc`` (never a false yes)."""
    types = _types(desc)
    allowed = {_PY_TYPES[t] for t in types if t in _PY_TYPES}
    if desc.get("nullable"):
        allowed.add(type(None))
    if desc["type"] != "ndarray" or desc.get("dtype") is None or desc.get("shape") is None:
        simple = frozenset(allowed) if len(allowed) == len(types) + bool(desc.get("nullable")) else frozenset()
        return lambda value: type(value) in simple
    dtype, shape = np.dtype(desc["dtype"]), desc["shape"]
    fixed = tuple((i, d) for i, d in enumerate(shape) if d is not None)
    ndim, nullable = len(shape), bool(desc.get("nullable"))

    def check(value: Any) -> bool:
        if type(value) is not np.ndarray:
            return nullable and value is None
        vshape = value.shape
        return value.dtype == dtype and len(vshape) == ndim and all(vshape[i] == d for i, d in fixed)

    return check


def check_sample(sample: dict[str, Any], schema: dict[str, dict[str, Any]]) -> str | None:
    """``None`` if ``sample`` fits ``schema``, else a message naming the first bad field."""
    for key, desc in schema.items():
        if key not in sample:
            if not desc.get("optional"):
                return f"field {key!r} is missing"
            continue
        value = sample[key]
        if value is None and (desc.get("nullable") or desc["type"] == "none"):
            continue
        got = describe(value)
        allowed = _types(desc)
        if got["type"] not in allowed:
            return f"field {key!r}: expected {'/'.join(allowed)}, got {got['type']}"
        if "dtype" in got and desc["type"] != "any" and not _array_fits(got, desc):
            return f"field {key!r}: expected {desc['dtype']}{desc['shape']}, got {got['dtype']}{got['shape']}"
    extra = set(sample) - set(schema)
    if extra:
        return f"field(s) {sorted(extra)} are not in the schema"
    return None


def _array_fits(got: dict[str, Any], desc: dict[str, Any]) -> bool:
    dtypes = desc.get("dtypes") or [desc["dtype"]]
    if got["dtype"] not in dtypes:
        return False
    shape = desc["shape"]
    if shape is None:
        return True
    if len(shape) != len(got["shape"]):
        return False
    return all(s is None or s == g for s, g in zip(shape, got["shape"], strict=True))


TYPE_NAMES = frozenset({*_PY_TYPES, "ndarray", "tensor", "npscalar"})
_ARRAY_TYPES = frozenset({"ndarray", "tensor", "npscalar"})


def validate_schema(schema: Any, where: str) -> dict[str, dict[str, Any]]:
    """M6: a map of field names to well-formed descriptions; ``ManifestError`` naming the field."""
    if not isinstance(schema, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("type"), str) for k, v in schema.items()
    ):
        raise ManifestError(f"{where}: schema must map field names to {{'type': …}} objects")
    for name, desc in schema.items():
        problem = _description_problem(desc)
        if problem:
            raise ManifestError(f"{where}: schema field {name!r}: {problem} (M6), got {desc!r}"[:2000])
    return schema


def _description_problem(desc: dict[str, Any]) -> str | None:
    kind = desc["type"]
    if kind not in TYPE_NAMES and kind != "any":
        return f"unknown type {kind!r}"
    if any(key in desc and type(desc[key]) is not bool for key in ("optional", "nullable")):
        return "'optional' and 'nullable' must be booleans"
    if kind == "any":
        types = desc.get("types")
        if not isinstance(types, list) or not types or not all(t in TYPE_NAMES for t in types):
            return "type 'any' needs a non-empty 'types' list of type names"
    if kind in _ARRAY_TYPES:
        dtype, shape = desc.get("dtype", 0), desc.get("shape", 0)
        dtypes = desc.get("dtypes")
        if not (isinstance(dtype, str) or (dtype is None and isinstance(dtypes, list) and dtypes
                                           and all(isinstance(d, str) for d in dtypes))):
            return f"type {kind!r} needs a str 'dtype' (or null with a 'dtypes' list of str)"
        if shape is not None and not (isinstance(shape, list) and all(
                d is None or (type(d) is int and d >= 0) for d in shape)):
            return f"type {kind!r} needs a 'shape': null or a list of ints >= 0 and nulls"
    return None
