"""Build an fsspec filesystem for a protocol, with shardkit's defaults for network backends.

For ``s3``: socket connect/read timeouts on every request, and the backend's own retry loops
turned off (botocore ``total_max_attempts=1``, s3fs ``retries = 1``) so that ``RetryPolicy``
is the one place retries happen — nested retry loops multiply into hangs. Anything the caller
sets in ``storage_options`` wins. The endpoint comes from ``storage_options`` (``endpoint_url``
or ``client_kwargs={"endpoint_url": ...}``) or from the standard AWS env/config
(``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_S3``, profiles), which botocore reads itself.
"""

from __future__ import annotations

import copy
from typing import Any

import fsspec

from shardkit.errors import StorageError
from shardkit.storage.retry import RetryPolicy

_INSTALL_HINTS = {
    "s3": "pip install 'shardkit[s3]'  (s3fs)",
    "s3a": "pip install 'shardkit[s3]'  (s3fs)",
    "gs": "pip install gcsfs",
    "gcs": "pip install gcsfs",
    "az": "pip install adlfs",
    "abfs": "pip install adlfs",
    "hf": "pip install huggingface_hub",
}


def s3_options(options: dict[str, Any], policy: RetryPolicy) -> dict[str, Any]:
    """``options`` for s3fs with timeouts and single-attempt backend retries filled in."""
    merged = copy.deepcopy(options)
    config = dict(merged.get("config_kwargs") or {})
    config.setdefault("connect_timeout", policy.connect_timeout)
    config.setdefault("read_timeout", policy.read_timeout)
    config.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
    merged["config_kwargs"] = config
    if "endpoint_url" in merged:
        client = dict(merged.get("client_kwargs") or {})
        client.setdefault("endpoint_url", merged.pop("endpoint_url"))
        merged["client_kwargs"] = client
    return merged


def make_filesystem(protocol: str, options: dict[str, Any], policy: RetryPolicy,
                    url: str) -> fsspec.AbstractFileSystem:
    """The fsspec filesystem for ``protocol``; a missing backend gives an install hint."""
    if protocol in ("s3", "s3a"):
        options = s3_options(options, policy)
    try:
        fs = fsspec.filesystem(protocol, **options)
    except ImportError as exc:
        hint = _INSTALL_HINTS.get(protocol, f"install the fsspec backend for {protocol}://")
        raise StorageError(f"cannot open {url}: {exc}. Install hint: {hint}") from exc
    except ValueError as exc:
        raise StorageError(f"cannot open {url}: {exc}") from exc
    if protocol in ("s3", "s3a"):
        # s3fs's own retry loop (a class attribute, not a constructor option): one attempt, so
        # RetryPolicy alone decides. Instances are cached per options; all shardkit uses agree.
        fs.retries = 1
    return fs
