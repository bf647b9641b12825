"""Does a freshly started API survive 50 concurrent clients, and how fast is it from the first
request on? Issue 21: on a cold server, overlapping requests broke tracing for good (500s) and
the first request per model took 0.3-5.5 s.

Starts `devicefit serve` on loopback (a new process: nothing imported, nothing traced), times its
start-up (until /health answers), then at once drives N concurrent keep-alive clients for a fixed
time over a mix of endpoints (/hardware/select, /performance/predict, /training/distributed,
/analysis/model, /hardware/batch), catalog models, batch sizes, modes and sequence lengths. It
prints, per endpoint: requests, 5xx, other non-200 answers, p50/p99 latency and requests/s; and
per model the latency of the first request that named it after start-up (under the same load).

The clients are asyncio connections in one separate process, so the load generator costs little
CPU; on a small machine it still shares the cores with the server, which the figures include.

    python benchmarks/api_cold_concurrency.py [--benchmark-dir data] [--clients 50] [--seconds 60] [--no-warm-up]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from local_server import ServerDidNotStart, local_server, published_root, read_response  # noqa: E402

MODELS = ("bert-tiny", "bert-base-uncased", "all-MiniLM-L6-v2", "distilbert-base-uncased", "roberta-base", "gpt2", "gpt2-medium",
          "qwen2.5-0.5b", "t5-small", "vit-base-patch16-224", "resnet-50", "mobilenet-v2", "efficientnet-b0", "convnext-tiny",
          "whisper-tiny", "wav2vec2-base", "clip-vit-base-patch32")
TEXT_MODELS = {"bert-tiny", "bert-base-uncased", "all-MiniLM-L6-v2", "distilbert-base-uncased", "roberta-base", "gpt2", "gpt2-medium",
               "qwen2.5-0.5b", "t5-small"}
BATCH_SIZES = (1, 2, 4, 8, 16, 32)


def request_mix(count: int, seed: int) -> list[tuple[str, str, dict]]:
    """(endpoint, model, body) requests in a fixed pseudo-random order: every endpoint, model,
    batch size and mode, and a few non-default sequence lengths (which need a trace at request time)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        model = rng.choice(MODELS)
        batch = rng.choice(BATCH_SIZES)
        mode = rng.choice(("inference", "training"))
        seq = rng.choice((None, None, None, 64, 256)) if model in TEXT_MODELS else None
        endpoint = rng.choices(("/hardware/select", "/performance/predict", "/training/distributed", "/analysis/model", "/hardware/batch"),
                               weights=(4, 4, 1, 1, 1))[0]
        if endpoint == "/hardware/select":
            body = {"model_name": model, "batch_size": batch, "mode": mode, "sequence_length": seq}
        elif endpoint == "/performance/predict":
            body = {"model_name": model, "batch_size": batch, "mode": mode, "sequence_length": seq, "hardware": ["cpu", "cuda"]}
        elif endpoint == "/training/distributed":
            body = {"model_name": model, "batch_size": batch, "gpu_count": rng.choice((1, 2, 8)), "sequence_length": seq}
        elif endpoint == "/analysis/model":
            body = {"model_name": model, "batch_sizes": sorted({1, batch})}
        else:
            body = {"models": [{"name": m} for m in rng.sample(MODELS, 3)], "batch_size": batch, "mode": mode}
            model = body["models"][0]["name"]
        out.append((endpoint, model, {k: v for k, v in body.items() if v is not None}))
    return out


async def _client(port: int, mix: list, offset: int, stop: float, t0: float, records: list) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = offset
    try:
        while time.monotonic() < stop:
            endpoint, model, body = mix[i % len(mix)]
            i += 1
            payload = json.dumps(body).encode()
            started = time.perf_counter()
            writer.write((f"POST {endpoint} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload)
            status_line = await read_response(reader)
            status = int(status_line.split()[1]) if len(status_line.split()) > 1 else 0
            records.append((endpoint, model, status, (time.perf_counter() - started) * 1e3, started - t0))
    except (OSError, asyncio.IncompleteReadError, ValueError):
        records.append(("(connection)", "", 0, 0.0, 0.0))
    finally:
        writer.close()


def _drive(port: int, clients: int, seconds: float, seed: int, out) -> None:
    records: list = []
    mix = request_mix(2000, seed)

    async def main() -> None:
        t0 = time.perf_counter()
        stop = time.monotonic() + seconds
        await asyncio.gather(*(_client(port, mix, 37 * c, stop, t0, records) for c in range(clients)))

    asyncio.run(main())
    out.put(records)


def _report(records: list, elapsed: float) -> None:
    print(f"\n{'endpoint':<24}{'requests':>9}{'5xx':>6}{'other':>7}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}")
    for endpoint in sorted({r[0] for r in records}):
        mine = [r for r in records if r[0] == endpoint]
        ok = [r[3] for r in mine if r[2] == 200]
        q = statistics.quantiles(ok, n=100) if len(ok) > 1 else [ok[0] if ok else float("nan")] * 99
        print(f"{endpoint:<24}{len(mine):>9}{sum(500 <= r[2] < 600 for r in mine):>6}"
              f"{sum(r[2] != 200 and not 500 <= r[2] < 600 for r in mine):>7}{len(mine) / elapsed:>8.1f}{q[49]:>9.1f}{q[98]:>9.1f}")
    firsts = {}
    for endpoint, model, status, ms, sent in sorted(records, key=lambda r: r[4]):
        if model and model not in firsts:
            firsts[model] = (endpoint, status, ms, sent)
    print(f"\nfirst request per model after start-up (under the load above)\n{'model':<26}{'sent at s':>10}{'ms':>9}  endpoint (status)")
    for model, (endpoint, status, ms, sent) in sorted(firsts.items(), key=lambda kv: kv[1][3]):
        print(f"{model:<26}{sent:>10.2f}{ms:>9.1f}  {endpoint} ({status})")
    errors = [r for r in records if r[2] >= 500 or r[2] == 0]
    if errors:
        print(f"\n{len(errors)} request(s) failed with a 5xx or a broken connection")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--benchmark-dir", default="data", help="data directory with a published predictor")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--no-warm-up", action="store_true", help="serve without preparing every model at start-up")
    args = ap.parse_args()
    root = published_root(args.benchmark_dir)
    if root is None:
        return 1
    try:
        with local_server(root, "--cache-size", "0", *(["--no-warm-up"] if args.no_warm_up else []), start_timeout_s=600) as server:
            print(f"server start-up (spawn until /health answers): {server.startup_s:.1f} s, "
                  f"{'without' if args.no_warm_up else 'with'} preparing every model; answer cache off")
            print(f"{args.clients} concurrent keep-alive clients for {args.seconds:g} s, {os.cpu_count()} CPU cores shared by "
                  f"server and clients")
            out = mp.Queue()
            proc = mp.Process(target=_drive, args=(server.port, args.clients, args.seconds, args.seed, out))
            t0 = time.perf_counter()
            proc.start()
            records = out.get()
            proc.join()
            _report(records, time.perf_counter() - t0)
            return 1 if any(r[2] >= 500 or r[2] == 0 for r in records) else 0
    except ServerDidNotStart as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
