"""How fast does the API answer under concurrent clients? Starts `devicefit serve` on loopback
over a data directory with a published predictor, drives POST /hardware/select and
POST /performance/predict from N concurrent keep-alive clients for a fixed time, and prints p50,
p99 latency and requests/s per endpoint (target: p99 under 20 ms at 50 clients on 2 cores).

The clients are asyncio connections in one separate process (`--client-procs` to spread them),
so the load generator costs little CPU; on a 2-core machine it still shares the cores with the
server, which the printed figures include.

    python benchmarks/api_load.py [--benchmark-dir data] [--clients 50] [--seconds 10] [--workers 1]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from local_server import ServerDidNotStart, local_server, published_root, read_response  # noqa: E402

BODIES = {
    "/hardware/select": {"model_name": "bert-base-uncased", "model_family": "embedding", "batch_size": 16,
                         "available_hardware": ["cpu", "cuda"]},
    "/performance/predict": {"model_name": "bert-base-uncased", "hardware": ["cuda", "cpu"], "batch_size": 16},
}


async def _client(port: int, path: str, stop: float, latencies: list[float], errors: list[int]) -> None:
    body = json.dumps(BODIES[path]).encode()
    request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < stop:
            started = time.perf_counter()
            writer.write(request)
            status_line = await read_response(reader)
            if b" 200 " not in status_line:
                errors[0] += 1
                continue
            latencies.append((time.perf_counter() - started) * 1e3)
    except (OSError, asyncio.IncompleteReadError):
        errors[0] += 1
    finally:
        writer.close()


def _drive(port: int, path: str, clients: int, seconds: float, out) -> None:
    latencies: list[float] = []
    errors = [0]

    async def main() -> None:
        stop = time.monotonic() + seconds
        await asyncio.gather(*(_client(port, path, stop, latencies, errors) for _ in range(clients)))

    asyncio.run(main())
    out.put((latencies, errors[0]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--benchmark-dir", default="data")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--client-procs", type=int, default=1, help="processes the clients are spread over")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=1, help="server worker processes")
    ap.add_argument("--cache-size", type=int, default=4096, help="server answer cache (0: every request computed)")
    args = ap.parse_args()
    root = published_root(args.benchmark_dir)
    if root is None:
        return 1
    try:
        with local_server(root, "--workers", str(args.workers), "--cache-size", str(args.cache_size)) as server:
            for path, body in BODIES.items():  # warm every worker: the first request loads the predictor
                for _ in range(4 * args.workers):
                    req = urllib.request.Request(server.base + path, data=json.dumps(body).encode(),
                                                 headers={"Content-Type": "application/json"})
                    urllib.request.urlopen(req, timeout=60).read()
            print(f"{args.clients} concurrent keep-alive clients in {args.client_procs} process(es), {args.seconds:g} s per endpoint, "
                  f"server: {args.workers} worker(s) on 127.0.0.1, answer cache {args.cache_size or 'off'}, "
                  f"{os.cpu_count()} CPU cores shared by both")
            print(f"{'endpoint':<24}{'requests':>9}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
            for path in BODIES:
                out = mp.Queue()
                shares = [args.clients // args.client_procs + (i < args.clients % args.client_procs) for i in range(args.client_procs)]
                procs = [mp.Process(target=_drive, args=(server.port, path, n, args.seconds, out)) for n in shares if n]
                t0 = time.perf_counter()
                for p in procs:
                    p.start()
                results = [out.get() for _ in procs]
                for p in procs:
                    p.join()
                elapsed = time.perf_counter() - t0
                latencies = [ms for lat, _ in results for ms in lat]
                errors = sum(e for _, e in results)
                q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
                print(f"{path:<24}{len(latencies):>9}{len(latencies) / elapsed:>9.1f}{q[49]:>9.1f}{q[98]:>9.1f}{errors:>8}")
    except ServerDidNotStart as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
