"""The Python client against servers that misbehave (a raw socket on 127.0.0.1 answering what
each test scripts): every failure is the documented exception, ValueError for a 4xx and
RuntimeError otherwise, and keeps what the server said."""
from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from devicefit.client import HardwareSelectionClient


@contextlib.contextmanager
def scripted(answer: bytes | None) -> Iterator[str]:
    """A server that reads one request and sends `answer` (None: closes without a word; b"":
    never answers until the client gives up)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    done = threading.Event()

    def serve():
        conn, _ = sock.accept()
        conn.recv(65536)
        if answer == b"":
            done.wait(30)
        elif answer is not None:
            conn.sendall(answer)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        done.set()
        sock.close()


def _http(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


@pytest.mark.parametrize("answer, error, match", [
    (b"", RuntimeError, "did not answer within 1"),
    (None, RuntimeError, "connection failed"),
    (_http("200 OK", b"<html>proxy</html>", "text/html"), RuntimeError, "not JSON"),
    (_http("502 Bad Gateway", b"<html>upstream down</html>", "text/html"), RuntimeError, "502: Bad Gateway: <html>upstream down"),
    (_http("422 Unprocessable Entity", b'{"detail": "batch_size too big"}'), ValueError, "422: batch_size too big"),
    (_http("404 Not Found", b'{"status": "error", "message": "Unknown model x"}'), ValueError, "404: Unknown model x"),
], ids=["timeout", "dropped", "html-200", "html-502", "detail-422", "spec-404"])
def test_every_failure_is_the_documented_exception_with_what_the_server_said(answer, error, match):
    with scripted(answer) as base:
        with pytest.raises(error, match=match):
            HardwareSelectionClient(base, timeout=1).health()
