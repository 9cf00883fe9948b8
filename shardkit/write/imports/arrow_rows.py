"""Arrow record batches → sample dicts that keep Arrow's types.

``int64``/``float64``/``bool``/strings/binary become Python values; other fixed-width numbers
become numpy scalars of that dtype (a ``float32`` stays ``float32``); lists of numbers become
numpy arrays of the list's dtype, and lists of equal-length lists stack into 2-D (3-D …)
arrays; structs become dicts; nulls become None.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_PYTHON_NUMBERS = frozenset({"int64", "double", "bool"})


def batch_rows(batch: Any) -> list[dict[str, Any]]:
    """One dict per row of a ``pyarrow.RecordBatch`` (or Table chunk)."""
    names = list(batch.schema.names)
    columns = [column_values(column) for column in batch.columns]
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)] if names else []


def column_values(column: Any) -> list[Any]:
    """The Python/numpy value of each slot of a ``pyarrow.Array``."""
    import pyarrow as pa

    kind = column.type
    if pa.types.is_struct(kind):
        return _struct_values(column)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _list_values(column)
    if _is_numpy_number(kind) and str(kind) not in _PYTHON_NUMBERS and not column.null_count:
        values = column.to_numpy(zero_copy_only=False)
        return [values[i] for i in range(len(values))]
    return list(column.to_pylist())


def _is_numpy_number(kind: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind))


def _struct_values(column: Any) -> list[Any]:
    names = [column.type.field(i).name for i in range(column.type.num_fields)]
    children = [column_values(column.field(i)) for i in range(len(names))]
    valid = column.is_valid().to_pylist() if column.null_count else [True] * len(column)
    return [
        dict(zip(names, values, strict=True)) if ok else None
        for ok, values in zip(valid, zip(*children, strict=True) if names else [()] * len(column), strict=True)
    ]


def _list_values(column: Any) -> list[Any]:
    """Lists of numbers → numpy arrays; lists of equal-length arrays → one stacked array."""
    import pyarrow as pa

    flat = column.flatten()
    inner = column.type.value_type
    if not (_is_numpy_number(inner) or pa.types.is_list(inner) or pa.types.is_large_list(inner)
            or pa.types.is_fixed_size_list(inner)) or flat.null_count:  # fmt: skip
        return list(column.to_pylist())
    items = column_values(flat)
    offsets = _offsets(column)
    valid = column.is_valid().to_pylist() if column.null_count else [True] * len(column)
    out: list[Any] = []
    for i, ok in enumerate(valid):
        part = items[offsets[i] : offsets[i + 1]]
        out.append(_as_array(part, inner) if ok else None)
    return out


def _offsets(column: Any) -> list[int]:
    import pyarrow as pa

    if pa.types.is_fixed_size_list(column.type):
        size = column.type.list_size
        return [i * size for i in range(len(column) + 1)]
    offsets = np.asarray(column.offsets).tolist()
    return [o - offsets[0] for o in offsets]


def _as_array(part: list[Any], inner: Any) -> Any:
    if _is_numpy_number(inner):
        return np.asarray(part, dtype=inner.to_pandas_dtype())
    if part and all(isinstance(p, np.ndarray) for p in part) and len({p.shape for p in part}) == 1:
        return np.stack(part)
    return part
