"""A fast local read-only HTTP endpoint for benchmarks/downloads.py: nginx when installed,
else the threaded Python server of tests/helpers/keepalive_s3.py.

``serve(root, kind, workdir)`` yields ``(endpoint_url, description)`` and stops the server on
exit. ``root`` holds ``<bucket>/<key>`` files, served path-style at ``/<bucket>/<key>`` with
``Range`` and ``HEAD`` (nginx does both for static files), on 127.0.0.1, keep-alive on. nginx
runs in the foreground (``daemon off``) from a config written into ``workdir``, as an argument
list, never through a shell.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator

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
        listen 127.0.0.1:{port};
        root {root};
        location / {{ limit_except GET {{ deny all; }} }}
    }}
}}
"""


def find_nginx() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def _wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answers (404 for the root is fine)
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nginx did not answer at {url} (exit code {proc.poll()})")


@contextlib.contextmanager
def _nginx(binary: str, root: str, work: str) -> Iterator[tuple[str, str]]:
    port = free_port()
    conf = os.path.join(work, "nginx.conf")
    for folder in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(work, folder), exist_ok=True)
    user = "user root;" if os.geteuid() == 0 else ""  # as root, workers must still read the files
    with open(conf, "w") as fh:
        fh.write(_NGINX_CONF.format(user=user, work=work, port=port, root=root))
    version = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False).stderr.strip()
    proc = subprocess.Popen([binary, "-c", conf, "-p", work], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        _wait_until_up(endpoint + "/", proc)
        yield endpoint, version.replace("nginx version: ", "")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def serve(root: str, kind: str, work: str) -> Iterator[tuple[str, str]]:
    """``kind``: "nginx", "python", or "auto" (nginx when found)."""
    binary = find_nginx() if kind in ("auto", "nginx") else None
    if kind == "nginx" and binary is None:
        raise RuntimeError("nginx not found (apt-get install nginx), or use --server python")
    if binary is not None:
        with _nginx(binary, root, os.path.join(work, "nginx")) as served:
            yield served
        return
    from tests.helpers.keepalive_s3 import KeepAliveS3Server

    with KeepAliveS3Server(root) as server:
        yield server.endpoint_url, "python-threaded (tests/helpers/keepalive_s3.py)"
