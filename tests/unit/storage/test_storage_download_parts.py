"""Where a download's requests write (download.py): a part's attempts stream into its place
until one has it whole (K22), nothing lands after the download ended, and a failing local
write surfaces as the disk's error (K11)."""

from __future__ import annotations

import errno
import os
import resource
import signal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.storage import open_store
from shardkit.storage.download import DownloadCancelled, Downloader, DownloadOptions, _Part, _Sink
from shardkit.storage.pacing import Pacing

URL = "s3://bucket/blob"


def sink_on(path: Any, size: int) -> _Sink:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    os.ftruncate(fd, size)
    return _Sink(fd)


@settings(max_examples=40, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=64),
    cuts=st.lists(st.integers(1, 64), min_size=2, max_size=2),
    order=st.lists(st.booleans(), max_size=40),
)
def test_two_attempts_fill_a_part_and_none_writes_after_the_first_finished_k22(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, cuts: list[int], order: list[bool]
) -> None:
    """Two attempts deliver the part's bytes in pieces of their own size, interleaved in any
    order; the first to have written everything claims the part; from then on the other's
    writes are refused. The file holds the part's bytes."""
    path = tmp_path_factory.mktemp("part") / "file"
    sink = sink_on(path, len(data) + 2)
    part = _Part(sink, 1, 1 + len(data))
    offsets = [0, 0]
    winner: int | None = None
    for who in [int(b) for b in order] + [0] * len(data) + [1] * len(data):
        if offsets[who] == len(data):
            continue
        piece = data[offsets[who] : offsets[who] + cuts[who]]
        if winner is not None:
            with pytest.raises(DownloadCancelled):
                part.write(memoryview(piece), 1 + offsets[who], URL)
            continue
        part.write(memoryview(piece), 1 + offsets[who], URL)
        offsets[who] += len(piece)
        if offsets[who] == len(data):
            assert part.finish()
            winner = who
    assert not part.finish()  # claimed once only
    sink.close()
    assert path.read_bytes() == b"\0" + data + b"\0"


def test_nothing_is_written_once_the_download_ended_k22(tmp_path: Any) -> None:
    """A request still out when its download ended (a hedge's loser, a failed sibling part)
    must not write into whatever file now has its descriptor number."""
    sink = sink_on(tmp_path / "file", 8)
    part = _Part(sink, 0, 8)
    sink.close()
    other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)  # may reuse the number
    try:
        with pytest.raises(DownloadCancelled):
            part.write(memoryview(b"late"), 0, URL)
        assert os.pread(other, 8, 0) == b""
    finally:
        os.close(other)


def test_a_failed_local_write_is_raised_as_the_disks_own_error_k11(tmp_path: Any) -> None:
    """Past the file size limit ``pwrite`` fails with EFBIG: ``fetch`` raises that
    ``OSError`` (the cache turns it into "disk full"), not a store error naming the URL."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "blob").write_bytes(os.urandom(256 * 1024))
    target = tmp_path / "target"
    target.write_bytes(b"\0" * 256 * 1024)
    options = DownloadOptions(part_bytes=64 * 1024, parts_in_flight=2, hedge_after=None)
    downloader = Downloader(options, Pacing(2), None, lambda **_: None)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (128 * 1024, hard))
    try:
        with pytest.raises(OSError) as caught:
            downloader.fetch(open_store(str(tmp_path / "src")), "blob", str(target), 256 * 1024)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert caught.value.errno == errno.EFBIG
    assert type(caught.value) is OSError
