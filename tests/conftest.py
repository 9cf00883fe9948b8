"""Shared fixtures. Kept import-light: heavy helpers live in tests/helpers/ and load lazily.

- ``s3_server`` (session): a real ``moto_server`` subprocess on 127.0.0.1, its endpoint URL.
- ``s3_bucket``: a fresh bucket, as ``("s3://<bucket>", storage_options)``.
- ``fault_proxy``: a counting, fault-injecting proxy in front of ``s3_server``
  (tests/helpers/fault_proxy.py).
- ``group_members``, ``shared_root``: two real Unix users in a fresh group, and a folder all
  users may enter, for attacks through a shared cache dir (tests/helpers/group_members.py).
- ``no_default_cache`` (autouse): ``$SHARDKIT_CACHE_DIR=off``, so a remote dataset made without
  cache arguments reads by ranges (K33) instead of filling the default ``~/.cache/shardkit``
  of whoever runs the tests (K47); a test of the default deletes the variable and sets ``HOME``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.fault_proxy import fault_proxy  # noqa: F401  (fixture registration)
from tests.helpers.group_members import group_members, shared_root  # noqa: F401  (fixture registration)


@pytest.fixture(autouse=True)
def no_default_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDKIT_CACHE_DIR", "off")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    pytest.importorskip("moto.server", reason="needs moto[server]")
    pytest.importorskip("s3fs", reason="needs s3fs")
    from tests.helpers.s3 import start_moto_server

    with start_moto_server() as url:
        yield url


@pytest.fixture
def s3_bucket(s3_server: str) -> tuple[str, dict[str, Any]]:
    from tests.helpers.s3 import create_bucket, storage_options

    return f"s3://{create_bucket(s3_server)}", storage_options(s3_server)
