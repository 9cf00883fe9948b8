"""Refuse a ``StreamingDataset`` iterated by a DataLoader other than ``ShardLoader`` (R11).

``StreamingDataset`` yields whole, collated batches with the consumed boundary attached; only
``ShardLoader`` (``batch_size=None`` and the ``passthrough`` collation below) hands them to the
loop as they are, strips the boundary, advances epochs and resumes. A plain
``torch.utils.data.DataLoader(ds)`` — the habit from other streaming libraries, and what trainers
that build their own loader do — would batch the batches again (``[1, …]`` shapes or a collate
error), leak the internal ``_shardkit`` key and lose epochs and resume, silently. So the dataset
looks at the DataLoader fetcher that calls ``iter(dataset)`` (in the worker or in the training
process) and refuses any other collation at once, naming the fix.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

from shardkit.errors import LoaderUsageError

try:  # private, long-stable; without it nothing is refused (the old behaviour)
    from torch.utils.data._utils import fetch as _fetch

    _Fetcher: type | None = _fetch._IterableDatasetFetcher
except (ImportError, AttributeError):  # pragma: no cover - depends on the torch build
    _Fetcher = None

CALLER_DEPTH = 4  # frames above StreamingDataset.__iter__ searched for the fetcher (subclasses)

HINT = (
    "StreamingDataset yields whole collated batches and must be iterated through "
    "shardkit.ShardLoader(dataset, num_workers=...) (a torch DataLoader subclass: pin_memory, "
    "prefetch_factor, persistent_workers as usual), not torch.utils.data.DataLoader(dataset): "
    "that one batches the batches again, leaks the internal '_shardkit' key and loses epochs "
    "and resume. Set the batch size and collate_fn on the StreamingDataset."
)


def passthrough(batch: Any) -> Any:
    """``ShardLoader``'s collation: the dataset already batches and collates; keep batches as they are."""
    return batch


def check_caller(dataset_name: str) -> None:
    """Raise ``LoaderUsageError`` when ``iter(dataset)`` comes from a DataLoader fetcher that
    would re-collate the batches (anything but ``ShardLoader``'s settings). Direct iteration
    (``for batch in dataset``) is allowed."""
    if _Fetcher is None:
        return
    frame: FrameType | None = sys._getframe(2)  # the frame that called the dataset's __iter__ (or a subclass's)
    for _ in range(CALLER_DEPTH):
        if frame is None:
            return
        fetcher = frame.f_locals.get("self")
        if isinstance(fetcher, _Fetcher):
            if getattr(fetcher, "auto_collation", True) or getattr(fetcher, "collate_fn", None) is not passthrough:
                raise LoaderUsageError(f"{dataset_name}: {HINT}")
            return
        frame = frame.f_back
