"""The HTTPS mode of benchmarks/downloads.py: nginx's generated config, the self-signed
certificate made by ``openssl req -x509``, and that clients verify the endpoint with it —
shardkit's direct body client (http_ranges.py, K23) with the certificate as its CA file, and
not without (benchmarks/download_servers.py). Skipped where nginx or openssl is missing."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from benchmarks.download_servers import (
    Certificate,
    find_nginx,
    find_openssl,
    make_certificate,
    nginx_config,
    serve,
    tls_description,
)
from shardkit.storage.http_ranges import stream_range


def test_plain_http_config_listens_without_tls(tmp_path: Path) -> None:
    conf = nginx_config(str(tmp_path), 8123, str(tmp_path / "root"))
    assert "listen 127.0.0.1:8123;" in conf
    assert "ssl" not in conf
    assert "keepalive_requests" in conf


def test_https_config_listens_with_tls_1_2_and_1_3_and_no_http2(tmp_path: Path) -> None:
    tls = Certificate(str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))
    conf = nginx_config(str(tmp_path), 8123, str(tmp_path / "root"), tls)
    assert "listen 127.0.0.1:8123 ssl;" in conf
    assert f"ssl_certificate {tls.cert};" in conf
    assert f"ssl_certificate_key {tls.key};" in conf
    assert "ssl_protocols TLSv1.2 TLSv1.3;" in conf
    assert "http2" not in conf
    assert "keepalive_timeout" in conf  # keep-alive as for plain HTTP


def test_python_server_refuses_https(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="nginx only"):
        with serve(str(tmp_path), "python", str(tmp_path), Certificate("c", "k")):
            pass


@pytest.mark.skipif(find_nginx() is None or find_openssl() is None, reason="needs nginx and openssl")
def test_https_endpoint_is_verified_with_the_certificate_made_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)  # the default trust store: not ours
    payload = os.urandom(300_000)
    (tmp_path / "serve" / "data").mkdir(parents=True)
    (tmp_path / "serve" / "data" / "blob").write_bytes(payload)
    tls = make_certificate(str(tmp_path / "tls"))
    assert os.stat(tls.key).st_mode & 0o077 == 0
    with serve(str(tmp_path / "serve"), "auto", str(tmp_path), tls) as (endpoint, _):
        assert endpoint.startswith("https://127.0.0.1:")
        port = int(endpoint.rsplit(":", 1)[1])
        assert tls_description("127.0.0.1", port, tls.cert).split()[0] in ("TLSv1.2", "TLSv1.3")
        got = bytearray(len(payload))

        def write(piece: memoryview, offset: int) -> None:
            got[offset - 1000 : offset - 1000 + len(piece)] = piece

        stream_range(f"{endpoint}/data/blob", 1000, len(payload), write, verify=tls.cert)
        assert bytes(got[: len(payload) - 1000]) == payload[1000:]
        with pytest.raises(ssl.SSLCertVerificationError):
            stream_range(f"{endpoint}/data/blob", 0, 10, write)  # default trust: the certificate is refused
