"""One epoch of a many-source mixture, run by tests under a descriptor limit (RP1).

    python -m tests.helpers.bounded_job ROOT NUM_SOURCES PER_SOURCE NUM_WORKERS

Prints one JSON line: the ids delivered (sorted, so the test checks every one came exactly
once), this process's ``RLIMIT_NOFILE``, the most descriptors any one of its processes held and
the most all of them held together (sampled every 20 ms from ``/proc/PID/fd``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading

import shardkit as sk
from tests.helpers.many_sources import mixture_of, write_sources


def open_descriptors(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:  # the process is gone
        return 0


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as listing:
            return [int(word) for word in listing.read().split()]
    except OSError:
        return []


def main(argv: list[str]) -> int:
    root, num_sources, per_source, num_workers = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    paths = write_sources(root, num_sources, per_source)
    most = [0, 0]  # in one process, in all together
    done = threading.Event()

    def watch() -> None:  # every process of the job, until the epoch ends
        while not done.wait(0.02):
            me = os.getpid()
            counts = [open_descriptors(pid) for pid in [me, *children(me)]]
            most[:] = [max(most[0], *counts), max(most[1], sum(counts))]

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    dataset = sk.StreamingDataset(mixture_of(paths, per_source), batch_size=per_source, seed=3)
    loader = sk.ShardLoader(dataset, num_workers=num_workers)
    loader.set_epoch(0)
    ids = sorted(int(i) for batch in loader for i in batch["id"].tolist())
    done.set()
    watcher.join()
    print(json.dumps({"ids": ids, "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                      "most_descriptors": most[0], "most_descriptors_together": most[1]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
