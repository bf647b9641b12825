"""A real API server on 127.0.0.1 for tests: uvicorn on a free port in a thread, started and
stopped by the caller, and a stdlib HTTP call that returns (status, JSON). Shared by the contract
tests and the fault suite (tests/faults), so both exercise the server the same way."""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator


@contextlib.contextmanager
def running(app, startup_timeout: float = 120.0) -> Iterator[str]:
    """Serves `app` (its lifespan included) until the block ends; yields the base URL."""
    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not srv.started:
        assert thread.is_alive(), "server failed to start"
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(10)


def call(base: str, path: str, body=None, raw: bytes | None = None, timeout: float = 120) -> tuple[int, dict]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, method="POST" if data is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
