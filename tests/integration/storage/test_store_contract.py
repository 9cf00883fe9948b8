"""The store contract (specs/store.md, ST1–ST11), one suite run against every backend: local
files, memory, fsspec's memory://, S3 through s3fs and over direct HTTP (moto), the keep-alive
S3 server, and moto behind the fault proxy (seeded 503s and truncated bodies, which the store's
retries must hide). tests/helpers/store_backends.py makes them."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import NotFoundError, StorageError
from shardkit.storage.ranges import RangeOptions, plan_requests
from tests.helpers.store_backends import KINDS, NETWORK_KINDS, Backend, open_backend

pytestmark = [pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning:botocore")]

PAYLOAD = random.Random(31).randbytes(600_013)  # two ranges at its ends are too far apart to merge
SMALL = b"a small object"
SEEDED = {"blob.bin": PAYLOAD, "small.txt": SMALL, "empty.bin": b"", "sub/a.bin": b"a", "sub/deeper/b.bin": b"bb"}
FAR_APART = [(0, 10), (len(PAYLOAD) - 10, len(PAYLOAD))]


@pytest.fixture(scope="module", params=[pytest.param(k, marks=[pytest.mark.s3] if k in NETWORK_KINDS else [])
                                        for k in KINDS])
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    kind = request.param
    endpoint = None
    if kind in NETWORK_KINDS:
        pytest.importorskip("s3fs", reason="needs s3fs")
        if kind != "keepalive":
            endpoint = request.getfixturevalue("s3_server")
    with open_backend(kind, tmp_path_factory.mktemp(kind), endpoint) as made:
        for name, data in SEEDED.items():
            made.seed(name, data)
        yield made


def fresh_name(stem: str = "obj") -> str:
    return f"w-{uuid.uuid4().hex[:10]}/{stem}.bin"


def test_read_returns_each_whole_object_st1(backend: Backend) -> None:
    for name, data in SEEDED.items():
        assert backend.store.read(name) == data


@pytest.mark.parametrize(("start", "end"), [(0, len(PAYLOAD)), (5, 6), (len(PAYLOAD) - 1, len(PAYLOAD)),
                                            (1000, 70_000), (0, 1)])
def test_read_range_returns_exactly_the_bytes_asked_st2(backend: Backend, start: int, end: int) -> None:
    assert backend.store.read_range("blob.bin", start, end) == PAYLOAD[start:end]


def test_an_empty_range_is_no_bytes_and_no_request_st2(backend: Backend) -> None:
    before = backend.num_gets() if backend.num_gets else 0
    assert backend.store.read_range("blob.bin", 10, 10) == b""
    assert backend.store.read_ranges("blob.bin", [(7, 7), (0, 0)]) == [b"", b""]
    if backend.num_gets:
        assert backend.num_gets() == before


@pytest.mark.parametrize(("start", "end"), [(-1, 5), (10, 5)])
def test_a_negative_or_reversed_range_is_a_value_error_naming_the_object_st2(
        backend: Backend, start: int, end: int) -> None:
    url = backend.store.url_of("blob.bin")
    with pytest.raises(ValueError, match=f"invalid byte range \\[{start}, {end}\\)") as caught:
        backend.store.read_range("blob.bin", start, end)
    assert url in str(caught.value)
    with pytest.raises(ValueError, match="invalid byte range"):
        backend.store.read_ranges("blob.bin", [(0, 4), (start, end)])


@pytest.mark.parametrize(("start", "end"), [(len(PAYLOAD) - 5, len(PAYLOAD) + 5),
                                            (len(PAYLOAD) + 10, len(PAYLOAD) + 20)],
                         ids=["across-the-end", "wholly-past"])
def test_a_range_past_the_end_raises_naming_the_object_never_short_bytes_st3(
        backend: Backend, start: int, end: int) -> None:
    for read in (lambda: backend.store.read_range("blob.bin", start, end),
                 lambda: backend.store.read_ranges("blob.bin", [(0, 3), (start, end)])):
        with pytest.raises(StorageError) as caught:
            read()
        assert "blob.bin" in str(caught.value)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(PAYLOAD)), st.integers(0, 70_000)), max_size=12))
def test_read_ranges_gives_each_range_as_read_range_would_in_the_order_asked_st4(
        backend: Backend, starts_and_lengths: list[tuple[int, int]]) -> None:
    """Empty, overlapping, repeated, out of order, up to the end: any set of ranges."""
    ranges = [(start, min(len(PAYLOAD), start + length)) for start, length in starts_and_lengths]
    assert backend.store.read_ranges("blob.bin", ranges) == [PAYLOAD[s:e] for s, e in ranges]


def _counting(backend: Backend, monkeypatch: pytest.MonkeyPatch,
              barrier: threading.Barrier | None = None) -> dict[str, int]:
    """Count the store's range requests (and how many run at once) as ``read_ranges`` makes them."""
    store, seen = backend.store, {"requests": 0, "now": 0, "most": 0}
    lock, real = threading.Lock(), store.stream_range

    def stream_range(*args: Any, **kwargs: Any) -> None:
        with lock:
            seen["requests"] += 1
            seen["now"] += 1
            seen["most"] = max(seen["most"], seen["now"])
        try:
            if barrier is not None:
                barrier.wait(timeout=30)  # every allowed request is in flight together, or this breaks
            real(*args, **kwargs)
        finally:
            with lock:
                seen["now"] -= 1

    monkeypatch.setattr(store, "stream_range", stream_range)
    return seen


