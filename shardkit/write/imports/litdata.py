"""LitData optimized directories → samples (no dependency on ``litdata``).

Layout, as observed in directories written by ``litdata.optimize`` / ``BinaryWriter`` 0.2.x::

    index.json   {"chunks": [{"filename": ..., "chunk_size": n_items, ...}],
                  "config": {"data_format": [leaf format, ...], "data_spec": <pytree spec JSON>,
                             "item_loader": "PyTreeLoader", "compression": null | "zstd[:level]",
                             "compression_level": null | "chunk" | "batch" | "sample"}}
    chunk        u32 num_items, u32 offsets[num_items + 1] (from the file start), items;
                 an item is u32 size × n_leaves, then the leaves' bytes
    zstd "chunk"  the whole chunk file is one zstd stream of the layout above
    zstd "sample" the layout above, each item's bytes one zstd frame
    zstd "batch"  "LDFZ01\\0\\0", u16 version, u16 flags, u32 n, u32 rows per frame, u32 n_frames,
                 u32 offsets[n + 1] into the inflated items, n_frames × (u32 first item,
                 u32 items, u64 file offset, u32 stored size, u32 inflated size), frames

The pytree spec rebuilds each item's dicts, lists and tuples; an item that is not a dict
becomes ``{"item": value}`` (a list or tuple at the top: ``{"0": …, "1": …}``).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import Any

from shardkit.errors import SourceError
from shardkit.format.limits import MAX_NESTING_DEPTH
from shardkit.write.imports import litdata_values, peer_files
from shardkit.write.sources import Item

_MAGIC = b"LDFZ01\0\0"
_ARROW_MAGIC = b"LDARW01\0"
_PREFIX = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")
# A data_spec node is an object whose children are a list: two JSON levels per sample level (SV3).
_SPEC_DEPTH = 2 * MAX_NESTING_DEPTH + 2


def is_litdata(path: str) -> bool:
    """An ``index.json`` with LitData's ``config`` and ``chunks``."""
    loaded = peer_files.probe_index(path)
    return loaded is not None and isinstance(loaded.get("config"), dict) and "chunks" in loaded


def iter_litdata(root: str) -> Iterator[Item]:
    """Every item of every chunk, in index order; ``origin`` names chunk file and item."""
    index_path = os.path.join(root, peer_files.INDEX_NAME)
    index = peer_files.read_json(index_path)
    config, chunks = (index.get("config"), index.get("chunks")) if isinstance(index, dict) else (None, None)
    if not isinstance(config, dict) or not isinstance(chunks, list):
        raise SourceError(f"{index_path}: no 'config' and 'chunks' (not a LitData index)")
    if config.get("encryption"):
        raise SourceError(f"{index_path}: encrypted chunks are not read")
    if config.get("item_loader", "PyTreeLoader") != "PyTreeLoader":
        raise SourceError(f"{index_path}: item_loader {config.get('item_loader')!r} is not read (PyTreeLoader only)")
    formats = config.get("data_format")
    if not isinstance(formats, list):
        raise SourceError(f"{index_path}: config.data_format must be a list")
    for name in formats:
        litdata_values.check_format(name, index_path)
    spec = _spec(config.get("data_spec"), index_path)
    if _num_leaves(spec) != len(formats):
        raise SourceError(f"{index_path}: data_spec has {_num_leaves(spec)} leaves, data_format {len(formats)}")
    number = 0
    for chunk_index, chunk in enumerate(chunks):
        origin = f"{index_path}: chunk {chunk_index}"
        if not isinstance(chunk, dict):
            raise SourceError(f"{origin}: not an object")
        path = peer_files.inside(root, chunk.get("filename"), origin)
        count = peer_files.as_int(chunk.get("chunk_size"), "chunk_size", origin)
        declared = chunk.get("chunk_bytes")
        inflated = declared if isinstance(declared, int) and not isinstance(declared, bool) and declared >= 0 else None
        rows = _chunk_rows(peer_files.read_bytes(path), config, (formats, spec), (path, inflated, origin))
        if len(rows) != count:
            raise SourceError(f"{path}: holds {len(rows)} items, {index_path} says {count}")
        for i, row in enumerate(rows):
            yield Item(origin=f"{path}: item {i}", key=str(number), row=row)
            number += 1


