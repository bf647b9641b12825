"""Regression tracking (spec 004's --compare-to ... --regression-alert 0.1 and --output-ci):
a run compared with a baseline config by config, on the raw timing samples.

A config regresses only when both hold: its median latency grew by more than the threshold,
and a one-sided Mann-Whitney U test says the current samples are stochastically larger
(p < alpha). The rank test keeps noise from being called a regression; the threshold keeps a
real but negligible shift from being one. Where the baseline has no samples (a CSV of medians),
only the threshold applies, and the comparison says so.

Baselines: `previous` (each config's latest earlier run in the store's sample history), a run
id, a CSV (model, hardware or device_kind, precision, mode, batch_size, optional backend and
input_dims, and samples_ms or p50_ms), or a JSON results document (a landing file, `devicefit
benchmark --json` output, or a CI report written by `--output-ci`)."""
from __future__ import annotations

import csv
import json
import statistics
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark_runners.speed_reference import MAX_FACTOR, mean_gflops
from devicefit import store
from devicefit.errors import DevicefitError

CI_FORMAT = "devicefit.regression_report/1"
DEFAULT_ALPHA = 0.01
MIN_SAMPLES_FOR_RANK_TEST = 3
# "inconclusive": a change beyond the threshold, with either side measured while other
# processes used the CPU; reported with the figure, never a CI failure on its own.
VERDICTS = ("regression", "improvement", "unchanged", "inconclusive", "new", "missing")


class BaselineError(DevicefitError, ValueError):
    """A baseline that cannot be read or matched, said in words."""


@dataclass(frozen=True)
class ConfigIdentity:
    model: str
    device_kind: str
    backend: str
    precision: str
    mode: str
    batch_size: int
    input_dims: str | None  # JSON text; None matches any input when the baseline does not say
    device_profile: str | None = None  # the constraint profile ("t1", "avx2"): another device, never compared with none

    def label(self) -> str:
        return (f"{self.model} · {self.device_kind}{f' ({self.device_profile})' if self.device_profile else ''}{'' if self.backend in ('torch', self.device_kind) else ' · ' + self.backend} · {self.precision} · "
                f"{self.mode} · batch {self.batch_size}" + (f" · {self.input_dims}" if self.input_dims else ""))


@dataclass
class SampleSet:
    identity: ConfigIdentity
    samples_ms: list[float]
    p50_ms: float
    run_id: str | None = None
    hardware_fingerprint: str | None = None
    contended: bool | None = None  # measured while other processes used the CPU (benchmark_runners.contention)
    other_cpu_share: float | None = None
    # the host CPU's rate on the worker's fixed kernel around the timing (benchmark_runners.speed_reference)
    speed_gflops: float | None = None


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


# --- Reading sample sets -----------------------------------------------------------------------

def _speed(reference: Any) -> float | None:
    if isinstance(reference, str):  # DuckDB hands JSON columns back as text
        try:
            reference = json.loads(reference)
        except json.JSONDecodeError:
            return None
    return mean_gflops(reference)


def _from_history_row(row: tuple) -> SampleSet:
    run_id, model, kind, backend, precision, mode, batch, dims, samples, p50, fp, _, contended, share, profile, speed = row
    return SampleSet(ConfigIdentity(model, kind, backend, precision, mode, batch, dims, profile), list(samples or []), p50, run_id, fp,
                     contended, share, _speed(speed))


def _history(database: store.Source, run_id: str | None = None, latest_only: bool = False) -> list[tuple]:
    """Sample history from the store (a path opens read-only); a database that cannot be opened
    (corrupt, locked, missing) is a comparison that cannot be made, said in one line like any
    other BaselineError."""
    try:
        with store.opened(database, read_only=True) as con:
            return store.sample_history(con, run_id, latest_only=latest_only)
    except store.StoreError as exc:
        raise BaselineError(str(exc)) from exc


def current_sets(database: store.Source, run_id: str | None = None) -> list[SampleSet]:
    """The latest run of every config in the store, or the configs of one run."""
    rows = _history(database, run_id, latest_only=not run_id)
    if run_id and not rows:
        raise BaselineError(f"run {run_id!r} has no measured rows in {database if isinstance(database, (str, Path)) else 'the store'}")
    return [_from_history_row(r) for r in rows]


