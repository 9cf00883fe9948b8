"""Sizes no flag can hold and datasets that are not there are bad input (exit 2, one line), for
every size flag and variable alike (``shardkit.units.parse_size``) and for ``cache warm`` and
``bench`` as for ``verify`` (README: exit 2 for bad input)."""

from __future__ import annotations

import pytest

from shardkit.cli import main
from shardkit.loader.env import cache_settings
from shardkit.units import parse_size

MAX_SIZE = (1 << 63) - 1  # shardkit.units.MAX_SIZE: 8 EiB - 1, an int64 of bytes

HUGE = "1" + "0" * 400


@pytest.mark.parametrize("text", [HUGE, HUGE + "GiB", "9" * 41 + ".5KB", str(MAX_SIZE + 1), "8192PiB"])
def test_a_size_beyond_8_eib_is_a_value_error_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="too large") as caught:
        parse_size(text)
    assert len(str(caught.value)) < 200  # the 400 digits are not echoed back


def test_sizes_parse_exactly_up_to_the_cap() -> None:
    assert parse_size(str(MAX_SIZE)) == MAX_SIZE
    assert parse_size("0.1KiB") == 102 and parse_size("1.5GB") == 1_500_000_000
    assert parse_size("2.01MB") == 2_010_000  # float arithmetic said 2009999
    assert parse_size("0.5PiB") == 1024**5 // 2
    assert parse_size("0" * 50 + "1KiB") == 1024  # leading zeros are not "large"
    assert parse_size("0.00000000000000088817841970012523233890533447265625PiB") == 1  # 2**-50 PiB
    with pytest.raises(ValueError, match="too large"):
        parse_size(10**400)


@pytest.mark.parametrize("argv", [
    ["pack", ".", "out", "--shard-size", HUGE],
    ["pack", ".", "out", "--block-size", HUGE + "MiB"],
    ["cache", "warm", "missing", "--cache-limit", HUGE],
])
def test_every_size_flag_refuses_a_400_digit_size_with_exit_2(argv: list[str],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "too large" in err and "Traceback" not in err


def test_a_400_digit_shardkit_cache_limit_is_exit_2_for_warm_and_a_value_error_for_the_loader(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    monkeypatch.setenv("SHARDKIT_CACHE_LIMIT", HUGE)
    with pytest.raises(SystemExit) as caught:
        main(["cache", "warm", str(tmp_path), "--cache-dir", str(tmp_path)])
    assert caught.value.code == 2 and "--cache-limit" in capsys.readouterr().err
    with pytest.raises(ValueError, match="SHARDKIT_CACHE_LIMIT.*too large"):
        cache_settings(None, None)


@pytest.mark.parametrize("command", [["cache", "warm", "{d}", "--cache-dir", "{d}/cache", "--no-progress"],
                                     ["bench", "{d}", "--workers", "0", "--steps", "1"]])
def test_cache_warm_and_bench_without_a_manifest_exit_2_like_verify(
        command: list[str], tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [part.format(d=tmp_path) for part in command]
    assert main(argv) == 2
    assert "no manifest" in capsys.readouterr().err
    assert main(["verify", str(tmp_path)]) == 2  # the reference the README states
