"""The shardkit error tree.

Every error also subclasses the builtin that callers already catch (``ValueError``,
``OSError``, ``FileNotFoundError`` …), and its message names the resource: the URL or file,
the shard, the byte offset or sample index, and what was expected versus what was found.
"""

from __future__ import annotations


class ShardkitError(Exception):
    """Base class of every error shardkit raises on purpose."""


class FormatError(ShardkitError, ValueError):
    """Bytes that do not follow the on-disk format (specs/shard-format.md)."""


class CorruptShardError(FormatError):
    """A shard whose bytes fail a checksum, a size check or a structural check."""


class UnsupportedVersionError(FormatError):
    """A shard, manifest or resume state written by a newer, incompatible format version."""


class ManifestError(FormatError):
    """A manifest that is not valid JSON, misses fields, or names unsafe shard paths."""


class EncodeError(ShardkitError, TypeError):
    """A sample value that the sample codec cannot encode (names field and sample)."""


class SourceError(ShardkitError, ValueError):
    """A raw input file that cannot be read or parsed while packing (names the file)."""


class StorageError(ShardkitError, OSError):
    """An I/O failure talking to a store (names the URL)."""


class NotFoundError(StorageError, FileNotFoundError):
    """An object or file that does not exist (names the URL)."""


class TransientStorageError(StorageError):
    """A failure worth retrying: 5xx, throttling, resets, timeouts, truncated bodies."""


class ThrottledError(TransientStorageError):
    """The store asked the client to slow down (HTTP 503 ``SlowDown``, 429): retried, and
    cache downloads lower their concurrency (specs/cache.md, K21)."""


class CacheError(StorageError):
    """The node-local cache cannot make room or cannot publish a file."""


class StorageTimeoutError(StorageError, TimeoutError):
    """A wait (download, lock, eviction) that exceeded its timeout."""


class PlanError(ShardkitError, ValueError):
    """Plan parameters that cannot produce a valid partition."""


class StateError(ShardkitError, ValueError):
    """A resume state that is malformed, from a newer version, or for another dataset."""


class ResumeMismatchError(StateError):
    """The first batch a consumer delivered after ``load_state_dict`` is not the one the loaded
    state says comes next (specs/resume-state.md R18-R23); the message names the consumer (rank,
    worker, global id) and the expected and delivered ids."""


class LoaderUsageError(ShardkitError, TypeError):
    """A dataset iterated in a way that would break its guarantees (e.g. not by ``ShardLoader``)."""


class WorkerError(ShardkitError, RuntimeError):
    """A worker process of ``pack`` could not start or died (e.g. a script that calls
    ``sk.pack(..., workers=N)`` without an ``if __name__ == "__main__":`` guard)."""
