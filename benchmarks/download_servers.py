"""A fast local read-only HTTP endpoint for benchmarks/downloads.py: nginx when installed,
else the threaded Python server of tests/helpers/keepalive_s3.py.

``serve(root, kind, workdir)`` yields ``(endpoint_url, description)`` and stops the server on
exit. ``root`` holds ``<bucket>/<key>`` files, served path-style at ``/<bucket>/<key>`` with
``Range`` and ``HEAD`` (nginx does both for static files), on 127.0.0.1, keep-alive on. nginx
runs in the foreground (``daemon off``) from a config written into ``workdir``, as an argument
list, never through a shell.

HTTPS (``serve(..., tls=make_certificate(dir))``): nginx only, ``https://127.0.0.1:PORT``,
TLS 1.2 and 1.3, HTTP/1.1 only (no ``http2`` on the listener, so ALPN offers no h2), keep-alive
as for plain HTTP. ``make_certificate`` makes a fresh self-signed RSA 2048 certificate for
``IP:127.0.0.1`` with ``openssl req -x509``; its certificate file is the CA file clients trust,
so they verify the server as they would S3's. The endpoint is checked with that CA file (and
``tls_description`` reports the protocol and cipher a client gets) before it is yielded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from tests.helpers.s3 import free_port

_NGINX_CONF = """
daemon off;
worker_processes auto;
{user}
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port}{ssl};{tls}
        root {root};
        location / {{ limit_except GET {{ deny all; }} }}
    }}
}}
"""


# Only with a certificate. No ``http2``: this nginx's listener speaks HTTP/1.1 only unless told
# ``http2`` (and the ``http2 on|off`` directive does not exist before nginx 1.25.1).
_NGINX_TLS = """
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:bench:1m;"""


@dataclass(frozen=True)
class Certificate:
    """A self-signed server certificate: ``cert`` (also the CA file clients trust) and ``key``."""

    cert: str
    key: str


def find_openssl() -> str | None:
    return shutil.which("openssl")


def make_certificate(folder: str) -> Certificate:
    """A fresh self-signed RSA 2048 certificate for 127.0.0.1 (CN and ``subjectAltName``
    ``IP:127.0.0.1``), valid 2 days, into ``folder``; made by ``openssl req -x509``."""
    openssl = find_openssl()
    if openssl is None:
        raise RuntimeError("openssl not found: the HTTPS mode makes its certificate with it")
    os.makedirs(folder, exist_ok=True)
    cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    cmd = [
        openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2",
        "-keyout", key, "-out", cert, "-subj", "/CN=127.0.0.1",
        "-addext", "subjectAltName=IP:127.0.0.1",
        # a self-signed CA:TRUE certificate needs keyUsage where X509_STRICT is on (Python 3.13+)
        "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
        "-addext", "extendedKeyUsage=serverAuth",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0 or not os.path.exists(cert):
        raise RuntimeError(f"openssl req -x509 failed (exit {done.returncode}): {done.stderr.strip()[-1000:]}")
    os.chmod(key, 0o600)
    return Certificate(cert, key)


def tls_description(host: str, port: int, cafile: str) -> str:
    """The protocol and cipher a verifying client negotiates with ``host:port``."""
    context = ssl.create_default_context(cafile=cafile)
    with socket.create_connection((host, port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            cipher = tls.cipher()
            return f"{tls.version()} {cipher[0] if cipher else '?'}"


def nginx_config(work: str, port: int, root: str, tls: Certificate | None = None) -> str:
    """The config nginx runs from: ``root`` on 127.0.0.1:``port``, HTTPS given ``tls``."""
    user = "user root;" if os.geteuid() == 0 else ""  # as root, workers must still read the files
    tls_conf = "" if tls is None else _NGINX_TLS.format(cert=tls.cert, key=tls.key)
    return _NGINX_CONF.format(user=user, work=work, port=port, root=root, ssl="" if tls is None else " ssl",
                              tls=tls_conf)


def find_nginx() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def _wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 20.0,
                   context: ssl.SSLContext | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=1, context=context):
                return
        except urllib.error.HTTPError:
            return  # it answers (404 for the root is fine)
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLCertVerificationError):
                raise  # it answers, but not with the certificate made for it: no use waiting
            time.sleep(0.05)
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nginx did not answer at {url} (exit code {proc.poll()})")


@contextlib.contextmanager
def _nginx(binary: str, root: str, work: str, tls: Certificate | None = None) -> Iterator[tuple[str, str]]:
    port = free_port()
    conf = os.path.join(work, "nginx.conf")
    for folder in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(work, folder), exist_ok=True)
    with open(conf, "w") as fh:
        fh.write(nginx_config(work, port, root, tls))
    version = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False).stderr.strip()
    proc = subprocess.Popen([binary, "-c", conf, "-p", work], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        endpoint = f"{'http' if tls is None else 'https'}://127.0.0.1:{port}"
        context = None if tls is None else ssl.create_default_context(cafile=tls.cert)
        _wait_until_up(endpoint + "/", proc, context=context)
        yield endpoint, version.replace("nginx version: ", "")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def serve(root: str, kind: str, work: str, tls: Certificate | None = None) -> Iterator[tuple[str, str]]:
    """``kind``: "nginx", "python", or "auto" (nginx when found). ``tls``: serve HTTPS with
    that certificate, which only nginx does."""
    if tls is not None:
        if kind == "python":
            raise RuntimeError("HTTPS is served by nginx only, not by the Python server")
        kind = "nginx"
    binary = find_nginx() if kind in ("auto", "nginx") else None
    if kind == "nginx" and binary is None:
        if tls is not None:
            raise RuntimeError("nginx not found: HTTPS needs nginx (apt-get install nginx)")
        raise RuntimeError("nginx not found (apt-get install nginx), or use --server python")
    if binary is not None:
        with _nginx(binary, root, os.path.join(work, "nginx"), tls) as served:
            yield served
        return
    from tests.helpers.keepalive_s3 import KeepAliveS3Server

    with KeepAliveS3Server(root) as server:
        yield server.endpoint_url, "python-threaded (tests/helpers/keepalive_s3.py)"
