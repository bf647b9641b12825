"""Regression tracking (spec 004's --compare-to ... --regression-alert 0.1 and --output-ci):
a run compared with a baseline config by config, on the raw timing samples.

A config regresses only when both hold: its median latency grew by more than the threshold,
and a one-sided Mann-Whitney U test says the current samples are stochastically larger
(p < alpha). The rank test keeps noise from being called a regression; the threshold keeps a
real but negligible shift from being one. Where the baseline has no samples (a CSV of medians),
only the threshold applies, and the comparison says so.

Baselines: `previous` (each config's latest earlier run in the store's sample history), a run
id, a CSV (model, hardware or device_kind, precision, mode, batch_size, optional backend,
input_dims and hardware_fingerprint, and samples_ms or p50_ms), or a JSON results document (a
landing file, `devicefit benchmark --json` output, or a CI report written by `--output-ci`).

A config is compared with a baseline row of the same machine only (the hardware fingerprint a
row carries): a store holding two machines' runs, or a baseline file from another machine,
would otherwise compare an EPYC's rows with a Xeon's and call the difference a regression. A
baseline row that names no machine (a comparative analysis CSV, an older export) matches any."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark_runners.harness import FAULTS_WORTH_A_NOTE, fault_count_text
from benchmark_runners.speed_reference import MAX_FACTOR, TRACKING
from devicefit.reports.baselines import (  # noqa: F401 - the readers, re-exported for callers of this module
    CI_FORMAT,
    BaselineError,
    ConfigIdentity,
    SampleSet,
    current_sets,
    load_baseline,
    previous_sets,
    sets_from_csv,
    sets_from_document,
    sets_from_results,
    write_baseline_csv,
)
from devicefit.reports.unmeasured import Unmeasured, why_missing

DEFAULT_ALPHA = 0.01
MIN_SAMPLES_FOR_RANK_TEST = 3
# "inconclusive": a change beyond the threshold, with either side measured while other
# processes used the CPU; reported with the figure, never a CI failure on its own.
VERDICTS = ("regression", "improvement", "unchanged", "inconclusive", "new", "missing")


@dataclass
class Comparison:
    config: str
    identity: dict[str, Any]
    verdict: str  # one of VERDICTS
    method: str
    baseline_run: str | None
    current_run: str | None
    baseline_p50_ms: float | None
    current_p50_ms: float | None
    change: float | None  # relative change of the median, + is slower
    p_value: float | None
    baseline_samples: int
    current_samples: int
    # the machine the compared rows were measured on (the current side's; the baseline's for "missing")
    hardware_fingerprint: str | None = None
    # minor page faults per timed call on each side (benchmark_runners.harness), where both rows counted them
    baseline_faults_per_iteration: float | None = None
    current_faults_per_iteration: float | None = None
    # what else a reader should know of a change: that the page-fault count moved with it, or
    # that the two sides ran with different allocator settings
    note: str | None = None
    # the allocator each side's process ran with (benchmark_runners.environment.allocator_text), where its row recorded it
    baseline_allocator: str | None = None
    current_allocator: str | None = None


def compare_samples(current: list[float], baseline: list[float], threshold: float, alpha: float = DEFAULT_ALPHA,
                    current_p50: float | None = None, baseline_p50: float | None = None) -> tuple[str, str, float, float | None]:
    """(verdict, method, relative change of the median, one-sided p-value or None)."""
    cur_med = statistics.median(current) if current else current_p50
    base_med = statistics.median(baseline) if baseline else baseline_p50
    if cur_med is None or base_med is None or base_med <= 0:
        raise ValueError("both sides need samples or a median")
    change = cur_med / base_med - 1.0
    if len(current) >= MIN_SAMPLES_FOR_RANK_TEST and len(baseline) >= MIN_SAMPLES_FOR_RANK_TEST:
        from scipy.stats import mannwhitneyu

        slower = mannwhitneyu(current, baseline, alternative="greater").pvalue
        faster = mannwhitneyu(current, baseline, alternative="less").pvalue
        method = f"mann-whitney (alpha {alpha:g}) and threshold {threshold:g}"
        if change > threshold and slower < alpha:
            return "regression", method, change, float(slower)
        if change < -threshold and faster < alpha:
            return "improvement", method, change, float(faster)
        return "unchanged", method, change, float(min(slower, faster))
    method = f"threshold {threshold:g} only: fewer than {MIN_SAMPLES_FOR_RANK_TEST} samples on a side"
    if change > threshold:
        return "regression", method, change, None
    return ("improvement" if change < -threshold else "unchanged"), method, change, None


def _match(current: SampleSet, baseline: dict[tuple[ConfigIdentity, str | None], SampleSet] | list[SampleSet]) -> SampleSet | None:
    identity = current.identity
    if isinstance(baseline, dict):
        return baseline.get((identity, current.hardware_fingerprint))
    # Another machine's row is never a baseline (two CPUs differ by more than any threshold); one
    # that names no machine (a CSV of medians, an older export) matches, after the same machine's.
    fp = current.hardware_fingerprint
    candidates = sorted((b for b in baseline if not fp or b.hardware_fingerprint in (None, fp)), key=lambda b: b.hardware_fingerprint is None)
    exact = [b for b in candidates if b.identity == identity]
    if exact:
        return exact[0]
    loose = [b for b in candidates if b.identity.input_dims is None and b.identity.device_profile == identity.device_profile
             and (b.identity.model, b.identity.device_kind, b.identity.backend, b.identity.precision, b.identity.mode,
                  b.identity.batch_size) == (identity.model, identity.device_kind, identity.backend, identity.precision,
                                             identity.mode, identity.batch_size)]
    return loose[0] if len(loose) == 1 else None


def check_levels(threshold: float, alpha: float = DEFAULT_ALPHA) -> None:
    """Refuse a threshold or significance level no comparison can use (NaN included: a test at
    level NaN, or 5, calls nothing significant, or everything)."""
    if not 0 < threshold < 10:
        raise ValueError(f"the regression threshold is a relative change such as 0.1 (10%), got {threshold}")
    if not 0 < alpha < 1:
        raise ValueError(f"the significance level alpha must be between 0 and 1 exclusive, such as 0.01, got {alpha}")


def compare(current: list[SampleSet], baseline: dict[tuple[ConfigIdentity, str | None], SampleSet] | list[SampleSet], threshold: float,
            alpha: float = DEFAULT_ALPHA, unmeasured: Unmeasured | None = None) -> list[Comparison]:
    """Each current set against its baseline; with a list baseline (a run, a file), each baseline
    config this run has no ok row for is `missing`, with what the run did with it where
    `unmeasured` (its skipped and failed rows) says."""
    check_levels(threshold, alpha)
    out, matched = [], set()
    label = labeller(current)
    for cur in sorted(current, key=label):
        base = _match(cur, baseline)
        if base is None:
            out.append(Comparison(label(cur), asdict(cur.identity), "new", "no baseline for this config", None, cur.run_id,
                                  None, cur.p50_ms, None, None, 0, len(cur.samples_ms), cur.hardware_fingerprint))
            continue
        matched.add(id(base))
        verdict, method, change, p = compare_samples(cur.samples_ms, base.samples_ms, threshold, alpha, cur.p50_ms, base.p50_ms)
        busy = [f"{side} measured while other processes used {s.other_cpu_share:.0%} of the host's CPU"
                for side, s in (("this run", cur), ("the baseline", base)) if s.contended]
        if busy and verdict in ("regression", "improvement"):
            # A busy neighbour can slow a small model tenfold: the change cannot be told from it.
            verdict, method = "inconclusive", f"{method}; would be {verdict}, but {' and '.join(busy)} (contended)"
        elif verdict in ("regression", "improvement") and (slowed := _host_speed_explains(cur, base, threshold)):
            verdict, method = "inconclusive", f"{method}; would be {verdict}, but {slowed}"
        notes = [_allocators_differ(cur, base), _faults_moved(cur, base, change) if verdict != "unchanged" else None]
        out.append(Comparison(label(cur), asdict(cur.identity), verdict, method, base.run_id, cur.run_id, base.p50_ms,
                              cur.p50_ms, change, p, len(base.samples_ms), len(cur.samples_ms), cur.hardware_fingerprint,
                              base.faults_per_iteration, cur.faults_per_iteration, "; ".join(n for n in notes if n) or None,
                              base.allocator, cur.allocator))
    # A per-config baseline ("previous") has nothing "missing": configs without one are "new".
    unmatched = [] if isinstance(baseline, dict) else [b for b in baseline if id(b) not in matched]
    base_label = labeller(unmatched)
    for base in unmatched:
        why = why_missing(unmeasured, base.identity, base.hardware_fingerprint)
        out.append(Comparison(base_label(base), asdict(base.identity), "missing", f"in the baseline; {why}" if why else "in the baseline, not in this run",
                              base.run_id, None, base.p50_ms, None, None, None, len(base.samples_ms), 0, base.hardware_fingerprint))
    return out


def labeller(sets: list[SampleSet]):
    """The label of each set: its config's, plus its machine where another set has the same config
    on another machine (a store holding two machines' runs)."""
    machines: dict[ConfigIdentity, set[str | None]] = {}
    for s in sets:
        machines.setdefault(s.identity, set()).add(s.hardware_fingerprint)
    return lambda s: s.identity.label() + (f" · on {s.hardware_fingerprint}" if len(machines.get(s.identity, ())) > 1 else "")


def _other_machines_only(current: list[SampleSet], baseline: dict | list[SampleSet], comparisons: list[Comparison]) -> str | None:
    """Why nothing was compared, where the baseline's rows all come from other machines: an error,
    not a report of every config "new" that passes a CI gate having compared nothing."""
    if isinstance(baseline, dict) or any(c.verdict not in ("new", "missing") for c in comparisons):
        return None
    ours = {s.hardware_fingerprint for s in current if s.hardware_fingerprint}
    theirs = {b.hardware_fingerprint for b in baseline if b.hardware_fingerprint}
    if not ours or not theirs or ours & theirs:
        return None
    return (f"the baseline was measured on {', '.join(sorted(theirs))} and this run on {', '.join(sorted(ours))}: a regression "
            "check compares a machine with its own earlier runs (another machine's figures differ by more than any threshold); "
            "use a baseline measured on this machine, or 'previous'")


def _faults_moved(cur: SampleSet, base: SampleSet, change: float) -> str | None:
    """A note where the page faults per call moved by FAULTS_WORTH_A_NOTE or more between the
    two rows. Not a verdict: glibc's malloc hands activations back to the OS and faults them in
    again, and how much depends on the process's history as much as on the code (between two
    make runs of the same code on the Zen 4 EPYC, clip-vit-base at batch 16 went from 40k to
    230k a call and its p50 from 1940 to 2396 ms); a change of code can move it too. So the
    comparison keeps its verdict and says the count moved, and whether the same way as the time."""
    before, after = base.faults_per_iteration, cur.faults_per_iteration
    if before is None or after is None or abs(after - before) < FAULTS_WORTH_A_NOTE:
        return None
    same_way = (after > before) == (change > 0)
    return (f"page faults a call {fault_count_text(before)} -> {fault_count_text(after)} "
            f"({(after - before) * 4096 / 2**20:+,.0f} MiB of fresh 4 KiB pages a call)"
            + (": the allocator's faulting moved with the time, so part of the change may be the allocator's, not the model's"
               if same_way else ", against the direction of the time"))


def _allocators_differ(cur: SampleSet, base: SampleSet) -> str | None:
    """A note where the two rows' processes ran with different allocator settings (a MALLOC_*
    variable, GLIBC_TUNABLES, an LD_PRELOAD'ed jemalloc, another glibc). Said whatever the
    verdict: at batch 16 mobilenet-v2 ran 453 ms with glibc's defaults and 295 ms with
    MALLOC_MMAP_MAX_=0 on the 2-core AVX2 EPYC, so such a pair is not the same measurement, and
    an "unchanged" may hide two changes that cancel. None where either row did not record it."""
    if cur.allocator is None or base.allocator is None or cur.allocator == base.allocator:
        return None
    return f"the allocator differs: the baseline ran with {base.allocator}, this run with {cur.allocator}"


def _host_speed_explains(cur: SampleSet, base: SampleSet, threshold: float) -> str | None:
    """Why a change is not the code's: the host's speed reference differed between the two runs
    (a VM's neighbours, invisible to the contention check) by enough that, at the baseline's host
    speed, the current median would be within the threshold. None where either side has no
    reading or the speed does not explain the change."""
    if not cur.speed_gflops or not base.speed_gflops or not base.p50_ms:
        return None
    ratio = min(max(cur.speed_gflops / base.speed_gflops, 1 / MAX_FACTOR), MAX_FACTOR)
    # the current median at the baseline's host speed: a time follows TRACKING of the reading's swing
    adjusted = cur.p50_ms * ratio ** TRACKING / base.p50_ms - 1
    if abs(adjusted) > threshold:
        return None
    return (f"the host ran at {ratio:.2f}x the baseline's speed on the fixed-kernel reference ({cur.speed_gflops:.0f} vs "
            f"{base.speed_gflops:.0f} GFLOP/s), which puts the median at {adjusted:+.1%}")


def regression_report(comparisons: list[Comparison], threshold: float, alpha: float, baseline: str, current: str,
                      current_sets_by_label: dict[str, SampleSet] | None = None) -> dict[str, Any]:
    """The machine-readable report (--output-ci); `status` is "fail" when any config regressed."""
    counts = {v: sum(c.verdict == v for c in comparisons) for v in VERDICTS}
    rows = []
    for c in comparisons:
        row = asdict(c)
        if current_sets_by_label and c.config in current_sets_by_label:
            row["current_samples_ms"] = current_sets_by_label[c.config].samples_ms
        rows.append(row)
    return {"format": CI_FORMAT, "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "threshold": threshold, "alpha": alpha, "baseline": baseline, "current": current,
            "status": "fail" if counts["regression"] else "pass", "summary": counts, "comparisons": rows}


def check_against_baseline(current: list[SampleSet], baseline_spec: str, database: Path | None, threshold: float,
                           alpha: float = DEFAULT_ALPHA, current_description: str = "latest run of each config",
                           unmeasured: Unmeasured | None = None) -> dict[str, Any]:
    """Load the baseline, compare, and return the report (what `compare` and `benchmark
    --compare-to` print and write); `unmeasured`: the current run's skipped and failed rows."""
    if not current:
        raise BaselineError("nothing measured to compare: the current side has no ok rows")
    description, baseline = load_baseline(baseline_spec, database, current)
    comparisons = compare(current, baseline, threshold, alpha, unmeasured)
    if reason := _other_machines_only(current, baseline, comparisons):
        raise BaselineError(f"nothing to compare with {description}: {reason}")
    label = labeller(current)
    return regression_report(comparisons, threshold, alpha, description, current_description, {label(s): s for s in current})
