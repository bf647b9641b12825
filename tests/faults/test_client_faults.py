"""The Python client against servers that misbehave (a raw socket on 127.0.0.1 answering what
each test scripts): every failure is the documented exception, ValueError for a 4xx and
RuntimeError otherwise, and keeps what the server said."""
from __future__ import annotations

import contextlib
import re
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


@contextlib.contextmanager
def answering(answers: dict[tuple[str, str], tuple[int, dict[str, str], bytes]]) -> Iterator[tuple[str, list]]:
    """A real HTTP server on 127.0.0.1 answering {(method, path): (status, headers, body)}, anything
    else 405; yields its base URL and the (method, path) of every request it got."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append((self.command, self.path))
            status, headers, body = answers.get((self.command, self.path), (405, {}, b'{"detail": "Method Not Allowed"}'))
            self.send_response(status)
            for key, value in {**headers, "Content-Type": "application/json", "Content-Length": str(len(body))}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("elsewhere", ["/v2/hardware/select", "http://127.0.0.2:9/hardware/select"])
def test_a_redirected_call_is_an_error_naming_the_status_and_the_location_not_a_405(status, elsewhere):
    """A POST answered 301 or 302 was re-sent by urllib as a GET to the new address and ended as
    its "405: Method Not Allowed" (a 307 or 308 as the bare reason); a GET was followed to any
    host. No redirect is followed: the error says which status pointed where."""
    with answering({("POST", "/hardware/select"): (status, {"Location": elsewhere}, b""),
                    ("GET", "/health"): (status, {"Location": elsewhere.replace("select", "health")}, b"")}) as (base, seen):
        client = HardwareSelectionClient(base, timeout=5)
        target = elsewhere if elsewhere.startswith("http") else base + elsewhere
        with pytest.raises(RuntimeError, match=rf"{base}/hardware/select answered {status} .*, a redirect to "
                                               rf"'{re.escape(target)}': the client follows no redirect"):
            client.select_hardware("bert-tiny")
        with pytest.raises(RuntimeError, match=rf"/health answered {status} .*a redirect to '{re.escape(target.replace('select', 'health'))}'"):
            client.health()
    assert seen == [("POST", "/hardware/select"), ("GET", "/health")]  # nothing re-sent anywhere


@pytest.mark.parametrize("call, path, answer, match", [
    ("detect_hardware", "/hardware/detect", b'{"status": "success"}',
     r"'hardware' should be an object of hardware kinds to true or false, it is missing \(the answer's keys: \['status'\]\)"),
    ("detect_hardware", "/hardware/detect", b'{"hardware": ["cpu"]}', r"'hardware' should be an object .*got \['cpu'\]"),
    ("detect_hardware", "/hardware/detect", b"[1, 2]", r"expected an object, got \[1, 2\]"),
    ("get_optimal_device", "/hardware/select", b'{"primary_recommendation": "cpu"}',
     r"'fallback_options' should be a list of hardware kinds, it is missing"),
    ("get_optimal_device", "/hardware/select", b'{"primary_recommendation": "tpu", "fallback_options": 5}',
     r"'fallback_options' should be a list of hardware kinds, got 5"),
    ("get_optimal_device", "/hardware/select", b'{"fallback_options": ["cpu"]}', r"'primary_recommendation' should be a hardware kind"),
    ("select_hardware", "/hardware/select", b"null", "expected an object, got None"),
    ("health", "/health", b'"ok"', "expected an object, got 'ok'"),
])
def test_an_answer_of_the_wrong_shape_is_an_error_naming_the_endpoint_and_what_was_missing(call, path, answer, match):
    """A 200 whose JSON was not the endpoint's answer ended as a KeyError or TypeError inside the
    client (detect_hardware, get_optimal_device), or was handed back as if it were one."""
    method = "GET" if path in ("/health", "/hardware/detect") else "POST"
    with answering({(method, path): (200, {}, answer)}) as (base, _):
        client = HardwareSelectionClient(base, timeout=5)
        with pytest.raises(RuntimeError, match=rf"{re.escape(base + path)} answered JSON of the wrong shape: {match}"):
            getattr(client, call)(*(["bert-tiny"] if method == "POST" else []))
