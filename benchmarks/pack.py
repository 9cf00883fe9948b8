"""Pack a generated data set with one library, one process; print one JSON line.

    python -m benchmarks.pack --peer mosaic --kind images [--scale 0.05]

Times the library's writer from an empty output folder to a closed data set (for litdata
this includes starting its one writer process). The source is memory-mapped and page-cache
hot, so the figure is the writer's, not the generator's. ``disk_bytes`` is the size of every
file the writer left (index/manifest included).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks import data
from benchmarks.measure import emit, now
from benchmarks.peers import get_peer

MB = 1e6


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def pack_once(peer_name: str, kind: str, scale: float, root: Path) -> dict[str, object]:
    source = data.load(kind, scale, root)
    peer = get_peer(peer_name)
    out_dir = source.packed_dir(peer_name)
    reason = peer.unavailable_reason()  # also imports the library: imports are not timed
    if reason is not None:
        raise SystemExit(f"{peer_name} is unavailable: {reason}")
    t0 = now()
    peer.pack(source, out_dir)
    elapsed = max(now() - t0, 1e-9)
    size = disk_bytes(out_dir)
    payload = int(source.meta["payload_bytes"])
    return {
        "event": "pack",
        "peer": peer_name,
        "kind": kind,
        "scale": scale,
        "samples": source.num_samples,
        "pack_s": round(elapsed, 3),
        "samples_per_s": round(source.num_samples / elapsed, 1),
        "mb_per_s": round(payload / elapsed / MB, 2),
        "disk_bytes": size,
        "disk_ratio": round(size / payload, 4),
        "ok": True,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", required=True)
    parser.add_argument("--kind", choices=data.KINDS, required=True)
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--root", type=Path, default=data.DEFAULT_ROOT)
    args = parser.parse_args(argv)
    emit(pack_once(args.peer, args.kind, args.scale, args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