@pytest.mark.parametrize("ranges", [[(0, 10), (20, 30), (100, 200)], [(300, 400), (0, 10), (5, 350)], FAR_APART],
                         ids=["nearby", "overlapping-out-of-order", "far-apart"])
def test_read_ranges_makes_the_planned_requests_and_no_more_st4(
        backend: Backend, monkeypatch: pytest.MonkeyPatch, ranges: list[tuple[int, int]]) -> None:
    before = backend.num_gets() if backend.num_gets else 0
    seen = _counting(backend, monkeypatch)
    assert backend.store.read_ranges("blob.bin", ranges) == [PAYLOAD[s:e] for s, e in ranges]
    planned = plan_requests(ranges, backend.store.range_options)
    assert seen["requests"] == len(planned)
    if backend.store.range_options.gap_bytes >= 1000:  # a backend with round trips merges nearby ranges
        assert len(planned) == (2 if ranges == FAR_APART else 1)
    if backend.num_gets:  # the wire agrees
        assert backend.num_gets() - before == len(planned)


def test_read_ranges_runs_requests_concurrently_up_to_its_bound_st4(
        backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend.store, "range_options", RangeOptions(gap_bytes=0, max_in_flight=4))
    ranges = [(i * 5000, i * 5000 + 100) for i in range(12)]  # 12 requests: 3 rounds of 4
    seen = _counting(backend, monkeypatch, threading.Barrier(4))
    assert backend.store.read_ranges("blob.bin", ranges) == [PAYLOAD[s:e] for s, e in ranges]
    assert seen["requests"] == 12 and seen["most"] == 4


def test_stat_gives_size_and_an_etag_that_changes_when_the_object_is_replaced_st5(backend: Backend) -> None:
    name = fresh_name()
    backend.seed(name, b"x" * 1000)
    first = backend.store.stat(name)
    assert first.size == 1000 == backend.store.size(name) and first.etag
    assert backend.store.stat(name) == first  # stable while unchanged
    backend.seed(name, b"y" * 1001)
    second = backend.store.stat(name)  # as it is now, not as it was cached
    assert second.size == 1001 and second.etag != first.etag
    assert backend.store.read(name) == b"y" * 1001
    assert backend.store.stat("empty.bin").size == 0


def test_a_missing_object_raises_not_found_naming_it_st6(backend: Backend) -> None:
    name = "missing/none.bin"
    url = backend.store.url_of(name)
    reads = [lambda: backend.store.read(name), lambda: backend.store.read_range(name, 0, 10),
             lambda: backend.store.read_ranges(name, [(0, 10), (20, 30)]), lambda: backend.store.stat(name),
             lambda: backend.store.size(name)]
    for read in reads:
        with pytest.raises(NotFoundError) as caught:
            read()
        assert isinstance(caught.value, FileNotFoundError) and url in str(caught.value)
    assert not backend.store.exists(name) and backend.store.exists("blob.bin")


def test_list_names_the_objects_under_a_prefix_sorted_st7(backend: Backend) -> None:
    assert backend.store.list("sub") == ["sub/a.bin", "sub/deeper/b.bin"]
    assert backend.store.list("sub/deeper") == ["sub/deeper/b.bin"]
    assert backend.store.list("nothing-here") == []
    everything = backend.store.list()
    assert everything == sorted(everything) and set(SEEDED) <= set(everything)


def test_writes_publish_whole_objects_and_delete_and_copy_st8(backend: Backend) -> None:
    if not backend.writable:
        pytest.skip(f"the {backend.kind} server is read-only: its objects are seeded through its folder")
    store, name, other = backend.store, fresh_name("a"), fresh_name("b")
    store.write_atomic(name, b"one")
    assert store.read(name) == b"one"
    file = store.open_atomic(name)
    for piece in (b"two ", memoryview(b"pieces")):
        file.write(piece)
    assert store.read(name) == b"one"  # nothing shows before commit
    file.commit()
    assert store.read(name) == b"two pieces"
    dropped = store.open_atomic(other)
    dropped.write(b"never")
    dropped.discard()
    assert not store.exists(other)
    store.copy(name, other)
    assert store.read(other) == store.read(name) == b"two pieces"
    store.delete(name)
    store.delete(name)  # a missing one: no error
    assert not store.exists(name) and store.read(other) == b"two pieces"


def test_many_threads_share_one_store_st9(backend: Backend) -> None:
    errors: list[BaseException] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(6):
                start = rng.randrange(len(PAYLOAD))
                end = min(len(PAYLOAD), start + rng.randrange(1, 50_000))
                assert backend.store.read_range("blob.bin", start, end) == PAYLOAD[start:end]
                assert backend.store.read_ranges("blob.bin", [(end - 1, end), (start, end)]) == \
                    [PAYLOAD[end - 1:end], PAYLOAD[start:end]]
                assert backend.store.read("small.txt") == SMALL
                assert backend.store.stat("blob.bin").size == len(PAYLOAD)
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]
    if backend.num_faults is not None:  # the faults were there, and hidden by retries
        assert backend.num_faults() > 0


def test_only_local_files_have_a_path_and_only_they_skip_the_cache_st10(backend: Backend) -> None:
    path = backend.store.local_path("blob.bin")
    assert (path is not None) == (backend.kind == "local") == (not backend.store.worth_caching)
    if path is not None:
        with open(path, "rb") as file:
            assert file.read() == PAYLOAD
