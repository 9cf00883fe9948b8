"""Retry with exponential backoff and jitter, for transient store failures only.

``call_with_retry`` runs ``fn`` until it succeeds, a permanent error occurs (raised at once), the
attempts are spent, or the policy's overall ``timeout`` would be exceeded by the next sleep. The
error raised at the end is the last transient error, with a note saying how many attempts were
made, so the message still names the URL (every store error does).

Thread-safety: ``RetryPolicy`` is immutable; ``call_with_retry`` keeps no shared state.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from shardkit.errors import StorageTimeoutError, TransientStorageError

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How to retry one store operation.

    ``timeout`` bounds the whole operation, retries and sleeps included (seconds): no retry
    starts once it has passed. It is also each range request's total deadline, head and body
    (specs/cache.md, K25), so a request that gets its bytes one at a time still ends; the
    socket timeouts of each request (``connect_timeout``/``read_timeout``) bound each wait.
    """

    max_attempts: int = 8
    base_delay: float = 0.2
    max_delay: float = 10.0
    jitter: bool = True
    timeout: float = 300.0
    connect_timeout: float = 10.0
    read_timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("RetryPolicy delays must be >= 0")
        if self.timeout <= 0:
            raise ValueError(f"RetryPolicy.timeout must be > 0, got {self.timeout}")

    def delay(self, attempt_index: int, rng: random.Random | None = None) -> float:
        """Sleep before retry number ``attempt_index + 1`` (0-based ``attempt_index``)."""
        ceiling = min(self.max_delay, self.base_delay * (2**attempt_index))
        if not self.jitter:
            return ceiling
        # "Full jitter": uniform in [0, ceiling] spreads synchronized retries of many workers.
        return (rng or random).uniform(0.0, ceiling)


NO_RETRY = RetryPolicy(max_attempts=1)


def call_with_retry(fn: Callable[[], T], *, policy: RetryPolicy, what: str) -> T:
    """``fn()`` retried on ``TransientStorageError`` per ``policy``; ``what`` names the URL."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return fn()
        except TransientStorageError as exc:
            attempt += 1
            elapsed = time.monotonic() - started
            if attempt >= policy.max_attempts:
                exc.add_note(f"gave up on {what} after {attempt} attempts in {elapsed:.1f}s")
                raise
            pause = policy.delay(attempt - 1)
            if elapsed + pause > policy.timeout:
                raise StorageTimeoutError(
                    f"{what}: still failing after {attempt} attempts and {elapsed:.1f}s "
                    f"(retry timeout {policy.timeout:.0f}s); last error: {exc}"
                ) from exc
            logger.info("retrying %s in %.2fs (attempt %d/%d): %s",
                        what, pause, attempt + 1, policy.max_attempts, exc)
            time.sleep(pause)
