"""The peer libraries (mosaicml-streaming, litdata) that the import tests write datasets with,
and the round-trip check every import test ends with.

``make test`` installs both (pyproject extra ``peers`` + benchmarks/requirements-nodeps.txt).
Outside CI a missing library skips its tests; under CI (``CI`` set) it fails them. The real
torchvision wheels need another torch, so when none is installed the import-only stand-in in
benchmarks/stubs is put on the path (mosaicml-streaming imports two torchvision names).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from shardkit.cli import main
from shardkit.read import open_dataset
from shardkit.read.verify import verify_dataset
from tests.helpers.samples import assert_value_equal

STUBS = Path(__file__).resolve().parents[2] / "benchmarks" / "stubs"


def peer(name: str) -> Any:
    """Import a peer library, or skip (fail under CI) when it is not installed."""
    if importlib.util.find_spec("torchvision") is None and str(STUBS) not in sys.path:
        sys.path.append(str(STUBS))
    if os.environ.get("CI"):
        return importlib.import_module(name)
    return pytest.importorskip(name, reason=f"needs {name} (pip install -e '.[peers]' and "
                               "benchmarks/requirements-nodeps.txt with --no-deps)")  # fmt: skip


def pack(src: Any, out: Any, *extra: str) -> int:
    """``shardkit pack`` keeping the source order, so samples compare one to one."""
    return main(["pack", str(src), str(out), "--no-progress", "--no-shuffle", *extra])


def read_back(out: Any) -> list[dict[str, Any]]:
    dataset = open_dataset(str(out))
    assert verify_dataset(dataset).ok
    return list(dataset.samples())


def assert_round_trip(got: list[dict[str, Any]], want: list[dict[str, Any]], sort_keys: bool = False) -> None:
    """Same samples, same order; every field equal in type, dtype, shape and value."""
    assert len(got) == len(want), f"{len(got)} samples packed, {len(want)} written"
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        if sort_keys:
            g, w = dict(sorted(g.items())), dict(sorted(w.items()))
        assert_value_equal(g, w, f"sample {index}")