def _chunk_rows(
    data: bytes, config: dict[str, Any], layout: tuple[list[str], Any], chunk: tuple[str, int | None, str]
) -> list[dict[str, Any]]:
    """The chunk's items as samples: from the leaves, or from the Arrow table that replaces them.
    ``chunk``: (path, the ``chunk_bytes`` the index declares or None, the index entry's name)."""
    formats, spec = layout
    path, declared, entry = chunk
    compression = str(config.get("compression") or "")
    if compression and (config.get("compression_level") or "chunk") == "chunk" and not data.endswith(_ARROW_MAGIC):
        _check_codec(compression, path)  # the whole file is one stream of chunk_bytes bytes (PI11)
        data = peer_files.inflate("zstd", data, declared, path, f"{entry} says chunk_bytes {declared}")
    data, table = _split_arrow_footer(data, path)
    items = _chunk_items(data, config, path)
    if table is not None and items and not any(items):  # the writer kept only the Arrow rows
        try:
            rows: list[dict[str, Any]] = table.to_pylist()
        except (ValueError, TypeError, ArithmeticError) as exc:  # pyarrow's errors are ValueErrors too
            raise SourceError(f"{path}: Arrow footer rows do not read: {exc}") from None
        return rows
    rows = []
    for i, payload in enumerate(items):
        where = f"{path}: item {i}"
        rows.append(_as_sample(_unflatten(spec, iter(_leaves(payload, formats, where)))))
    return rows


def _split_arrow_footer(data: bytes, path: str) -> tuple[bytes, Any]:
    """``(chunk without footer, pyarrow Table | None)``; the footer is ``ipc, u32 len(ipc), magic``."""
    if not data.endswith(_ARROW_MAGIC) or len(data) < 12:
        return data, None
    size = int.from_bytes(data[-12:-8], "little")
    start = len(data) - 12 - size
    if start < 0:
        raise SourceError(f"{path}: Arrow footer of {size} bytes runs past the start of the chunk")
    try:
        import pyarrow as pa
    except ImportError:
        raise SourceError(f"{path}: this chunk keeps its rows in Arrow; pip install 'shardkit[parquet]'") from None
    try:
        table = pa.ipc.open_file(pa.py_buffer(data[start : start + size])).read_all()
        table.validate(full=True)  # offsets and lengths inside their buffers before any row is read (PI13)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"{path}: Arrow footer does not read: {exc}") from None
    return data[:start], table


def _check_codec(compression: str, path: str) -> None:
    if compression.split(":", 1)[0] != "zstd":
        raise SourceError(f"{path}: LitData compression {compression!r} is not read (zstd only)")


def _chunk_items(data: bytes, config: dict[str, Any], path: str) -> list[bytes]:
    compression = str(config.get("compression") or "")
    if compression:
        _check_codec(compression, path)
    if data.startswith(_MAGIC):
        return _framed_items(data, path)
    items = _classic_items(data, path)
    if compression and config.get("compression_level") == "sample":
        items = _inflate_items(items, path)
    return items


def _inflate_items(items: list[bytes], path: str) -> list[bytes]:
    """Each item its own zstd frame; all of them together inflate to at most the maximum (PI11)."""
    left, out = peer_files.max_import_bytes(), []
    for i, item in enumerate(items):
        out.append(peer_files.inflate("zstd", item, left, f"{path}: item {i}", "what is left of the maximum"))
        left -= len(out[-1])
    return out


def _classic_items(data: bytes, path: str) -> list[bytes]:
    count = peer_files.u32_at(data, 0, path)
    offsets = peer_files.offset_table(data, count, 4, path)
    return [data[offsets[i] : offsets[i + 1]] for i in range(count)]


def _framed_items(data: bytes, path: str) -> list[bytes]:
    if len(data) < _PREFIX.size:
        raise SourceError(f"{path}: framed zstd header is truncated")
    _, version, _, count, _, num_frames = _PREFIX.unpack_from(data, 0)
    if version != 1:
        raise SourceError(f"{path}: framed zstd version {version} is not read (version 1 only)")
    table = _PREFIX.size + 4 * (count + 1)
    if table + _FRAME.size * num_frames > len(data):
        raise SourceError(f"{path}: framed zstd tables run past the end ({len(data)} bytes)")
    frames = [_FRAME.unpack_from(data, table + frame * _FRAME.size) for frame in range(num_frames)]
    peer_files.check_declared(sum(f[4] for f in frames), path, "the sum of its frame table's inflated sizes")
    inflated = bytearray()
    for frame, (_, _, offset, stored, size) in enumerate(frames):
        if offset + stored > len(data):
            raise SourceError(f"{path}: zstd frame {frame} runs past the end ({len(data)} bytes)")
        where = f"{path}: frame {frame}"
        part = peer_files.inflate("zstd", data[offset : offset + stored], size, where, "its frame table entry")
        if len(part) != size:
            raise SourceError(f"{path}: frame {frame} inflates to {len(part)} bytes, its table says {size}")
        inflated += part
    offsets = struct.unpack_from(f"<{count + 1}I", data, _PREFIX.size)
    if offsets[0] != 0 or offsets[-1] != len(inflated) or not peer_files.rising(offsets):
        raise SourceError(f"{path}: item offsets do not fit the {len(inflated)} inflated bytes")
    return [bytes(inflated[offsets[i] : offsets[i + 1]]) for i in range(count)]


