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


@pytest.mark.parametrize("base_url, match", [
    ("file:///etc/passwd#", "must be an http:// or https:// URL"),  # read the file and quoted it in the error
    ("file:///tmp/answers.json#", "must be an http:// or https:// URL"),  # answered calls from a local file
    ("ftp://127.0.0.1", "must be an http:// or https:// URL"),
    ("127.0.0.1:8000", r"did you mean 'http://127\.0\.0\.1:8000'"),
    ("", "must be an http:// or https:// URL"),
    ("http://[::1", "is not a URL: Invalid IPv6 URL"),  # was a ValueError at the first call, read as a 4xx
    ("http://127.0.0.1:99999", "Port out of range"),
    ("http://127.0.0.1:8000/?debug=1", "query or fragment"),
])
def test_a_base_url_that_is_no_http_server_is_refused_when_the_client_is_made(base_url, match):
    with pytest.raises(ValueError, match=match):
        HardwareSelectionClient(base_url)


def test_the_client_never_answers_from_a_local_file(tmp_path):
    """urllib opens file:// URLs too: a file:// base URL answered detect_hardware() from a local file."""
    (tmp_path / "answers.json").write_text('{"hardware": {"cuda": true}}')
    with pytest.raises(ValueError, match="http:// or https://"):
        HardwareSelectionClient(f"file://{tmp_path}/answers.json#").detect_hardware()


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:8000", "HTTPS://example.org/", "http://[::1]:8000/api/"])
def test_an_http_base_url_is_kept_without_its_trailing_slash(base_url):
    assert HardwareSelectionClient(base_url).base_url == base_url.rstrip("/")
