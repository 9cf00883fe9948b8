"""A real S3 server for tests: ``moto_server`` (from ``moto[server]``) on 127.0.0.1.

``start_moto_server`` runs it as a subprocess (argument list, never a shell) on a free port and
waits until it answers; fixtures in tests/conftest.py wrap it. Nothing here needs a live bucket.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from shardkit.format import Manifest

CREDENTIALS = {"key": "testing", "secret": "testing"}
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/moto-api/", timeout=1) as response:
            return bool(response.status < 500)
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except OSError:
        return False


@contextlib.contextmanager
def start_moto_server(timeout: float = 30.0) -> Iterator[str]:
    """Yield the endpoint URL of a fresh moto server; kill it afterwards."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               AWS_DEFAULT_REGION=REGION)
    for _ in range(3):  # the free port can be taken between probe and bind: try another
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline and not _answers(url):
            time.sleep(0.1)
        if proc.poll() is None and _answers(url):
            try:
                yield url
            finally:
                proc.kill()
                proc.wait(timeout=10)
            return
        proc.kill()
        proc.wait(timeout=10)
    raise RuntimeError(f"moto_server did not start on 127.0.0.1 within {timeout:.0f}s")


def storage_options(endpoint_url: str, **extra: Any) -> dict[str, Any]:
    """s3fs options for the test server at ``endpoint_url`` (explicit: no env needed)."""
    options: dict[str, Any] = dict(CREDENTIALS)
    options["client_kwargs"] = {"endpoint_url": endpoint_url, "region_name": REGION}
    options.update(extra)
    return options


def create_bucket(endpoint_url: str) -> str:
    """A new, empty bucket; returns its name."""
    import s3fs

    name = f"test-{uuid.uuid4().hex[:12]}"
    options = storage_options(endpoint_url)
    del options["client_kwargs"]["region_name"]  # us-east-1 is no valid LocationConstraint
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    fs.mkdir(name)
    return name


def memory_store(prefix: str, names: list[str], size: int) -> Any:
    """A fresh ``memory://`` store holding ``names[i]`` = ``bytes([i]) * size`` (storage unit tests)."""
    from shardkit.storage import open_store

    store = open_store(f"memory://{prefix}-{uuid.uuid4().hex}")
    for index, name in enumerate(names):
        store.write_atomic(name, bytes([index]) * size)
    return store


def write_s3_tokens(
    bucket: tuple[str, dict[str, Any]],
    num_samples: int,
    tokens: Callable[[np.random.Generator], np.ndarray],
    *,
    seed: int,
    shard_size: str,
    block_size: str,
) -> tuple[str, Manifest]:
    """Write ``{"id": i, "tokens": tokens(rng)}`` for ``i < num_samples`` straight to
    ``<bucket>/ds`` (``bucket`` as the ``s3_bucket`` fixture gives it); its url and manifest."""
    import shardkit as sk
    from shardkit.read import open_dataset

    url, options = f"{bucket[0]}/ds", bucket[1]
    rng = np.random.default_rng(seed)
    with sk.ShardWriter(url, shard_size=shard_size, block_size=block_size, storage_options=options) as writer:
        for i in range(num_samples):
            writer.write({"id": i, "tokens": tokens(rng)})
    return url, open_dataset(url, options).manifest
