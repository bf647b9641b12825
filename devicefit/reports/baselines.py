"""Sample sets to compare: one config's timing samples on one machine, read from the store (the
latest run of each config, one run, each config's previous run), from a results document or a
CI report, or from a baseline CSV (`compare --export-baseline`'s, or `analyze --output`'s
comparative analysis). The regression report (devicefit/reports/regression.py) compares them.

Every set carries the machine it was measured on (the row's hardware fingerprint) where its
source names it, so that a config is compared with its own machine's earlier figures only."""
from __future__ import annotations

import csv
import io
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark_runners.environment import allocator_text, written_allocator_text
from benchmark_runners.speed_reference import mean_gflops
from devicefit import store
from devicefit.errors import DevicefitError
from devicefit.reports.spreadsheet import read_spreadsheet_text, spreadsheet_text
from devicefit.store.loading import host_qualifier

CI_FORMAT = "devicefit.regression_report/1"


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
    # minor page faults per timed call (benchmark_runners.harness): the allocator's share of a change
    faults_per_iteration: float | None = None
    # the allocator the measuring process ran with, as environment.allocator_text writes it
    allocator: str | None = None


def _json_value(value: Any) -> Any:
    """A JSON column's value: DuckDB hands them back as text (None where it is not JSON)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return None


def _speed(reference: Any) -> float | None:
    return mean_gflops(_json_value(reference))


def _allocator(value: Any) -> str | None:
    return allocator_text(_json_value(value))


def _from_history_row(row: tuple) -> SampleSet:
    run_id, model, kind, backend, precision, mode, batch, dims, samples, p50, fp, _, contended, share, profile, speed, faults, allocator = row
    return SampleSet(ConfigIdentity(model, kind, backend, precision, mode, batch, dims, profile), list(samples or []), p50, run_id, fp,
                     contended, share, _speed(speed), _count(faults), _allocator(allocator))


def _time_ms(value: Any, what: str = "p50_ms") -> float:
    """A time a baseline file gives: a positive finite number of milliseconds. NaN compared with
    anything is False, so a NaN median made every config "unchanged" (a CI gate that passed
    having compared nothing), infinity made each an "improvement", and JSON's NaN went on into
    the --output-ci report, which strict JSON readers refuse."""
    number = None if isinstance(value, bool) else float(value)
    if number is None or not 0 < number < float("inf"):
        raise ValueError(f"{what} {str(value)[:40]!r} is not a positive finite time in ms")
    return number


def _samples_ms(values: Any) -> list[float]:
    return [_time_ms(x, "a sample of samples_ms") for x in values or []]


def _count(value: Any) -> float | None:
    """A page-fault count a row or report carries: a finite non-negative number, else None (a
    baseline document is read without the landing schema's check)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf")
    return float(value) if ok else None


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
    history = [_from_history_row(row) for row in _history(database)]  # newest first
    wanted = {(s.identity, s.hardware_fingerprint): s.run_id for s in current}
    # The run compared may be an older one (`compare --run OLD`): its previous run is the latest
    # one before it, not the newest other run, which compared a run with a later one (a later
    # run's speed-up read as this run's regression). A run not in the history yet is the newest.
    stored = {(s.identity, s.hardware_fingerprint) for s in history if wanted.get((s.identity, s.hardware_fingerprint)) == s.run_id}
    passed: set[tuple[ConfigIdentity, str | None]] = set()
    out: dict[tuple[ConfigIdentity, str | None], SampleSet] = {}
    for s in history:
        key = (s.identity, s.hardware_fingerprint)
        if key not in wanted or key in out:
            continue
        if s.run_id == wanted[key]:
            passed.add(key)
        elif key in passed or key not in stored:
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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # a binary file is not UTF-8
        raise BaselineError(f"baseline {path} is unreadable: {type(exc).__name__}: {str(exc)[:200]}") from None
    if isinstance(document, dict) and document.get("format") == CI_FORMAT:
        try:
            sets = [SampleSet(ConfigIdentity(**c["identity"]), _samples_ms(c.get("current_samples_ms")),
                              _time_ms(c["current_p50_ms"], "current_p50_ms"), c.get("current_run"), c.get("hardware_fingerprint") or None,
                              faults_per_iteration=_count(c.get("current_faults_per_iteration")),
                              allocator=written_allocator_text(c["current_allocator"]) if isinstance(c.get("current_allocator"), str) else None)
                    for c in document["comparisons"] if c.get("current_p50_ms") is not None]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BaselineError(f"baseline {path} is a {CI_FORMAT} report whose 'comparisons' are not as --output-ci writes them "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from None
        if not sets:  # `benchmark --output-ci` without --compare-to: its results carry no samples, machine nor input
            raise BaselineError(f"baseline {path} is a {CI_FORMAT} report that compared no measured config (written without "
                                "--compare-to, or every config failed): as a baseline it would call every config 'new' and "
                                "pass; compare against `benchmark --json`'s results, `compare --export-baseline`'s CSV, or a run id")
        return sets
    from devicefit.results_io import FORMAT as RESULTS_FORMAT

    found = document.get("format") if isinstance(document, dict) else None
    if found is not None and found != RESULTS_FORMAT:  # another version's rows may name or mean their fields otherwise
        raise BaselineError(f"baseline {path} has format {str(found)[:80]!r}; this version reads {RESULTS_FORMAT!r} results "
                            f"documents and {CI_FORMAT!r} reports")
    results = document.get("results") if isinstance(document, dict) else document
    if not isinstance(results, list):
        raise BaselineError(f"baseline {path} is neither a results document (a 'results' list) nor a {CI_FORMAT} report")
    if isinstance(document, dict):  # a file from before host-qualified device ids names them as its rows now do
        _, qualify = host_qualifier(document)
        results = [{**r, "hardware_fingerprint": qualify(str(r.get("device") or ""), r.get("hardware_fingerprint"), r.get("backend_config"))}
                   if isinstance(r, dict) else r for r in results]
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
            if not isinstance(r.get("hardware_fingerprint"), (str, type(None))):
                raise TypeError(f"hardware_fingerprint {str(r.get('hardware_fingerprint'))[:60]!r} (not a string)")
            out.append(SampleSet(ConfigIdentity(r["model"], r["device"].split(":")[0], r.get("backend", "torch"), r["precision"], r["mode"],
                                                int(r["batch_size"]), _dims_text(dims), r.get("device_profile") or None),
                                 _samples_ms(r.get("samples_ms")), _time_ms(r["p50_ms"]), r.get("run_id"),
                                 r.get("hardware_fingerprint"), r.get("contended"), r.get("other_cpu_share"),
                                 _speed(r.get("speed_reference")), _count(r.get("minor_faults_per_iteration")),
                                 _allocator((r.get("environment") or {}).get("allocator") if isinstance(r.get("environment"), dict) else None)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BaselineError(f"{origin}: a result lacks or mistypes {exc}") from None
    return out


def _wide_sets(path: Path, rows: list[dict[str, str]], columns: list[str], lines: list[int]) -> list[SampleSet]:
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
    for n, r in zip(lines, rows):
        for label in hardware:
            value = r.get(f"{label}_p50_ms")
            if not value:
                continue  # that hardware did not measure this config
            kind, backend, _device = parsed[label]
            try:
                default_backend = registry.backend_of_kind(kind)
                identity = ConfigIdentity(r["model"], kind, backend or (default_backend.name if default_backend else "torch"),
                                          r["precision"], r["mode"], int(r["batch_size"]), _dims_text(r.get("input_dims")), None)
                out.append(SampleSet(identity, [], _time_ms(value, f"{label}_p50_ms"), None))
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
    rows, columns, lines, ended = _csv_rows(path)
    if "p50_ms" not in columns and any(c.endswith("_p50_ms") for c in columns):
        return _wide_sets(path, rows, columns, lines)
    out = []
    for i, (n, r) in enumerate(zip(lines, rows)):
        try:
            samples = _samples_ms(x for x in (r.get("samples_ms") or "").replace(",", ";").split(";") if x.strip())
            p50 = _time_ms(r["p50_ms"]) if r.get("p50_ms") else statistics.median(samples) if samples else None
            if p50 is None:
                raise ValueError("neither samples_ms nor p50_ms")
            kind = r.get("device_kind") or r.get("hardware")
            if not kind:
                raise KeyError("device_kind (or hardware)")
            out.append(SampleSet(ConfigIdentity(r["model"], kind, r.get("backend") or "torch", r["precision"], r["mode"],
                                                int(r["batch_size"]), _dims_text(r.get("input_dims")), r.get("device_profile") or None),
                                 samples, p50, r.get("run_id"), r.get("hardware_fingerprint") or None))
        except (KeyError, TypeError, ValueError) as exc:
            raise BaselineError(f"baseline {path} line {n}: {exc}") from None
        if not ended and i == len(rows) - 1 and r.get("p50_ms") and samples and _cut_samples(samples, p50):
            raise BaselineError(f"baseline {path} line {n} is cut short: the file ends inside this row without a line end, "
                                f"and its samples' median ({statistics.median(samples):.6g}) is not its p50_ms ({p50:.6g}) "
                                "as `compare --export-baseline` writes them; export the baseline again")
    if not out:
        raise BaselineError(f"baseline {path} has no rows")
    return out


def _csv_rows(path: Path) -> tuple[list[dict[str, str]], list[str], list[int], bool]:
    """(rows as dicts, header columns, each row's line number, whether the file ends with a line
    end) of a baseline CSV. A row with another number of fields than the header is refused naming
    its line: csv.DictReader filled a short row's missing fields with None, so a file cut mid-row
    (a copy interrupted, a full disk) read as a smaller valid baseline, and CI passed with the
    configs after the cut called "new". The line-end flag lets the caller check a last row that
    has all its fields but may have lost the end of its last one."""
    try:
        with open(path, newline="") as fh:
            text = fh.read()
        reader = csv.reader(io.StringIO(text, newline=""))
        columns = next(reader, [])
        rows, lines = [], []
        for fields in reader:
            if not fields:
                continue  # a blank line, skipped as csv.DictReader skipped it
            if len(fields) != len(columns):
                raise BaselineError(f"baseline {path} line {reader.line_num} is cut short or damaged: it has {len(fields)} "
                                    f"fields where the header has {len(columns)}")
            rows.append(dict(zip(columns, (read_spreadsheet_text(v) for v in fields))))
            lines.append(reader.line_num)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:  # a binary file; a field over csv's size limit
        raise BaselineError(f"baseline {path} is unreadable: {type(exc).__name__}: {str(exc)[:200]}") from None
    return rows, columns, lines, text.endswith(("\n", "\r"))


def _cut_samples(samples: list[float], p50: float) -> bool:
    """Whether a row's samples disagree with its p50_ms beyond the rounding to 6 significant
    digits `write_baseline_csv` applies to both: the p50 a run stores is its samples' median
    (benchmark_runners.stats), so a last sample list cut mid-number ("2763.89" to "2") shows."""
    return abs(statistics.median(samples) - p50) > 1e-4 * p50


def write_baseline_csv(sets: list[SampleSet], path: Path) -> Path:
    """The CSV form of sample sets, readable back as a baseline (samples kept). Written through a
    temporary file and a rename: written in place, a full disk cut the file short and the old
    baseline was gone, and the cut file read back as a smaller baseline (its last row's samples
    cut mid-list), which passed CI with the rest of the configs "new"."""
    from devicefit.results_io import write_text_atomic

    path = Path(path)
    with io.StringIO(newline="") as fh:
        writer = csv.writer(fh)
        # device_profile: a 1-thread or AVX2-capped row is another device of the same fingerprint;
        # without it, read back, such a row was the unconstrained CPU's config a second time
        writer.writerow(["model", "device_kind", "backend", "precision", "mode", "batch_size", "input_dims", "run_id",
                         "hardware_fingerprint", "device_profile", "p50_ms", "samples_ms"])
        for s in sets:
            i = s.identity
            text = [spreadsheet_text(t) for t in (i.model, i.device_kind, i.backend, i.precision, i.mode)]
            writer.writerow([*text, i.batch_size, spreadsheet_text(i.input_dims or ""), spreadsheet_text(s.run_id or ""),
                             spreadsheet_text(s.hardware_fingerprint or ""), spreadsheet_text(i.device_profile or ""),
                             f"{s.p50_ms:.6g}", ";".join(f"{x:.6g}" for x in s.samples_ms)])
        text = fh.getvalue()
    write_text_atomic(path, text)
    return path


def _once_each(path: Path, sets: list[SampleSet]) -> list[SampleSet]:
    """The sets of a baseline file that holds each config of a machine once. A config given twice
    (two files concatenated, a row pasted again) matched its first row only and its second copy
    was reported "missing" from this run; two different figures for one config leave no way to
    say which is the baseline."""
    seen: dict[tuple[ConfigIdentity, str | None], int] = {}
    for n, s in enumerate(sets):
        key = (s.identity, s.hardware_fingerprint)
        if key in seen:
            machine = f" on {s.hardware_fingerprint}" if s.hardware_fingerprint else ""
            raise BaselineError(f"baseline {path} holds {s.identity.label()}{machine} twice (entries {seen[key] + 1} and {n + 1}): "
                                "keep one row per config and machine")
        seen[key] = n
    return sets


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
        return f"CSV {path}", _once_each(path, sets_from_csv(path))
    if path.suffix.lower() == ".json" or path.is_file():
        if not path.is_file():
            raise BaselineError(f"baseline file {path} does not exist")
        return f"results document {path}", _once_each(path, sets_from_document(path))
    if database is None:
        raise BaselineError(f"baseline {spec!r} is not a file, and there is no database to look up a run id in")
    try:
        return f"run {spec}", current_sets(database, spec.removeprefix("run:"))
    except BaselineError:
        raise BaselineError(f"baseline {spec!r} is neither a file, nor 'previous', nor a run id in {database}") from None
