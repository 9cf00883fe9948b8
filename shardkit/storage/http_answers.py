"""What the answer to a ranged GET means (http_ranges.py): exactly the bytes asked for, a
redirect to follow, or an error that says what is wrong (specs/cache.md, K23, K27).

- ``206`` with exactly the asked ``Content-Range``, or ``200`` with the whole object when that
  is the range: the body is the range.
- Any other ``200``: the server ignores ``Range`` — ``RangeNotHonoured``, *permanent* (a retry
  gets the same whole object); never wrong bytes, never a "short read" of a long body.
- ``301``, ``302``, ``303``, ``307``, ``308`` with a ``Location``: followed (same method, same
  ``Range``) when that is safe: to the same origin, or anywhere over http(s) (never from https
  down to http) for a URL that carries no signature. A presigned URL is signed for its host:
  sent elsewhere it would be refused, so a redirect to another host is ``RedirectRefused``,
  permanent, with what to do (S3 answers 307 for a bucket created in the last hours, and
  301/307 for one in another region than the client's: set that region, or its endpoint).
- Anything else: ``HttpStatusError`` with the status and S3's error code (classify.py reads
  them as it reads botocore's).

Errors marked ``permanent`` are never retried, whatever their text holds (classify.py).
Messages never carry a presigned URL: only hosts.
"""

from __future__ import annotations

import http.client
import re
import urllib.parse

#: Redirects one request follows at most before ``RedirectRefused``.
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
_ERROR_BODY_LIMIT = 64 * 1024
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_SIGNATURE_KEYS = ("x-amz-signature", "signature", "x-amz-credential", "awsaccesskeyid")


class HttpStatusError(Exception):
    """A non-2xx answer; ``response`` has the keys classify.py reads from botocore errors."""

    def __init__(self, status: int, code: str, message: str, reason: str = "") -> None:
        text = f"HTTP {status} {code or reason}".rstrip()
        super().__init__(f"{text}: {message}" if message else text)
        self.response = {"Error": {"Code": code or str(status), "Message": message},
                         "ResponseMetadata": {"HTTPStatusCode": status}}


class RangeNotHonoured(Exception):
    """The server answered a ranged GET with other bytes than those asked for."""

    permanent = True


class RedirectRefused(Exception):
    """A redirect that cannot be followed safely, or too many of them."""

    permanent = True


def check_answer(response: http.client.HTTPResponse, start: int, end: int) -> str | None:
    """None if ``response`` carries exactly bytes ``[start, end)``; the ``Location`` of a
    redirect (its body read, if small); else raise."""
    status = response.status
    if status == 206:
        found = _CONTENT_RANGE.fullmatch(response.getheader("Content-Range", "").strip())
        if found is None or (int(found[1]), int(found[2])) != (start, end - 1):
            raise RangeNotHonoured(f"asked for bytes {start}-{end - 1}, the answer has "
                                   f"Content-Range {response.getheader('Content-Range')!r}")
    elif status == 200:
        if start != 0 or response.length != end:  # the Range was ignored: the whole object
            raise RangeNotHonoured(ignored_range(start, end, response.length))
    else:
        code, message, body = _error_body(response)
        location = response.getheader("Location")
        if status in _REDIRECTS and location:
            return location
        if status in _REDIRECTS:
            raise RedirectRefused(_redirect_advice(status, code or response.reason, "", response, body))
        raise HttpStatusError(status, code, message, response.reason)
    if response.length is not None and response.length != end - start:
        raise RangeNotHonoured(f"asked for {end - start} bytes, Content-Length is {response.length}")
    return None


def ignored_range(start: int, end: int, got: int | None) -> str:
    """What to say of an answer to a range request that carries the whole object (``got``
    bytes): on the direct path and on the s3fs path alike."""
    return (f"asked for bytes {start}-{end - 1}, the server answered with the whole object ({got} bytes): "
            f"it ignores Range; shardkit reads a store by byte ranges, so serve it from one that "
            f"answers them (S3, GCS, MinIO, nginx) with 206")


def redirect_target(url: str, location: str, response: http.client.HTTPResponse) -> str:
    """Where a redirect from ``url`` to ``location`` leads, if it may be followed (K27)."""
    target = urllib.parse.urljoin(url, location)
    old, new = urllib.parse.urlsplit(url), urllib.parse.urlsplit(target)
    status = response.status
    if new.scheme not in ("http", "https") or not new.hostname:
        raise RedirectRefused(f"HTTP {status} to a {new.scheme!r} URL: only http(s) is followed")
    if old.scheme == "https" and new.scheme == "http":
        raise RedirectRefused(f"HTTP {status} from https down to http://{new.hostname}: not followed")
    same_origin = (old.scheme, old.hostname, old.port) == (new.scheme, new.hostname, new.port)
    if not same_origin and _signed(old.query):
        host = f"{new.hostname}:{new.port}" if new.port else new.hostname
        raise RedirectRefused(_redirect_advice(status, response.reason, host, response, ""))
    return target


def _signed(query: str) -> bool:
    keys = {key.lower() for key in urllib.parse.parse_qs(query, keep_blank_values=True)}
    return any(key in keys for key in _SIGNATURE_KEYS)


def _error_body(response: http.client.HTTPResponse) -> tuple[str, str, str]:
    """(S3 error code, message, body text) of an error answer, from at most 64 KiB of it."""
    body = response.read(_ERROR_BODY_LIMIT).decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]*)</Code>", body)
    message = re.search(r"<Message>([^<]*)</Message>", body)
    return (code[1] if code else ""), (message[1] if message else ""), body


def _redirect_advice(status: int, what: str, host: str | None, response: http.client.HTTPResponse,
                     body: str) -> str:
    """What a user can do about a redirect a presigned request cannot follow."""
    region = response.getheader("x-amz-bucket-region")
    endpoint = re.search(r"<Endpoint>([^<]*)</Endpoint>", body)
    where = f" to {host}" if host else (f" to endpoint {endpoint[1]}" if endpoint else " with no Location")
    in_region = f"; the bucket is in region {region}" if region else ""
    name = region or "<the bucket's region>"
    return (f"the store redirected the request (HTTP {status} {what}){where}{in_region}. A presigned "
            f"request is signed for one host and cannot follow it: set the bucket's region, "
            f"storage_options={{'client_kwargs': {{'region_name': '{name}'}}}} (or $AWS_DEFAULT_REGION), or "
            f"its regional endpoint_url. S3 also answers 307 for a bucket created in the last hours, "
            f"until its name has spread in DNS: its regional endpoint works at once")
