"""A training job's data side, driven line by line over stdin, run as a Unix user of its own
(tests/helpers/group_members.py ``Member.start``): the victim of the shared-cache attacks.

``python -m tests.helpers.victim_job URL CACHE_DIR OPTIONS_JSON [COMPANION_MIN_BYTES]`` makes
the cache dir's ``v1/`` (as a job does on its first open) and prints ``ready``; then each line
``epoch`` on stdin runs one epoch of one ``StreamingDataset`` (made on the first ``epoch`` and
kept: the same running loader) and prints one JSON line: ``{"ids": [...]}`` (every id seen, in
order), plus ``"error"`` and ``"message"`` when the epoch raised. EOF ends it.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> None:
    import shardkit as sk
    from shardkit.read import manifest_open
    from shardkit.storage import ShardCache

    url, cache_dir, options = argv[0], argv[1], json.loads(argv[2])
    if len(argv) > 3:
        manifest_open.COMPANION_MIN_BYTES = int(argv[3])  # type: ignore[misc]
    ShardCache(cache_dir, 1 << 30)
    print("ready", flush=True)
    dataset = None
    for line in sys.stdin:
        if line.strip() != "epoch":
            continue
        ids: list[int] = []
        result: dict[str, object] = {"ids": ids}
        try:
            if dataset is None:
                dataset = sk.StreamingDataset(url, batch_size=8, shuffle=False, tail="pad",
                                              cache_dir=cache_dir, storage_options=options)
            for batch in dataset:
                ids.extend(int(i) for i in batch["id"].tolist())
        except Exception as exc:  # reported to the test, which decides
            result.update(error=type(exc).__name__, message=str(exc))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
