"""Map backend exceptions (fsspec, s3fs, botocore, aiohttp, OS) onto the shardkit error tree.

Permanent: not found (404, ``NoSuchKey``) → ``NotFoundError``; denied (403) and anything unknown
→ ``StorageError``. Transient (retried): 5xx, throttling (``SlowDown``), connection resets,
timeouts, truncated bodies → ``TransientStorageError``; of those, 503/429/throttling codes →
``ThrottledError`` (a subclass), on which cache downloads lower their concurrency.

Backend classes are recognised by name along the exception chain, so this module imports
neither botocore nor aiohttp (they are optional, via s3fs). An exception anywhere on the chain
with a true ``permanent`` attribute (http_answers.py: an answer that is not the range asked
for, a redirect that cannot be followed) is permanent, whatever its text holds: "bytes
500-999" is not a 500.
"""

from __future__ import annotations

import asyncio
import errno
import re

from shardkit.errors import NotFoundError, StorageError, ThrottledError, TransientStorageError

_TRANSIENT_CODES = {
    "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
    "InternalError", "ServiceUnavailable", "RequestLimitExceeded", "TooManyRequests",
    "BandwidthLimitExceeded",
}
_THROTTLE_CODES = {
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests",
    "BandwidthLimitExceeded", "ServiceUnavailable",
}
_NOT_FOUND_CODES = {"NoSuchKey", "NoSuchBucket", "404", "NotFound"}
_TRANSIENT_CLASS_NAMES = {
    # botocore
    "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
    "ResponseStreamingError", "IncompleteReadError", "ProxyConnectionError", "HTTPClientError",
    # aiohttp
    "ServerDisconnectedError", "ClientPayloadError", "ClientConnectionError", "ClientOSError",
    "ServerTimeoutError", "ClientConnectorError", "ContentLengthError",
    # stdlib / fsspec
    "IncompleteRead", "RemoteDisconnected", "FSTimeoutError",
}
_TRANSIENT_ERRNOS = {
    errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED, errno.ETIMEDOUT, errno.EPIPE,
    errno.EAGAIN, errno.EIO, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EBUSY,
}
_THROTTLE_IN_TEXT = re.compile(r"\b(503|429)\b|SlowDown|Throttl|Service ?Unavailable|TooManyRequests")
_STATUS_IN_TEXT = re.compile(r"\b(5\d\d)\b|SlowDown|Throttl|Service ?Unavailable|InternalError")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen and len(seen) < 16:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def _http_status(exc: BaseException) -> tuple[int | None, str | None]:
    """(HTTP status, S3 error code) of a botocore ``ClientError``, if ``exc`` is one."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None, None
    error = response.get("Error") or {}
    meta = response.get("ResponseMetadata") or {}
    status = meta.get("HTTPStatusCode")
    return (int(status) if status is not None else None), error.get("Code")


def _is_permanent(exc: BaseException) -> bool:
    return any(getattr(link, "permanent", False) is True for link in _chain(exc))


def is_transient(exc: BaseException) -> bool:
    """Whether retrying ``exc`` can help."""
    if _is_permanent(exc):
        return False
    for link in _chain(exc):
        status, code = _http_status(link)
        if code in _TRANSIENT_CODES or (status is not None and (status >= 500 or status == 429)):
            return True
        if status is not None:
            return False  # 4xx other than 429: the request itself is wrong
        names = {cls.__name__ for cls in type(link).__mro__}
        if names & _TRANSIENT_CLASS_NAMES:
            return True
        if isinstance(link, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
            return True
        if isinstance(link, OSError) and link.errno in _TRANSIENT_ERRNOS:
            return True
    # s3fs flattens some ClientErrors into plain OSErrors whose text keeps the code.
    return bool(_STATUS_IN_TEXT.search(str(exc)))


def is_throttle(exc: BaseException) -> bool:
    """Whether ``exc`` is the store asking us to slow down: 503, 429 or a throttling code."""
    if _is_permanent(exc):
        return False
    for link in _chain(exc):
        status, code = _http_status(link)
        if code in _THROTTLE_CODES or status in (429, 503):
            return True
        if status is not None:
            return False
    return bool(_THROTTLE_IN_TEXT.search(str(exc)))


def is_not_found(exc: BaseException) -> bool:
    for link in _chain(exc):
        if isinstance(link, FileNotFoundError):
            return True
        status, code = _http_status(link)
        if status == 404 or code in _NOT_FOUND_CODES:
            return True
    return False


def to_storage_error(exc: BaseException, url: str) -> StorageError:
    """The shardkit error for backend failure ``exc`` while accessing ``url``."""
    if isinstance(exc, StorageError):
        return exc
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if is_not_found(exc):
        return NotFoundError(f"{url}: not found ({detail})")
    if isinstance(exc, PermissionError):
        return StorageError(f"{url}: access denied ({detail})")
    if is_throttle(exc):
        return ThrottledError(f"{url}: throttled, slow down ({detail})")
    if is_transient(exc):
        return TransientStorageError(f"{url}: transient failure ({detail})")
    return StorageError(f"{url}: {detail}")
