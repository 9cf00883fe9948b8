"""A local Ray instance for the Ray packing tests (2 CPUs, no dashboard), one per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """Yields the ``ray`` module, initialised; its GCS address is ``ray_address(ray)``."""
    ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'shardkit[ray]'")
    pytest.importorskip("ray.data")
    import logging

    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    try:
        yield ray
    finally:
        ray.shutdown()


def ray_address(ray: Any) -> str:
    return str(ray.get_runtime_context().gcs_address)
