"""Does devicefit's generation scenario time what a user's own `model.generate` loop times?

Compares, across processes, a bare loop in a plain Python process (build the same model with the
same seeded weights, the same prompt, `model.generate(..., max_new_tokens=N, min_new_tokens=N,
do_sample=False)` under `torch.inference_mode()`, `perf_counter` around each request, nothing
else) with the production path: `run_sweep` with a generation config, which starts the worker,
times every token through a logits processor and runs the harness's policy.

Each side runs in its own fresh process, in ABBA order over --rounds rounds, per model and batch
size. A request on this kind of machine varies by +-10% from one to the next in the same process
(a shared VM), so the ratio is taken over the pooled requests of all rounds: the median of
devicefit's timed requests over the median of the bare loop's (bar: within 5%), with a 95%
bootstrap interval (requests resampled within each side) printed beside it, and the median of
the per-round p50 ratios as a second view. Also printed: devicefit's TTFT, TPOT and decode
tokens/s beside the same model's forward-pass rate (`forward_tokens_per_s`, one pass over the
prompt), the figure the old `tokens_per_s` was.

    python benchmarks/generation_vs_bare.py --models gpt2,qwen2.5-0.5b,t5-small --batch-sizes 1,4

Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RATIO_BAR = 0.05


def bare_loop(model_name: str, batch_size: int, prompt: int | None, new: int, requests: int) -> dict:
    """The bare side, in its own process (`--bare`): a user's plain generate() loop."""
    import torch

    from models.inputs import input_signature
    from models.loading import build_model
    from models.resolve import resolve_model
    from models.tensors import make_inputs

    spec = resolve_model(model_name)
    model = build_model(spec)
    inputs = make_inputs(input_signature(spec, batch_size, prompt, None, None), "cpu")
    inputs.pop("decoder_input_ids", None)
    eos = model.generation_config.eos_token_id
    pad = model.generation_config.pad_token_id
    pad = pad if pad is not None else (eos[0] if isinstance(eos, list) else eos) or 0
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, num_beams=1, pad_token_id=pad)
    if model.config.is_encoder_decoder and model.generation_config.decoder_start_token_id is None:
        kw["decoder_start_token_id"] = getattr(model.config, "decoder_start_token_id", None) or pad  # T5 starts from its padding token
    samples = []
    with torch.inference_mode():
        for _ in range(2):
            model.generate(**inputs, **kw)
        for _ in range(requests):
            t0 = time.perf_counter_ns()
            out = model.generate(**inputs, **kw)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
    return {"samples_ms": samples, "generated": int(out.shape[-1])}


def call_path(model_name: str, batch_size: int, prompt: int | None, new: int, pairs: int) -> dict:
    """Both calls in one process on one model (`--call-path`): the bare generate() and the torch
    backend's own timed step (its GenerationConfig, the token timer as a logits processor),
    alternated ABBA. What differs between processes (start, allocator, neighbours) cannot show
    here, so a gap is the call path's own cost."""
    from benchmark_runners import registry
    from benchmark_runners.records import BenchmarkConfig
    from benchmark_runners.timers import HostClock
    from models.inputs import input_signature
    from models.resolve import resolve_model
    from models.tensors import make_inputs

    spec = resolve_model(model_name)
    backend = registry.backend("torch")
    prepared = backend.prepare(spec, BenchmarkConfig(model_name, batch_size=batch_size, mode="generation", seq_length=prompt,
                                                     new_tokens=new))
    inputs = make_inputs(input_signature(spec, batch_size, prompt, None, None), "cpu", prepared.input_float_dtype)
    step, clock = backend.make_step(prepared, inputs), HostClock()
    model, config = prepared.handle, prepared.state.generation
    plain = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, num_beams=1, pad_token_id=config.pad_token_id)
    if config.decoder_start_token_id is not None:
        kw["decoder_start_token_id"] = config.decoder_start_token_id
    sides = {"bare": lambda: model.generate(**plain, **kw), "devicefit": lambda: step.run(clock)}
    samples: dict[str, list[float]] = {"bare": [], "devicefit": []}
    with backend.measurement_context(prepared):
        for name in ("bare", "devicefit", "bare", "devicefit"):  # warm-up
            sides[name]()
        for i in range(pairs):
            for name in (("bare", "devicefit") if i % 2 == 0 else ("devicefit", "bare")):
                t0 = time.perf_counter_ns()
                sides[name]()
                samples[name].append((time.perf_counter_ns() - t0) / 1e6)
    return samples


def pooled_ratio(ours: list[float], bare: list[float], resamples: int = 2000) -> tuple[float, float, float]:
    """median(ours) / median(bare) and its 95% bootstrap interval (each side resampled on its own)."""
    rng = random.Random(0)
    boot = sorted(statistics.median(rng.choices(ours, k=len(ours))) / statistics.median(rng.choices(bare, k=len(bare)))
                  for _ in range(resamples))
    return statistics.median(ours) / statistics.median(bare), boot[int(0.025 * resamples)], boot[int(0.975 * resamples) - 1]


