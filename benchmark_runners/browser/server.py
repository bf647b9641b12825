"""The local static server the measuring page is loaded from.

It binds 127.0.0.1 only (an ephemeral port) and serves three things: the page itself
(`web/page.html`, `web/page.js`), onnxruntime-web from the `npm ci` install beside them, and the
files the backend publishes one by one (an exported model, an input tensor) under unguessable
URLs. Nothing else on the disk is reachable: a request names a published file or a file inside
the two asset directories, and anything resolving outside them is a 404.

Every response carries COOP/COEP headers, so the page is cross-origin isolated: onnxruntime-web's
wasm threads need SharedArrayBuffer, and performance.now() is then precise to 5 us instead of
100 us.
"""
from __future__ import annotations

import functools
import http.server
import secrets
import threading
from pathlib import Path

WEB_DIR = Path(__file__).resolve().parent / "web"
ORT_DIST = WEB_DIR / "node_modules" / "onnxruntime-web" / "dist"
HOST = "127.0.0.1"
PAGE_FILES = ("/page.html", "/page.js")
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
         ".onnx": "application/octet-stream", ".bin": "application/octet-stream", ".map": "application/json"}


class _Handler(http.server.BaseHTTPRequestHandler):
    def __init__(self, *args, server_state: "StaticServer", **kwargs):
        self.state = server_state
        super().__init__(*args, **kwargs)

    def log_message(self, *args) -> None:  # the worker's stdout is its protocol; stderr stays quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.state.resolve(self.path.split("?", 1)[0])
        if path is None:
            self.send_error(404, "not served")
            return
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", TYPES.get(path.suffix, "application/octet-stream"))
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)


class StaticServer:
    """A threaded HTTP server on 127.0.0.1:<ephemeral> serving the page, onnxruntime-web and
    published files only."""

    def __init__(self) -> None:
        self.published: dict[str, Path] = {}
        self.lock = threading.Lock()
        handler = functools.partial(_Handler, server_state=self)
        self.httpd = http.server.ThreadingHTTPServer((HOST, 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="devicefit-browser-server", daemon=True)
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.httpd.server_address[:2]

    @property
    def origin(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def publish(self, path: Path, suffix: str | None = None) -> str:
        """Serve one file under a fresh unguessable URL; returns the URL."""
        token = secrets.token_urlsafe(16)
        name = f"/files/{token}{suffix if suffix is not None else Path(path).suffix}"
        with self.lock:
            self.published[name] = Path(path)
        return self.origin + name

    def withdraw(self, url: str) -> None:
        with self.lock:
            self.published.pop(url.removeprefix(self.origin), None)

    def resolve(self, url_path: str) -> Path | None:
        with self.lock:
            if url_path in self.published:
                return self.published[url_path]
        if url_path in PAGE_FILES:
            return WEB_DIR / url_path.lstrip("/")
        if url_path.startswith("/ort/"):
            candidate = (ORT_DIST / url_path[len("/ort/"):]).resolve()
            if candidate.is_file() and candidate.is_relative_to(ORT_DIST.resolve()):
                return candidate
        return None

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
