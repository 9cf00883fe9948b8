"""Deterministic benchmark data, generated once into ``bench-data/``.

Two kinds, sized by ``--scale`` (1.0 = the sizes of the T1 reference figures, benchmarks/README.md):

* ``tokens``: ``2_000_000 × scale`` samples ``{"id": int, "tokens": int32[128..1024]}``;
  token values are uniform in ``[0, 50257)`` (GPT-2 vocabulary), so zstd finds the
  zero high bytes and little else, like real token streams.
* ``images``: ``100_000 × scale`` samples ``{"id": int, "jpg": bytes, "label": int}`` with
  50–120 KB of incompressible (uniform random) bytes, standing in for JPEG.

The source is kept as flat arrays (``values`` + ``offsets``) that every packer memory-maps,
so packing measures the writer, not the generator. Same (kind, scale, seed) → same bytes.

    python -m benchmarks.data --kind tokens --scale 0.05   # prints one JSON line
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.checksum import Digest

KINDS = ("tokens", "images")
FULL_NUM_SAMPLES = {"tokens": 2_000_000, "images": 100_000}
TOKEN_LENGTHS = (128, 1024)  # inclusive
IMAGE_BYTES = (50_000, 120_000)  # inclusive
VOCAB_SIZE = 50_257
NUM_LABELS = 1000
SEED = 20_241_129
DEFAULT_ROOT = Path("bench-data")
_CHUNK_SAMPLES = 20_000  # generation granularity: bounds memory at full scale


@dataclass(frozen=True)
class Source:
    """A generated data set, memory-mapped read-only. Safe to share across fork."""

    kind: str
    root: Path  # bench-data/<kind>-s<scale>
    values: np.ndarray  # int32 tokens or uint8 bytes, all samples back to back
    offsets: np.ndarray  # int64, len num_samples + 1, in elements of ``values``
    meta: dict[str, Any]

    @property
    def num_samples(self) -> int:
        return len(self.offsets) - 1

    @property
    def payload_field(self) -> str:
        return "tokens" if self.kind == "tokens" else "jpg"

    def payload(self, index: int) -> np.ndarray:
        return self.values[self.offsets[index] : self.offsets[index + 1]]

    def label(self, index: int) -> int:
        return index % NUM_LABELS

    def sample(self, index: int) -> dict[str, Any]:
        """The sample as a user would hand it to a writer (arrays for tokens, bytes for jpg)."""
        if self.kind == "tokens":
            return {"id": index, "tokens": np.array(self.payload(index))}
        return {"id": index, "jpg": self.payload(index).tobytes(), "label": self.label(index)}

    def packed_dir(self, peer: str) -> Path:
        return self.root / "packed" / peer

    def iter_indices(self) -> Iterator[int]:
        return iter(range(self.num_samples))


def num_samples_for(kind: str, scale: float) -> int:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS}")
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    # A multiple of 256 = batch 64 × up to 4 consumers: no reader has a tail to drop or pad.
    return max(256, int(FULL_NUM_SAMPLES[kind] * scale) // 256 * 256)


def source_dir(kind: str, scale: float, root: Path = DEFAULT_ROOT) -> Path:
    return root / f"{kind}-s{scale:g}"


def _lengths(kind: str, num_samples: int) -> np.ndarray:
    low, high = TOKEN_LENGTHS if kind == "tokens" else IMAGE_BYTES
    rng = np.random.default_rng([SEED, 0, KINDS.index(kind)])
    return rng.integers(low, high + 1, size=num_samples, dtype=np.int64)


def _chunk_values(kind: str, chunk_index: int, count: int) -> np.ndarray:
    rng = np.random.default_rng([SEED, 1 + chunk_index, KINDS.index(kind)])
    if kind == "tokens":
        return rng.integers(0, VOCAB_SIZE, size=count, dtype=np.int32)
    return np.frombuffer(rng.bytes(count), dtype=np.uint8)


def generate(kind: str, scale: float, root: Path = DEFAULT_ROOT) -> Path:
    """Write ``values.bin``, ``offsets.npy`` and ``meta.json`` (last, so it marks completion)."""
    out = source_dir(kind, scale, root)
    out.mkdir(parents=True, exist_ok=True)
    num_samples = num_samples_for(kind, scale)
    offsets = np.zeros(num_samples + 1, dtype=np.int64)
    np.cumsum(_lengths(kind, num_samples), out=offsets[1:])
    dtype = np.int32 if kind == "tokens" else np.uint8
    digest = Digest()
    with open(out / "values.bin", "wb") as f:
        for chunk_index, start in enumerate(range(0, num_samples, _CHUNK_SAMPLES)):
            stop = min(start + _CHUNK_SAMPLES, num_samples)
            base = offsets[start]
            chunk = _chunk_values(kind, chunk_index, int(offsets[stop] - base))
            for index in range(start, stop):
                digest.add(index, chunk[offsets[index] - base : offsets[index + 1] - base])
            f.write(chunk.tobytes())
    np.save(out / "offsets.npy", offsets)
    meta = {
        "kind": kind,
        "scale": scale,
        "seed": SEED,
        "num_samples": num_samples,
        "dtype": np.dtype(dtype).name,
        "payload_bytes": int(offsets[-1]) * np.dtype(dtype).itemsize,
        "digest": digest.hexdigest(),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return out


def load(kind: str, scale: float, root: Path = DEFAULT_ROOT) -> Source:
    """Memory-map a generated source, generating it first if it is missing or stale."""
    path = source_dir(kind, scale, root)
    meta_path = path / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else None
    if meta is None or meta.get("seed") != SEED:
        generate(kind, scale, root)
        meta = json.loads(meta_path.read_text())
    dtype = np.dtype(meta["dtype"])
    values = np.memmap(path / "values.bin", dtype=dtype, mode="r")
    offsets = np.load(path / "offsets.npy")
    return Source(kind=kind, root=path, values=values, offsets=offsets, meta=meta)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=KINDS, action="append")
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    args = parser.parse_args(argv)
    for kind in args.kind or KINDS:
        source = load(kind, args.scale, args.root)
        print(json.dumps({"event": "data", **source.meta, "path": str(source.root)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
