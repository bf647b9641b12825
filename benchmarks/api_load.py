"""How fast does the API answer under concurrent clients? Starts `devicefit serve` on loopback
over a data directory with a published predictor, drives POST /hardware/select and
POST /performance/predict from N concurrent clients for a fixed time, and prints p50/p99
latency and requests/s per endpoint (target: p99 under 20 ms at 50 clients on 2 cores).

    python benchmarks/api_load.py [--benchmark-dir data] [--clients 50] [--seconds 10]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

BODIES = {
    "/hardware/select": {"model_name": "bert-base-uncased", "model_family": "embedding", "batch_size": 16,
                         "available_hardware": ["cpu", "cuda"]},
    "/performance/predict": {"model_name": "bert-base-uncased", "hardware": ["cuda", "cpu"], "batch_size": 16},
}


def post(base: str, path: str) -> float:
    data = json.dumps(BODIES[path]).encode()
    started = time.perf_counter()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{path}: HTTP {resp.status}")
    return (time.perf_counter() - started) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--benchmark-dir", default="data")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    root = Path(args.benchmark_dir).resolve()
    if not (root / "predictors" / "current.json").exists():
        print(f"no published predictor under {root}: run `make run` first", file=sys.stderr)
        return 1
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    exe = Path(sys.executable).with_name("devicefit")
    server = subprocess.Popen([str(exe), "serve", "--port", str(port), "--benchmark-dir", str(root)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    print("the server did not start", file=sys.stderr)
                    return 1
                time.sleep(0.2)
        for path in BODIES:
            post(base, path)  # warm: the first request loads the predictor and traces the model
        print(f"{args.clients} concurrent clients, {args.seconds:g} s per endpoint, server: 1 worker on 127.0.0.1")
        print(f"{'endpoint':<24}{'requests':>9}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
        for path in BODIES:
            latencies: list[float] = []
            errors = [0]
            stop = time.monotonic() + args.seconds
            lock = threading.Lock()

            def client() -> None:
                while time.monotonic() < stop:
                    try:
                        ms = post(base, path)
                        with lock:
                            latencies.append(ms)
                    except Exception:  # noqa: BLE001 - every failure is counted and reported
                        with lock:
                            errors[0] += 1

            threads = [threading.Thread(target=client) for _ in range(args.clients)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - t0
            q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
            print(f"{path:<24}{len(latencies):>9}{len(latencies) / elapsed:>9.1f}{q[49]:>9.1f}{q[98]:>9.1f}{errors[0]:>8}")
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
