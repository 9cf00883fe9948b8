"""Stub: only the name mosaicml-streaming imports at module level."""

from typing import Any


def to_tensor(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("torchvision stub (benchmarks/stubs): to_tensor is unavailable")
