"""What a timing policy costs and what it buys, from samples already measured: every `ok` row of
the given landing files (or a directory of them) is replayed through the harness's own
`measure()` under each policy, its iterations lasting exactly what they lasted on the machine
that recorded them (the caps run on a virtual clock). Printed per policy: the time the timed
work would take (first call, warm-up, samples), and how far each row's p50 moves from the p50
of the whole record (median, 90th percentile and worst), with the share of rows whose new p50
stays inside the record's own 95% CI.

    python benchmarks/stopping_replay.py data/raw ../shared/datasets/xeon-spr-2c \\
        --policy max_time_s=8,warmup_max_time_s=3 --policy max_time_s=4,warmup_max_time_s=1.5

A policy that would need more iterations than a row recorded cannot be replayed on that row:
it is counted as `past the record` (its own stop reason), its recorded time enters the minutes
as a lower bound (marked >=), and the p50 shift and in-CI figures are over the rows replayed.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmark_runners.harness import TimingPolicy, measure  # noqa: E402
from benchmark_runners.stats import percentile  # noqa: E402

PAST = "past the record"


class PastTheRecord(Exception):
    """The policy asked for an iteration the record does not have."""


class ReplayClock:
    """Iterations last what the record says; `now` advances by them (a virtual clock)."""

    def __init__(self, durations_ns: list[float]):
        self.durations = list(durations_ns)
        self.position = 0
        self.elapsed_s = 0.0
        self._current = 0.0

    def now(self) -> float:
        return self.elapsed_s

    def begin(self) -> None:
        if self.position >= len(self.durations):
            raise PastTheRecord
        self._current = self.durations[self.position]
        self.position += 1

    def mark(self, phase: str) -> None:
        pass

    def end(self) -> tuple[int, dict[str, int]]:
        self.elapsed_s += self._current / 1e9
        return int(self._current), {}


def recorded_rows(paths: list[Path]) -> list[dict]:
    files = [f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    rows = []
    for f in files:
        document = json.loads(f.read_text())
        rows += [r for r in document.get("results", []) if r.get("status") == "ok" and r.get("samples_ms")]
    return rows


def _per_iteration_ms(row: dict) -> float:
    """A sample of a row that ran N requests in flight is one batch's share: the loop's
    iteration lasted N times that."""
    return float((row.get("backend_config") or {}).get("infer_requests") or 1)


def replay(row: dict, policy: TimingPolicy) -> dict:
    scale = _per_iteration_ms(row)
    stream = [row["first_inference_ms"], *(row.get("warmup_ms") or []), *row["samples_ms"]]
    clock = ReplayClock([ms * scale * 1e6 for ms in stream])
    recorded_s = sum(stream) * scale / 1e3
    try:
        m = measure(lambda c: None, clock, policy, now=clock.now)
    except PastTheRecord:
        return {"past": True, "seconds": recorded_s, "shift": None, "inside_ci": None, "reason": PAST}
    p50 = statistics.median(m.samples_ns) / scale / 1e6
    recorded = row["p50_ms"]
    lo, hi = row.get("ci_low_ms"), row.get("ci_high_ms")
    return {"past": False, "seconds": clock.elapsed_s, "shift": abs(p50 / recorded - 1), "reason": m.stop_reason,
            "inside_ci": lo is not None and hi is not None and lo <= p50 <= hi}


def parse_policy(text: str, base: TimingPolicy) -> TimingPolicy:
    fields = {f.name: f.type for f in dataclasses.fields(TimingPolicy)}
    changes = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in fields:
            raise SystemExit(f"unknown policy field {key!r} (fields: {', '.join(fields)})")
        try:
            changes[key] = int(value)
        except ValueError:
            changes[key] = float(value)  # 0.75, 1e3, inf (no cap)
    return dataclasses.replace(base, **changes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="landing files or directories of them")
    ap.add_argument("--policy", action="append", default=[], help="TimingPolicy fields to change, e.g. max_time_s=4,warmup_max_time_s=1.5")
    args = ap.parse_args()
    rows = recorded_rows(args.paths)
    if not rows:
        raise SystemExit("no measured rows in " + ", ".join(map(str, args.paths)))
    recorded_s = sum((r["first_inference_ms"] + sum(r.get("warmup_ms") or []) + sum(r["samples_ms"])) * _per_iteration_ms(r)
                     for r in rows) / 1e3
    print(f"{len(rows)} recorded rows, {recorded_s / 60:.1f} min of timed work as recorded")
    print(f"{'policy':58s} {'minutes':>8s} {'p50 shift med/p90/max':>24s} {'in CI':>6s} {'past':>5s}  stop reasons")
    for text in args.policy or [""]:
        results = []
        for row in rows:
            # a landing file writes an infinite figure as text ("inf": no cap; devicefit.landing_bounds.finite_json)
            base = TimingPolicy(**{k: float(v) if v in ("inf", "-inf", "nan") else v for k, v in (row.get("policy") or {}).items()
                                   if k in {f.name for f in dataclasses.fields(TimingPolicy)}})
            results.append(replay(row, parse_policy(text, base)))
        replayed = [r for r in results if not r["past"]]
        shifts = sorted(r["shift"] for r in replayed)
        reasons: dict[str, int] = {}
        for r in results:
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
        past = len(results) - len(replayed)
        minutes = f"{'>=' if past else ''}{sum(r['seconds'] for r in results) / 60:.1f}"
        spread = (f"{statistics.median(shifts):7.2%} {percentile(shifts, 90):7.2%} {shifts[-1]:7.2%} "
                  f"{sum(r['inside_ci'] for r in replayed) / len(replayed):6.0%}" if replayed else f"{'-':>31s}")
        print(f"{text or 'as recorded':58s} {minutes:>8s} {spread} {past:5d}  "
              + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