def _leaves(payload: bytes, formats: list[str], origin: str) -> list[Any]:
    at = 4 * len(formats)
    if at > len(payload):
        raise SourceError(f"{origin}: {len(payload)} bytes cannot hold {len(formats)} leaf sizes")
    sizes = struct.unpack_from(f"<{len(formats)}I", payload, 0)
    if at + sum(sizes) != len(payload):
        raise SourceError(f"{origin}: leaf sizes add up to {at + sum(sizes)} bytes, the item has {len(payload)}")
    leaves = []
    for leaf, (name, size) in enumerate(zip(formats, sizes, strict=True)):
        leaves.append(litdata_values.decode(name, payload[at : at + size], f"{origin}: leaf {leaf}"))
        at += size
    return leaves


def _spec(text: Any, origin: str) -> Any:
    """The pytree spec: ``[protocol, node]`` JSON, a node being ``{type, context, children_spec}``;
    every node checked (``_check_node``) before the spec is used."""
    if not isinstance(text, str):
        raise SourceError(f"{origin}: config.data_spec must be a JSON string, got {type(text).__name__}")
    loaded = peer_files.loads(text, f"{origin}: config.data_spec", _SPEC_DEPTH)
    if not (isinstance(loaded, list) and len(loaded) == 2 and isinstance(loaded[1], dict)):
        raise SourceError(f"{origin}: config.data_spec is not a pytree spec")
    nodes = [loaded[1]]
    while nodes:
        nodes.extend(_check_node(nodes.pop(), origin))
    return loaded[1]


def _check_node(node: Any, origin: str) -> list[Any]:
    """A node's children, once the node is known to be usable: a leaf (``type`` null) or a
    dict/list/tuple whose ``children_spec`` is a list of nodes (and a dict's ``context`` the
    JSON list of as many distinct keys)."""
    where = f"{origin}: config.data_spec"
    if not isinstance(node, dict):
        raise SourceError(f"{where}: a node must be an object, got {node!r:.80}")
    kind, children = node.get("type"), node.get("children_spec") or []
    if kind is not None and kind not in _DICTS + _LISTS:
        raise SourceError(f"{where}: node type {kind!r:.80} is not read (dict, list and tuple only)")
    if not isinstance(children, list):
        raise SourceError(f"{where}: children_spec must be a list, got {children!r:.80}")
    if kind in _DICTS:
        context = node.get("context")
        keys = peer_files.loads(context, f"{where}: context") if isinstance(context, str) else context or []
        if not isinstance(keys, list) or len(keys) != len(children) or len({str(k) for k in keys}) != len(keys):
            wanted = f"a dict node needs {len(children)} distinct keys"
            raise SourceError(f"{where}: {wanted}, its context is {context!r:.80}")
        node["keys"] = [str(key) for key in keys]
    return [] if kind is None else children


_DICTS = ("builtins.dict", "collections.OrderedDict")
_LISTS = ("builtins.list", "builtins.tuple")


def _num_leaves(node: dict[str, Any]) -> int:
    if node.get("type") is None:
        return 1
    return sum(_num_leaves(child) for child in node.get("children_spec") or [])


def _unflatten(node: dict[str, Any], leaves: Iterator[Any]) -> Any:
    """The item's value from its leaves, by the checked spec (depth bounded by ``_SPEC_DEPTH``)."""
    kind, children = node.get("type"), node.get("children_spec") or []
    if kind is None:
        return next(leaves)
    values = [_unflatten(child, leaves) for child in children]
    if kind in _DICTS:
        return dict(zip(node["keys"], values, strict=True))
    return values


def _as_sample(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, list):
        return {str(i): item for i, item in enumerate(value)}
    return {"item": value}
