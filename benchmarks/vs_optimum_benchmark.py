"""Wall time per config against optimum-benchmark's inline launcher, on the same model directory.

optimum-benchmark pins its own transformers, so it lives in a venv of its own:

    python3 -m venv /tmp/obvenv && /tmp/obvenv/bin/pip install torch==2.13.0 \\
        && /tmp/obvenv/bin/pip install optimum-benchmark==0.6.0 transformers==4.57.6
    python benchmarks/vs_optimum_benchmark.py --ob-python /tmp/obvenv/bin/python --batch-sizes 1,4,16

The model (default bert-base-uncased, fp32, 128 tokens) is saved once from the catalog's config
with devicefit's seeded weights into a local directory that both tools load. Each config is run
by each tool as a user would: a fresh process (`devicefit benchmark --model DIR ...`, and a
Python process calling `Benchmark.launch` with `InlineConfig` and optimum-benchmark's default
inference scenario: 10 warm-up runs, then at least 10 iterations and 10 s), the process's wall
time taken from outside, alternating the two tools for --rounds rounds. A sweep of all batch
sizes in one process each is timed too (per config: its wall time / the number of configs).
Printed: per config, each tool's median wall time over rounds and the ratio (devicefit /
optimum-benchmark; the bar is 0.5), and each tool's p50 latency (median over its fresh
processes of the config) as a sanity check that they timed the same work. Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BAR = 0.5

OB_SCRIPT = """
import json, sys
from optimum_benchmark import Benchmark, BenchmarkConfig, InferenceConfig, InlineConfig, PyTorchConfig
from optimum_benchmark.logging_utils import setup_logging
setup_logging(level="ERROR")
model, sizes, seq = sys.argv[1], [int(b) for b in sys.argv[2].split(",")], int(sys.argv[3])
p50 = {}
for b in sizes:
    config = BenchmarkConfig(name=f"bs{b}", launcher=InlineConfig(),
                             scenario=InferenceConfig(input_shapes={"batch_size": b, "sequence_length": seq}),
                             backend=PyTorchConfig(model=model, device="cpu", task="feature-extraction"))
    report = Benchmark.launch(config)
    p50[b] = report.forward.latency.p50 * 1e3
print(json.dumps(p50))
"""


def save_model(name: str, directory: Path) -> None:
    from models.loading import build_model
    from models.resolve import resolve_model

    spec = resolve_model(name)
    model = build_model(spec)
    config = spec.build_config()
    # The class devicefit measures for the catalog entry (bert-base-uncased: BertModel), which is
    # also what optimum-benchmark's feature-extraction task loads. The shipped config names the
    # pretraining class (BertForMaskedLM): left in, devicefit would time the 30522-word MLM head
    # too (about 20% of bert-base's work at 128 tokens) and the two tools would time different models.
    config.architectures = [type(model).__name__]
    model.save_pretrained(directory)
    config.save_pretrained(directory)


def timed(cmd: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} ... failed ({out.returncode}): {out.stderr[-2000:]}")
    return wall, out.stdout


def run_devicefit(model_dir: Path, sizes: list[int], seq: int, extra: tuple[str, ...] | list[str] = ()) -> tuple[float, dict[int, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        wall, _ = timed([str(Path(sys.executable).parent / "devicefit"), "benchmark", "--model", str(model_dir),
                         "--batch-sizes", ",".join(map(str, sizes)), "--precision", "fp32", "--seq-length", str(seq),
                         "--json", str(out), *extra])
        rows = json.loads(out.read_text())["results"]
    for r in rows:
        print(f"    devicefit batch {r['batch_size']}: {r['status']}, {r.get('iterations')} samples ({r.get('stop_reason')}), "
              f"cv {_percent(r.get('cv'))}, others used {_percent(r.get('other_cpu_share'))} of the CPU", flush=True)
    return wall, {r["batch_size"]: r["p50_ms"] for r in rows if r["status"] == "ok"}


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def run_ob(ob_python: str, model_dir: Path, sizes: list[int], seq: int) -> tuple[float, dict[int, float]]:
    wall, stdout = timed([ob_python, "-c", OB_SCRIPT, str(model_dir), ",".join(map(str, sizes)), str(seq)])
    return wall, {int(k): v for k, v in json.loads(stdout.strip().splitlines()[-1]).items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ob-python", required=True, help="the Python of a venv with optimum-benchmark 0.6.0")
    ap.add_argument("--model", default="bert-base-uncased")
    ap.add_argument("--batch-sizes", default="1,4,16")
    ap.add_argument("--seq-length", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--devicefit-variant", action="append", default=[], metavar="ARGS",
                    help="also time `devicefit benchmark ARGS` as a tool of its own (e.g. \"--timing quick\": make run's "
                         "timing policy, or \"--ci-target 0.05\"); repeatable")
    args = ap.parse_args()
    variants = {"devicefit": []} | {f"devicefit {v}": shlex.split(v) for v in args.devicefit_variant}
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / args.model
        save_model(args.model, model_dir)
        tools = [*variants, "optimum-benchmark"]
        walls: dict[str, dict[int | str, list[float]]] = {t: {} for t in tools}
        p50s: dict[str, dict[int, list[float]]] = {t: {} for t in tools}
        for r in range(args.rounds):
            order = tools if r % 2 == 0 else tools[::-1]
            for b in [*sizes, "sweep"]:
                for tool in order:
                    batch = sizes if b == "sweep" else [b]
                    wall, p50 = (run_devicefit(model_dir, batch, args.seq_length, variants[tool]) if tool in variants
                                 else run_ob(args.ob_python, model_dir, batch, args.seq_length))
                    walls[tool].setdefault(b, []).append(wall / len(batch))
                    for size, v in p50.items() if b != "sweep" else ():  # the fresh processes' p50s: one figure per config run alone
                        p50s[tool].setdefault(size, []).append(v)
                    print(f"round {r + 1} {tool:30s} {'sweep ' + args.batch_sizes if b == 'sweep' else 'batch ' + str(b):14s} "
                          f"{wall:6.1f} s", flush=True)
    print(f"\n{args.model} fp32, {args.seq_length} tokens, median of {args.rounds} rounds; wall time per config "
          f"(a fresh process each; sweep: one process for all batch sizes, divided by {len(sizes)})")
    for tool in variants:
        print(f"\n{tool}")
        print(f"{'config':<16}{'devicefit':>11}{'opt.-bench':>12}{'ratio':>8}{'bar':>6}   p50 ms devicefit / optimum-benchmark")
        for b in [*sizes, "sweep"]:
            d, o = statistics.median(walls[tool][b]), statistics.median(walls["optimum-benchmark"][b])
            p50 = "" if b == "sweep" else f"   {statistics.median(p50s[tool][b]):.1f} / {statistics.median(p50s['optimum-benchmark'][b]):.1f}"
            label = f"batch {b}" if b != "sweep" else "sweep (per cfg)"
            print(f"{label:<16}{d:>10.1f}s{o:>11.1f}s{d / o:>8.2f}{'PASS' if d / o <= BAR else 'FAIL':>6}{p50}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