def previous_sets(database: store.Source, current: list[SampleSet]) -> dict[tuple[ConfigIdentity, str | None], SampleSet]:
    """For each current set, the latest earlier run of the same config on the same device, keyed
    by (config, hardware fingerprint): two GPUs behind one host CPU are each compared with their
    own previous run."""
    rows = _history(database)
    wanted = {(s.identity, s.hardware_fingerprint): s.run_id for s in current}
    out: dict[tuple[ConfigIdentity, str | None], SampleSet] = {}
    for row in rows:
        s = _from_history_row(row)
        key = (s.identity, s.hardware_fingerprint)
        if key in wanted and s.run_id != wanted[key] and key not in out:
            out[key] = s
    return out


def _dims_text(value: Any) -> str | None:
    if value in (None, "", {}):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise BaselineError(f"input_dims {value!r} is not JSON") from None
    return json.dumps(value, sort_keys=True)


def sets_from_document(path: Path) -> list[SampleSet]:
    """A results document (landing file, `benchmark --json`) or a CI report from --output-ci."""
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError, RecursionError) as exc:
        raise BaselineError(f"baseline {path} is unreadable: {type(exc).__name__}: {str(exc)[:200]}") from None
    if isinstance(document, dict) and document.get("format") == CI_FORMAT:
        try:
            return [SampleSet(ConfigIdentity(**c["identity"]), [float(x) for x in c.get("current_samples_ms") or []],
                              float(c["current_p50_ms"]), c.get("current_run"))
                    for c in document["comparisons"] if c.get("current_p50_ms") is not None]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BaselineError(f"baseline {path} is a {CI_FORMAT} report whose 'comparisons' are not as --output-ci writes them "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from None
    results = document.get("results") if isinstance(document, dict) else document
    if not isinstance(results, list):
        raise BaselineError(f"baseline {path} is neither a results document (a 'results' list) nor a {CI_FORMAT} report")
    out = sets_from_results(results, str(path))
    if not out:
        raise BaselineError(f"baseline {path} holds no ok results to compare with")
    return out


def sets_from_results(results: list[dict[str, Any]], origin: str = "results") -> list[SampleSet]:
    """Sample sets of the ok rows among BenchmarkResult JSON dicts (`BenchmarkResult.to_json()`)."""
    out = []
    for r in results:
        if not isinstance(r, dict) or r.get("status") != "ok":
            continue
        try:
            dims = ((r.get("input") or {}).get("dims")) or None
            out.append(SampleSet(ConfigIdentity(r["model"], r["device"].split(":")[0], r.get("backend", "torch"), r["precision"], r["mode"],
                                                int(r["batch_size"]), _dims_text(dims), r.get("device_profile") or None),
                                 [float(x) for x in r.get("samples_ms") or []], float(r["p50_ms"]), r.get("run_id"),
                                 r.get("hardware_fingerprint"), r.get("contended"), r.get("other_cpu_share"),
                                 _speed(r.get("speed_reference"))))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BaselineError(f"{origin}: a result lacks or mistypes {exc}") from None
    return out


def _wide_sets(path: Path, rows: list[dict[str, str]], columns: list[str]) -> list[SampleSet]:
    """Sample sets from `devicefit analyze --output` (spec 004's comparative analysis): one row
    per config, one `<hardware>_p50_ms` column per hardware label ("cpu", "cpu_openvino" for
    OpenVINO's plugin on the CPU). It keeps medians only, so the comparison is by threshold."""
    from benchmark_runners import registry

    out = []
    hardware = [c[: -len("_p50_ms")] for c in columns if c.endswith("_p50_ms")]
    parsed = {label: _wide_label(path, label) for label in hardware}
    by_kind: dict[tuple[str, str], list[str]] = {}
    for label, (kind, backend, _device) in parsed.items():
        by_kind.setdefault((kind, backend), []).append(label)
    several = {k: v for k, v in by_kind.items() if len(v) > 1}
    if several:
        (kind, _), labels = next(iter(several.items()))
        raise BaselineError(f"baseline {path} holds several {kind} devices ({', '.join(labels)}): a comparative analysis "
                            "names them by device name, not by the fingerprint this run's rows carry; compare against "
                            "'previous', a run id, or `compare --export-baseline`'s CSV of one machine instead")
    for n, r in enumerate(rows, start=2):
        for label in hardware:
            value = r.get(f"{label}_p50_ms")
            if not value:
                continue  # that hardware did not measure this config
            kind, backend, _device = parsed[label]
            try:
                default_backend = registry.backend_of_kind(kind)
                identity = ConfigIdentity(r["model"], kind, backend or (default_backend.name if default_backend else "torch"),
                                          r["precision"], r["mode"], int(r["batch_size"]), _dims_text(r.get("input_dims")), None)
                out.append(SampleSet(identity, [], float(value), None))
            except (KeyError, TypeError, ValueError) as exc:
                raise BaselineError(f"baseline {path} line {n}: {exc}") from None
    if not out:
        raise BaselineError(f"baseline {path} has no rows")
    return out


def _wide_label(path: Path, label: str) -> tuple[str, str, str]:
    """(kind, backend or "", device) of a comparative analysis column prefix: "cpu",
    "cpu_openvino", or with the device's name where the analysis held several of a kind
    ("cuda_nvidia_h100_80gb_hbm3": reports.data.label_devices)."""
    from benchmark_runners import registry

    def split(text: str, names) -> tuple[str, str]:
        for name in sorted(names, key=len, reverse=True):
            if text == name or text.startswith(name + "_"):
                return name, text[len(name) + 1:]
        return "", text

    kind, rest = split(label, registry.kind_names())
    if not kind:
        raise BaselineError(f"baseline {path}: column {label}_p50_ms names no hardware kind ({', '.join(registry.kind_names())})")
    backend, device = split(rest, registry.backend_names())
    return kind, backend, device


def sets_from_csv(path: Path) -> list[SampleSet]:
    """A baseline CSV: `compare --export-baseline`'s (one row per config and hardware, with its
    samples) or `analyze --output`'s comparative analysis (one row per config, medians only)."""
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            columns = list(reader.fieldnames or [])
    except OSError as exc:
        raise BaselineError(f"baseline {path} is unreadable: {exc}") from None
    if "p50_ms" not in columns and any(c.endswith("_p50_ms") for c in columns):
        return _wide_sets(path, rows, columns)
    out = []
    for n, r in enumerate(rows, start=2):
        try:
            samples = [float(x) for x in (r.get("samples_ms") or "").replace(",", ";").split(";") if x.strip()]
            p50 = float(r["p50_ms"]) if r.get("p50_ms") else statistics.median(samples) if samples else None
            if p50 is None:
                raise ValueError("neither samples_ms nor p50_ms")
            kind = r.get("device_kind") or r.get("hardware")
            if not kind:
                raise KeyError("device_kind (or hardware)")
            out.append(SampleSet(ConfigIdentity(r["model"], kind, r.get("backend") or "torch", r["precision"], r["mode"],
                                                int(r["batch_size"]), _dims_text(r.get("input_dims")), r.get("device_profile") or None),
                                 samples, p50, r.get("run_id")))
        except (KeyError, TypeError, ValueError) as exc:
            raise BaselineError(f"baseline {path} line {n}: {exc}") from None
    if not out:
        raise BaselineError(f"baseline {path} has no rows")
    return out


def write_baseline_csv(sets: list[SampleSet], path: Path) -> Path:
    """The CSV form of sample sets, readable back as a baseline (samples kept)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["model", "device_kind", "backend", "precision", "mode", "batch_size", "input_dims", "run_id", "p50_ms", "samples_ms"])
        for s in sets:
            i = s.identity
            writer.writerow([i.model, i.device_kind, i.backend, i.precision, i.mode, i.batch_size, i.input_dims or "", s.run_id or "",
                             f"{s.p50_ms:.6g}", ";".join(f"{x:.6g}" for x in s.samples_ms)])
    return path


def load_baseline(spec: str, database: store.Source | None, current: list[SampleSet]) -> tuple[str, dict[tuple[ConfigIdentity, str | None], SampleSet] | list[SampleSet]]:
    """(description, baseline sets) from `previous`, a run id, or a CSV / JSON file."""
    path = Path(spec)
    if spec == "previous":
        if database is None:
            raise BaselineError("baseline 'previous' needs the database")
        return "previous run of each config", previous_sets(database, current)
    if path.suffix.lower() == ".csv":
        if not path.is_file():
            raise BaselineError(f"baseline file {path} does not exist")
        return f"CSV {path}", sets_from_csv(path)
    if path.suffix.lower() == ".json" or path.is_file():
        if not path.is_file():
            raise BaselineError(f"baseline file {path} does not exist")
        return f"results document {path}", sets_from_document(path)
    if database is None:
        raise BaselineError(f"baseline {spec!r} is not a file, and there is no database to look up a run id in")
    try:
        return f"run {spec}", current_sets(database, spec.removeprefix("run:"))
    except BaselineError:
        raise BaselineError(f"baseline {spec!r} is neither a file, nor 'previous', nor a run id in {database}") from None


def _match(current: SampleSet, baseline: dict[tuple[ConfigIdentity, str | None], SampleSet] | list[SampleSet]) -> SampleSet | None:
    identity = current.identity
    if isinstance(baseline, dict):
        return baseline.get((identity, current.hardware_fingerprint))
    exact = [b for b in baseline if b.identity == identity]
    if exact:
        return exact[0]
    loose = [b for b in baseline if b.identity.input_dims is None and b.identity.device_profile == identity.device_profile
             and (b.identity.model, b.identity.device_kind, b.identity.backend, b.identity.precision, b.identity.mode,
                  b.identity.batch_size) == (identity.model, identity.device_kind, identity.backend, identity.precision,
                                             identity.mode, identity.batch_size)]
    return loose[0] if len(loose) == 1 else None


def compare(current: list[SampleSet], baseline: dict[tuple[ConfigIdentity, str | None], SampleSet] | list[SampleSet], threshold: float,
            alpha: float = DEFAULT_ALPHA) -> list[Comparison]:
    if not 0 < threshold < 10:
        raise ValueError(f"the regression threshold is a relative change such as 0.1 (10%), got {threshold}")
    if not 0 < alpha < 1:  # NaN too: a test at level NaN (or 5) calls nothing significant, or everything
        raise ValueError(f"the significance level alpha must be between 0 and 1 exclusive, such as 0.01, got {alpha}")
    out, matched = [], set()
    for cur in sorted(current, key=lambda s: s.identity.label()):
        base = _match(cur, baseline)
        if base is None:
            out.append(Comparison(cur.identity.label(), asdict(cur.identity), "new", "no baseline for this config", None, cur.run_id,
                                  None, cur.p50_ms, None, None, 0, len(cur.samples_ms)))
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
        out.append(Comparison(cur.identity.label(), asdict(cur.identity), verdict, method, base.run_id, cur.run_id, base.p50_ms,
                              cur.p50_ms, change, p, len(base.samples_ms), len(cur.samples_ms)))
    # A per-config baseline ("previous") has nothing "missing": configs without one are "new".
    for base in [] if isinstance(baseline, dict) else baseline:
        if id(base) not in matched:
            out.append(Comparison(base.identity.label(), asdict(base.identity), "missing", "in the baseline, not in this run",
                                  base.run_id, None, base.p50_ms, None, None, None, len(base.samples_ms), 0))
    return out


def _host_speed_explains(cur: SampleSet, base: SampleSet, threshold: float) -> str | None:
    """Why a change is not the code's: the host's speed reference differed between the two runs
    (a VM's neighbours, invisible to the contention check) by enough that, at the baseline's host
    speed, the current median would be within the threshold. None where either side has no
    reading or the speed does not explain the change."""
    if not cur.speed_gflops or not base.speed_gflops or not base.p50_ms:
        return None
    ratio = min(max(cur.speed_gflops / base.speed_gflops, 1 / MAX_FACTOR), MAX_FACTOR)
    adjusted = cur.p50_ms * ratio / base.p50_ms - 1  # the current median at the baseline's host speed
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
                           alpha: float = DEFAULT_ALPHA, current_description: str = "latest run of each config") -> dict[str, Any]:
    """Load the baseline, compare, and return the report (what `compare` and `benchmark
    --compare-to` print and write)."""
    if not current:
        raise BaselineError("nothing measured to compare: the current side has no ok rows")
    description, baseline = load_baseline(baseline_spec, database, current)
    comparisons = compare(current, baseline, threshold, alpha)
    return regression_report(comparisons, threshold, alpha, description, current_description,
                             {s.identity.label(): s for s in current})
