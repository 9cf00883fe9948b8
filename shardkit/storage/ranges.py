"""Reading many byte ranges of one object: the plan (pure) and its concurrent run (ST4).

``plan_requests`` sorts the asked ranges and merges those that overlap, touch, or lie within
``gap_bytes`` of each other into one request, as long as the request stays within
``request_bytes`` (a single larger range is one request of its own). ``fetch_ranges`` runs
the requests, up to ``max_in_flight`` at once, and slices each asked range out of the request
that holds it, returning them in the order they were asked. Coalescing trades a few unwanted
bytes (at most ``gap_bytes`` per merge) for fewer round trips; the store decides, because
only it knows what a request costs (a local ``pread``: nothing to merge; S3: ~10 ms each).

Thread-safety: the functions keep no state; ``fetch`` is called from up to ``max_in_flight``
threads at once.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass(frozen=True)
class RangeOptions:
    """How a store plans ``read_ranges``: merge ranges ``gap_bytes`` apart or closer into
    requests of at most ``request_bytes``, and run up to ``max_in_flight`` requests at once."""

    gap_bytes: int = 256 * 1024
    request_bytes: int = 16 * 1024 * 1024
    max_in_flight: int = 8

    def __post_init__(self) -> None:
        if self.gap_bytes < 0 or self.request_bytes < 1 or self.max_in_flight < 1:
            raise ValueError(f"invalid {self!r}: gap_bytes >= 0, request_bytes >= 1 and "
                             "max_in_flight >= 1 are needed")


def check_range(where: str, start: int, end: int) -> None:
    """``ValueError`` naming ``where`` unless ``0 <= start <= end`` (ST2)."""
    if start < 0 or end < start:
        raise ValueError(f"{where}: invalid byte range [{start}, {end})")


def plan_requests(ranges: Sequence[tuple[int, int]], options: RangeOptions) -> list[tuple[int, int]]:
    """The requests, sorted and disjoint, that together hold every non-empty range of
    ``ranges``; two ranges share a request when the gap between them is at most
    ``gap_bytes`` and the merged request stays within ``request_bytes`` (or they overlap)."""
    requests: list[tuple[int, int]] = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if requests:
            first, last = requests[-1]
            overlaps = start < last
            fits = start - last <= options.gap_bytes and max(end, last) - first <= options.request_bytes
            if overlaps or fits:
                requests[-1] = (first, max(end, last))
                continue
        requests.append((start, end))
    return requests


def fetch_ranges(ranges: Sequence[tuple[int, int]], fetch: Callable[[int, int], bytearray],
                 options: RangeOptions) -> list[bytes]:
    """The bytes of each range of ``ranges`` (in order), read by ``fetch(start, end)`` of the
    planned requests, up to ``options.max_in_flight`` at once. The first error raised by a
    request is raised (the others are waited for, never left running)."""
    requests = plan_requests(ranges, options)
    if len(requests) <= 1 or options.max_in_flight == 1:
        bodies = [fetch(start, end) for start, end in requests]
    else:
        with ThreadPoolExecutor(min(options.max_in_flight, len(requests)),
                                thread_name_prefix="shardkit-ranges") as pool:
            futures = [pool.submit(fetch, start, end) for start, end in requests]
            bodies = [future.result() for future in futures]
    starts = [start for start, _ in requests]
    out: list[bytes] = []
    for start, end in ranges:
        if end == start:
            out.append(b"")
            continue
        index = bisect.bisect_right(starts, start) - 1  # the request that holds the range
        offset = start - requests[index][0]
        out.append(bytes(bodies[index][offset:offset + end - start]))
    return out

