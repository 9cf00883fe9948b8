"""Read a packed data set once through a library's DataLoader; print one JSON line.

    python -m benchmarks.read --peer litdata-zstd --kind tokens --workers 2 [--scale 0.05]

Timeline (perf_counter, inside this process, after imports):
``t0`` dataset + loader constructed from nothing → ``t_first`` first batch in hand →
``t_end`` last batch digested. ``ttfb_s = t_first - t0`` (first pass); throughput is the
steady state ``(samples - first batch) / (t_end - t_first)``, summed over ``--passes`` passes
(each a fresh ``iter(loader)``; more passes over a small set give a longer, steadier window);
``epoch_s`` is the first pass's ``t_end - t0``. The consumer digests every sample
(benchmarks/checksum.py) inside the timed loop, and the run fails unless every pass's digest
equals the source's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks import data
from benchmarks.checksum import Digest
from benchmarks.measure import emit, now
from benchmarks.peers import get_peer

MB = 1e6


def read_once(peer_name: str, kind: str, scale: float, workers: int, batch_size: int,
              url: str | None, root: Path, passes: int = 1) -> dict[str, object]:
    source = data.load(kind, scale, root)
    peer = get_peer(peer_name)
    url = url or str(source.packed_dir(peer_name))
    reason = peer.unavailable_reason()  # also imports the library: imports are not timed
    if reason is not None:
        raise SystemExit(f"{peer_name} is unavailable: {reason}")
    digests: list[str] = []
    steady_samples = steady_bytes = 0
    steady_s = ttfb = epoch_s = 0.0
    t0 = now()
    loader = peer.loader(url, kind, workers, batch_size)
    for pass_index in range(passes):
        digest = Digest()
        if pass_index:
            t0 = now()
        iterator = iter(loader)
        first = next(iterator)
        t_first = now()
        peer.digest_batch(first, kind, digest)
        first_count, first_bytes = digest.count, digest.num_bytes
        for batch in iterator:
            peer.digest_batch(batch, kind, digest)
        t_end = now()
        if not pass_index:
            ttfb, epoch_s = t_first - t0, t_end - t0
        steady_s += t_end - t_first
        steady_samples += digest.count - first_count
        steady_bytes += digest.num_bytes - first_bytes
        digests.append(digest.hexdigest())
    steady_s = max(steady_s, 1e-9)
    return {
        "event": "read",
        "peer": peer_name,
        "kind": kind,
        "scale": scale,
        "workers": workers,
        "batch_size": batch_size,
        "url": url,
        "passes": passes,
        "samples": digest.count,
        "payload_bytes": digest.num_bytes,
        "ttfb_s": round(ttfb, 4),
        "epoch_s": round(epoch_s, 4),
        "samples_per_s": round(steady_samples / steady_s, 1),
        "mb_per_s": round(steady_bytes / steady_s / MB, 2),
        "digest": digests[-1],
        "expected_digest": source.meta["digest"],
        "ok": all(d == source.meta["digest"] for d in digests),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", required=True)
    parser.add_argument("--kind", choices=data.KINDS, required=True)
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--passes", type=int, default=1, help="read the set this many times")
    parser.add_argument("--url", help="read from here instead of bench-data/…/packed/<peer>")
    parser.add_argument("--root", type=Path, default=data.DEFAULT_ROOT)
    args = parser.parse_args(argv)
    record = read_once(args.peer, args.kind, args.scale, args.workers, args.batch_size,
                       args.url, args.root, max(args.passes, 1))
    emit(record)
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
