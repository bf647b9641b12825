"""A throwaway Redis server for the fleet tests (the Celery broker): `redis-server` on 127.0.0.1
on a free port, nothing persisted (--save '' --appendonly no), its files in a temp directory; its
URL; stopped and removed afterwards.

The binary comes from Debian's `redis-server`, or DEVICEFIT_REDIS_SERVER, or PATH. Nothing is
installed here (that is `make fleet-deps`): without it the tests skip and say so."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

INSTALL_HINT = "run `make fleet-deps` (installs Debian's redis-server) or set DEVICEFIT_REDIS_SERVER to a redis-server binary"
START_TIMEOUT_S = 20.0


class RedisUnavailable(Exception):
    """No server can be started here; the message says why and what to do."""


def find_redis_server() -> str:
    for candidate in (os.environ.get("DEVICEFIT_REDIS_SERVER"), shutil.which("redis-server"), "/usr/bin/redis-server"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RedisUnavailable(f"no redis-server binary found: {INSTALL_HINT}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()  # redis-server exits at once on SIGTERM (nothing to save)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def running_redis() -> Iterator[str]:
    """Start a server, yield redis://127.0.0.1:<port>/0; stop it and remove its directory."""
    binary = find_redis_server()
    root = Path(tempfile.mkdtemp(prefix="devicefit-redis-"))
    proc: subprocess.Popen | None = None
    try:
        for attempt in range(3):  # the free port may be taken between choosing and binding it
            port = _free_port()
            log = root / f"server-{port}.log"
            proc = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
                                     "--dir", str(root), "--logfile", str(log), "--daemonize", "no"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline and proc.poll() is None and not _answers(port):
                time.sleep(0.1)
            if proc.poll() is None and _answers(port):
                break
            _stop(proc)
            if attempt == 2:
                raise RuntimeError(f"redis-server did not start; its log:\n{log.read_text()[-3000:] if log.exists() else '(none)'}")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A running throwaway server's URL (module-scoped); skips where no server can run."""
    try:
        find_redis_server()
    except RedisUnavailable as exc:
        pytest.skip(str(exc))
    with running_redis() as url:
        yield url
