"""Where a read run's data lives: the extension point for remote (S3 cold/warm) comparisons.

A :class:`Scenario` turns a packed local folder into the URL a reader is given and gets a
chance to reset state before each timed read. ``run_all`` runs every read configuration once
per scenario per repetition and tags each record with ``"scenario"``; the report groups by it.

Only ``local`` exists today (page cache hot: each configuration is read once, untimed, before
the timed repetitions). To add S3, write e.g. ``S3Scenario(name="s3-cold")`` whose
``prepare`` uploads ``packed_dir`` to a moto server on 127.0.0.1 (once per data set) and
returns ``s3://bench/<kind>/<peer>``, and whose ``before_read`` empties the reader's
cache folder (cold) or leaves it (warm); each peer's ``loader(url, …)`` then gets the URL
and must pass its own storage options. Register it in ``SCENARIOS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Scenario:
    name: str

    def prepare(self, packed_dir: Path, peer: str) -> str:
        """The URL the reader of ``peer`` is given for data packed into ``packed_dir``."""
        return str(packed_dir)

    def before_read(self, peer: str) -> None:
        """Called before every timed read (e.g. to empty a cache for a cold read)."""


LOCAL = Scenario("local")
SCENARIOS = {LOCAL.name: LOCAL}