def run_bare(model: str, batch: int, prompt: int | None, new: int, requests: int) -> dict:
    cmd = [sys.executable, __file__, "--bare", "--models", model, "--batch-sizes", str(batch), "--new-tokens", str(new),
           "--requests", str(requests)]
    if prompt:
        cmd += ["--prompt-tokens", str(prompt)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_devicefit(model: str, batch: int, prompt: int | None, new: int, max_time: float, mode: str = "generation"):
    from benchmark_runners.harness import TimingPolicy
    from benchmark_runners.records import BenchmarkConfig
    from benchmark_runners.sweep import run_sweep

    config = BenchmarkConfig(model, batch_size=batch, mode=mode, seq_length=prompt,
                             new_tokens=new if mode == "generation" else None, policy=TimingPolicy(max_time_s=max_time))
    (row,) = run_sweep([config])
    if row.status != "ok":
        raise SystemExit(f"devicefit did not measure {model} batch {batch} ({mode}): {row.error}")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2,qwen2.5-0.5b,t5-small")
    ap.add_argument("--batch-sizes", default="1,4")
    ap.add_argument("--prompt-tokens", type=int, default=None, help="default: the scenario's 256")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=None, help="bare requests (default: as many as devicefit timed)")
    ap.add_argument("--max-time", type=float, default=30.0, help="devicefit's timing cap per config, seconds")
    ap.add_argument("--samples-out", type=Path, default=None, help="write every round's request samples (JSON) here, to pool runs")
    ap.add_argument("--call-path", type=int, default=0, metavar="PAIRS",
                    help="instead: in one process, alternate PAIRS bare generate() calls with the torch backend's timed "
                         "step on the same model (the call path's own cost, without what differs between processes)")
    ap.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    models = args.models.split(",")
    kept: list[dict] = []
    batches = [int(b) for b in args.batch_sizes.split(",")]
    from benchmark_runners.generation import request_shape
    from models.resolve import resolve_model

    if args.bare:
        shape = request_shape(resolve_model(models[0]), args.prompt_tokens, args.new_tokens)
        print(json.dumps(bare_loop(models[0], batches[0], shape.signature_seq_length, args.new_tokens, args.requests or 10)))
        return 0

    if args.call_path:
        for model in models:
            shape = request_shape(resolve_model(model), args.prompt_tokens, args.new_tokens)
            for batch in batches:
                got = call_path(model, batch, shape.signature_seq_length, args.new_tokens, args.call_path)
                ratio, low, high = pooled_ratio(got["devicefit"], got["bare"])
                pairs = statistics.median(d / b for d, b in zip(got["devicefit"], got["bare"]))
                print(f"==> {model} bs {batch}, one process, {args.call_path} pairs: request p50 devicefit's step "
                      f"{statistics.median(got['devicefit']):.1f} ms, bare generate() {statistics.median(got['bare']):.1f} ms, "
                      f"ratio {ratio:.4f} (95% interval {low:.3f}-{high:.3f}; median of the pair ratios {pairs:.4f})", flush=True)
                kept.append({"model": model, "batch": batch, "call_path": got})
                if args.samples_out:
                    args.samples_out.write_text(json.dumps(kept))
        return 0
    failures = 0
    for model in models:
        shape = request_shape(resolve_model(model), args.prompt_tokens, args.new_tokens)
        for batch in batches:
            rounds, rows, ours, theirs = [], [], [], []
            for i in range(args.rounds):
                if i % 2 == 0:  # ABBA
                    row = run_devicefit(model, batch, shape.signature_seq_length, args.new_tokens, args.max_time)
                    bare = run_bare(model, batch, shape.signature_seq_length, args.new_tokens, args.requests or row.iterations)
                else:
                    bare = run_bare(model, batch, shape.signature_seq_length, args.new_tokens, args.requests or rows[-1].iterations)
                    row = run_devicefit(model, batch, shape.signature_seq_length, args.new_tokens, args.max_time)
                rows.append(row)
                kept.append({"model": model, "batch": batch, "round": i + 1, "devicefit_ms": row.samples_ms, "bare_ms": bare["samples_ms"]})
                if args.samples_out:
                    args.samples_out.write_text(json.dumps(kept))
                ours += row.samples_ms
                theirs += bare["samples_ms"]
                rounds.append((row.p50_ms, statistics.median(bare["samples_ms"])))
                print(f"{model} bs {batch} round {i + 1}: devicefit p50 {row.p50_ms:.1f} ms (n {row.iterations}, {row.stop_reason}, "
                      f"others {row.other_cpu_share:.1%}), bare p50 {rounds[-1][1]:.1f} ms (n {len(bare['samples_ms'])})", flush=True)
            ratio, low, high = pooled_ratio(ours, theirs)
            per_round = statistics.median(d / b for d, b in rounds)
            forward = run_devicefit(model, batch, shape.signature_seq_length, args.new_tokens, args.max_time, "inference")
            last = rows[-1]
            ok = abs(ratio - 1) <= RATIO_BAR
            failures += not ok
            prompt = f"prompt {shape.prompt_tokens}" if shape.prompt_tokens else "audio prompt"
            prefill = f"{last.prefill_tokens_per_s:.0f}" if last.prefill_tokens_per_s else "-"
            fwd = f"{forward.forward_tokens_per_s:.0f}" if forward.forward_tokens_per_s else "-"
            print(f"==> {model} bs {batch} ({prompt}, {args.new_tokens} new, fp32): TTFT {last.ttft_ms:.1f} ms, "
                  f"TPOT p50 {last.tpot_p50_ms:.2f} ms (p90 {last.tpot_p90_ms:.2f}), decode {last.decode_tokens_per_s:.1f} tok/s, "
                  f"prefill {prefill} tok/s, forward pass {fwd} tok/s (forward_tokens_per_s, p50 {forward.p50_ms:.1f} ms), "
                  f"KV cache {last.kv_cache_bytes / 2**20:.1f} MiB, peak RSS {last.peak_rss_bytes / 2**20:.0f} MiB; "
                  f"request p50 devicefit/bare {ratio:.4f} ({100 * (ratio - 1):+.2f}%, 95% interval {low:.3f}-{high:.3f}, "
                  f"{len(ours)} vs {len(theirs)} requests; median of the round ratios {per_round:.4f}; bar ±{RATIO_BAR:.0%}): "
                  f"{'PASS' if ok else 'FAIL'}\n", flush=True)
    return 0 if not failures else 2


if __name__ == "__main__":
    sys.exit(main())
