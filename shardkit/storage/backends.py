"""Build fsspec filesystems: shardkit's defaults for network backends, one instance per process.

For ``s3``: socket connect/read timeouts on every request, and the backend's own retry loops
turned off (botocore ``total_max_attempts=1``, s3fs ``retries = 1``) so that ``RetryPolicy``
is the one place retries happen — nested retry loops multiply into hangs. Anything the caller
sets in ``storage_options`` wins. The endpoint comes from ``storage_options`` (``endpoint_url``
or ``client_kwargs={"endpoint_url": ...}``) or from the standard AWS env/config
(``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_S3``, profiles), which botocore reads itself.

Filesystems and ``fork`` (specs/cache.md, K17). An async backend (s3fs) owns an event loop
(an epoll descriptor and a wake-up socket pair) and a pool of keep-alive sockets. A forked
child — a DataLoader worker — inherits all of them, and the kernel objects behind them are
*shared* with the parent. If the child ever closes the inherited client (s3fs's finalizer runs
when the instance is garbage-collected, and the child's own I/O thread is often where that
happens), it unregisters the parent's pooled sockets from the parent's epoll: the parent's
next request on such a socket never sees its response and waits out the read timeout (60 s).
So instances are never shared with a child: ``make_filesystem`` keeps its own per-process
instances (fsspec's instance cache is skipped), and after ``fork`` the child *disarms* the
ones it inherited — their finalizers detached, the objects kept referenced for the child's
life so that nothing ever closes them there — and builds its own on first use. ``FsspecStore``
looks its filesystem up again whenever the process id changed.

Thread-safety: ``make_filesystem`` may be called from any thread.
"""

from __future__ import annotations

import copy
import os
import threading
import weakref
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


class _Instances:
    """This process's filesystems, and those inherited from a parent process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_key: dict[str, fsspec.AbstractFileSystem] = {}  # shared, by (protocol, options)
        self.alive: weakref.WeakSet[fsspec.AbstractFileSystem] = weakref.WeakSet()  # all made here
        self.inherited: list[fsspec.AbstractFileSystem] = []  # never used, never freed

    def after_fork_in_child(self) -> None:
        """Runs in the child right after ``fork``, before any other thread exists there."""
        self.lock = threading.Lock()  # another parent thread may have held the old one
        for fs in list(self.alive):
            _disarm(fs)
            self.inherited.append(fs)
        self.by_key = {}
        self.alive = weakref.WeakSet()


_INSTANCES = _Instances()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_INSTANCES.after_fork_in_child)


def _disarm(fs: fsspec.AbstractFileSystem) -> None:
    """Detach the finalizers registered on ``fs`` (s3fs closes its client in one): run in a
    forked child, they would close connections and loop registrations the parent still uses."""
    registry: dict[weakref.finalize, Any] = getattr(weakref.finalize, "_registry", {})
    for finalizer, info in list(registry.items()):
        if info.weakref() is fs:
            finalizer.detach()


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
    """This process's fsspec filesystem for ``protocol`` and ``options`` (created on first
    use, then shared by every store of the process, unless ``options`` has
    ``skip_instance_cache=True``); a missing backend gives an install hint."""
    if protocol in ("s3", "s3a"):
        options = s3_options(options, policy)
    options = dict(options)
    shared = not options.pop("skip_instance_cache", False)  # False: a fresh instance, unshared
    key = repr((protocol, _canonical(options)))
    with _INSTANCES.lock:
        fs = _INSTANCES.by_key.get(key) if shared else None
        if fs is None:
            fs = _create(protocol, options, url)
            _INSTANCES.alive.add(fs)
            if shared:
                _INSTANCES.by_key[key] = fs
    return fs


def _create(protocol: str, options: dict[str, Any], url: str) -> fsspec.AbstractFileSystem:
    try:
        fs = fsspec.filesystem(protocol, skip_instance_cache=True, **options)
    except ImportError as exc:
        hint = _INSTALL_HINTS.get(protocol, f"install the fsspec backend for {protocol}://")
        raise StorageError(f"cannot open {url}: {exc}. Install hint: {hint}") from exc
    except ValueError as exc:
        raise StorageError(f"cannot open {url}: {exc}") from exc
    if protocol in ("s3", "s3a"):
        # s3fs's own retry loop (read per call from the instance): one attempt, so
        # RetryPolicy alone decides.
        fs.retries = 1
    return fs


def _canonical(value: Any) -> Any:
    """``value`` with dicts as sorted item tuples, so equal options give equal keys."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _canonical(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(v) for v in value)
    return value
