"""RetryPolicy and error classification (G8): transient retried with backoff, permanent fast."""

from __future__ import annotations

import errno
import random

import pytest

from shardkit.errors import (
    NotFoundError,
    StorageError,
    StorageTimeoutError,
    ThrottledError,
    TransientStorageError,
)
from shardkit.storage.classify import is_transient, to_storage_error
from shardkit.storage.retry import RetryPolicy, call_with_retry

URL = "s3://bucket/ds/shards/00001.shard"


class ClientError(Exception):
    """Shaped like botocore's ClientError (the classifier reads ``.response``)."""

    def __init__(self, status: int, code: str) -> None:
        super().__init__(f"An error occurred ({code})")
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


class ReadTimeoutError(Exception):
    """Same class name as botocore's read timeout."""


def test_backoff_is_exponential_and_capped_without_jitter() -> None:
    policy = RetryPolicy(base_delay=0.2, max_delay=1.0, jitter=False)
    assert [policy.delay(i) for i in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]


def test_jitter_stays_within_the_ceiling() -> None:
    policy = RetryPolicy(base_delay=0.2, max_delay=10.0)
    rng = random.Random(0)
    assert all(0.0 <= policy.delay(3, rng) <= 1.6 for _ in range(200))


@pytest.mark.parametrize("bad", [{"max_attempts": 0}, {"base_delay": -1}, {"timeout": 0}])
def test_policy_rejects_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**bad)  # type: ignore[arg-type]


def test_transient_errors_are_retried_until_success() -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TransientStorageError(f"{URL}: 503")
        return "ok"

    assert call_with_retry(flaky, policy=RetryPolicy(base_delay=0.001), what=URL) == "ok"
    assert len(calls) == 3


def test_permanent_errors_fail_on_the_first_attempt() -> None:
    calls = []

    def denied() -> None:
        calls.append(1)
        raise StorageError(f"{URL}: access denied")

    with pytest.raises(StorageError, match="access denied"):
        call_with_retry(denied, policy=RetryPolicy(base_delay=0.001), what=URL)
    assert len(calls) == 1


def test_persistent_transient_error_gives_up_naming_the_url() -> None:
    def always() -> None:
        raise TransientStorageError(f"{URL}: 500")

    with pytest.raises(TransientStorageError) as info:
        call_with_retry(always, policy=RetryPolicy(max_attempts=3, base_delay=0.001), what=URL)
    assert URL in str(info.value)
    assert any("after 3 attempts" in note for note in info.value.__notes__)


def test_overall_timeout_bounds_the_retries() -> None:
    def always() -> None:
        raise TransientStorageError(f"{URL}: 503")

    policy = RetryPolicy(max_attempts=100, base_delay=0.05, jitter=False, timeout=0.2)
    with pytest.raises(StorageTimeoutError, match="still failing"):
        call_with_retry(always, policy=policy, what=URL)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ClientError(404, "NoSuchKey"), NotFoundError),
        (FileNotFoundError("gone"), NotFoundError),
        (PermissionError("Access Denied"), StorageError),
        (ClientError(403, "AccessDenied"), StorageError),
        (ClientError(500, "InternalError"), TransientStorageError),
        (ClientError(503, "SlowDown"), ThrottledError),  # K21: downloads slow down on these
        (ClientError(400, "SlowDown"), ThrottledError),
        (ClientError(429, "TooManyRequests"), ThrottledError),
        (ClientError(503, "ServiceUnavailable"), ThrottledError),
        (OSError("An error occurred (SlowDown) when calling the GetObject operation"), ThrottledError),
        (ReadTimeoutError("read timed out"), TransientStorageError),
        (ConnectionResetError(errno.ECONNRESET, "reset"), TransientStorageError),
        (TimeoutError(), TransientStorageError),
        (ValueError("bad bucket name"), StorageError),
    ],
)
def test_classification(exc: Exception, kind: type[StorageError]) -> None:
    err = to_storage_error(exc, URL)
    assert type(err) is kind
    assert URL in str(err)


def test_classification_follows_the_cause_chain() -> None:
    try:
        try:
            raise ClientError(503, "SlowDown")
        except ClientError as inner:
            raise OSError("wrapped by the backend") from inner
    except OSError as outer:
        assert is_transient(outer)
