"""Stub: only the name mosaicml-streaming imports at module level."""

from typing import Any


class VisionDataset:
    """Never instantiated by the benchmarks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("torchvision stub (benchmarks/stubs): VisionDataset is unavailable")
