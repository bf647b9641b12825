"""`devicefit serve` on a free loopback port for the API benchmarks: started as a new process
(nothing imported, nothing traced), ready once /health answers, terminated on exit."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class ServerDidNotStart(RuntimeError):
    pass


@dataclass
class LocalServer:
    port: int
    process: subprocess.Popen
    startup_s: float  # from spawn until /health answered

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def published_root(benchmark_dir: str) -> Path | None:
    """The data directory, or None (said on stderr) when it holds no published predictor."""
    root = Path(benchmark_dir).resolve()
    if not (root / "predictors" / "current.json").exists():
        print(f"no published predictor under {root}: run `make run` first", file=sys.stderr)
        return None
    return root


@contextlib.contextmanager
def local_server(root: Path, *args: str, start_timeout_s: float = 60.0) -> Iterator[LocalServer]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    exe = Path(sys.executable).with_name("devicefit")
    spawned = time.perf_counter()
    process = subprocess.Popen([str(exe), "serve", "--port", str(port), "--benchmark-dir", str(root), *args],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    stderr = process.stderr.read() if process.poll() is not None else ""
                    raise ServerDidNotStart("the server did not start" + (f":\n{stderr}" if stderr else "")) from None
                time.sleep(0.1)
        yield LocalServer(port, process, time.perf_counter() - spawned)
    finally:
        process.terminate()
        process.wait(10)


async def read_response(reader) -> bytes:
    """Read one keep-alive HTTP/1.1 response from an asyncio stream; returns its status line."""
    status_line = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return status_line
