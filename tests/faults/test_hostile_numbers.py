"""Numbers and documents no user meant: NaN, infinities, values beyond a column's type, and
baselines whose shape is wrong. Each is refused with the problem named, before anything runs or
is stored (found by a fault hunt, 2026-11-27)."""
import json
import math

import pytest

from benchmark_runners.harness import TimingPolicy
from benchmark_runners.records import BenchmarkConfig
from devicefit.reports import regression


@pytest.mark.parametrize("field", ["max_time_s", "warmup_max_time_s", "cap_overrun", "ci_target"])
def test_a_nan_timing_cap_is_refused_not_a_cap_that_never_stops(field):
    with pytest.raises(ValueError, match=f"{field} must be a number, got nan|ci_target must be in"):
        TimingPolicy(**{field: math.nan})
    assert TimingPolicy(max_time_s=math.inf).max_time_s == math.inf  # no cap: max_iterations and the CI stop it


@pytest.mark.parametrize("timeout", [math.nan, math.inf, 1e300, 0.0, -1.0])
def test_a_timeout_that_no_clock_can_hold_is_refused(timeout):
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds up to 604,800"):
        BenchmarkConfig("bert-tiny", timeout_s=timeout)


@pytest.mark.parametrize("alpha", [math.nan, 5.0, -1.0, 0.0, 1.0])
def test_a_significance_level_outside_zero_to_one_is_refused(alpha):
    """At alpha NaN every p-value comparison is false: a 1e308-fold slowdown came out 'unchanged'."""
    with pytest.raises(ValueError, match="alpha must be between 0 and 1"):
        regression.compare([], [], 0.1, alpha)


@pytest.mark.parametrize("document", [
    {"format": regression.CI_FORMAT, "comparisons": [{"current_p50_ms": 1.0}]},
    {"format": regression.CI_FORMAT, "comparisons": 5},
    {"format": regression.CI_FORMAT, "comparisons": [{"current_p50_ms": 1.0, "identity": {"evil": 1}}]},
    {"format": regression.CI_FORMAT, "comparisons": ["x"]},
    {"results": [{"status": "ok", "model": "m", "device": 5, "precision": "fp32", "mode": "inference", "batch_size": 1, "p50_ms": 1}]},
    # a device's fingerprint that is not a string, and hardware blocks of the wrong shapes, beside it
    *({"hardware": hardware, "results": [{"status": "ok", "model": "m", "device": "openvino:CPU", "precision": "fp32", "mode": "inference",
                                          "batch_size": 1, "p50_ms": 1, "hardware_fingerprint": ["a"]}]}
      for hardware in ({}, "x", {"platforms": [1]}, {"platforms": {"cpu": {"devices": 5}}})),
])
def test_a_malformed_baseline_is_named_not_a_traceback(tmp_path, document):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(document))
    with pytest.raises(regression.BaselineError, match=str(path)):
        regression.sets_from_document(path)


def test_a_baseline_nested_past_the_parser_is_unreadable_not_a_crash(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    with pytest.raises(regression.BaselineError, match="is unreadable"):
        regression.sets_from_document(path)


def test_a_served_line_the_store_cannot_hold_is_left_out_not_the_whole_days_file(tmp_path, caplog):
    """A batch of 1e11 asked before the CLI had a bound was appended to the day's file; loading
    it failed the whole file (INT32 column) on every later run. Now that line is left out with a
    warning and the day's other predictions load."""
    from devicefit import store
    from devicefit.predict.served import read_served

    good = {"recorded_at": "2026-11-27T05:00:00.000+00:00", "predictor_version": "v", "origin": "cli", "model": "bert-tiny",
            "device_kind": "cpu", "device": "cpu@h", "backend": "torch", "precision": "fp32", "mode": "inference",
            "batch_size": 1, "seq_length": 128, "latency_ms": 3.0, "throughput": None, "memory_bytes": None, "source": "trained_predictor"}
    bad = [{**good, "batch_size": 99_999_999_999}, {**good, "latency_ms": "fast"}, {**good, "seq_length": 0},
           {**good, "model": None}, {**good, "recorded_at": "yesterday"}, [1, 2]]
    path = tmp_path / "served-2026-11-27.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [good, *bad, {**good, "batch_size": 4}]) + "\n" + '{"cut short')
    rows = read_served(path)
    assert [r["batch_size"] for r in rows] == [1, 4]
    assert sum("left out" in m for m in caplog.messages) == len(bad)
    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    store.replace_served_predictions(con, path.name, rows)
    assert con.execute("SELECT count(*) FROM predictions").fetchone()[0] == 2


def test_the_cli_bounds_an_asked_batch_as_the_api_does():
    from typer.testing import CliRunner

    from devicefit.api import schemas
    from devicefit.cli import app

    assert schemas.MAX_BATCH_SIZE == 4096
    for args, message in ((["predict", "--model", "bert-tiny", "--batch-size", "99999999999"], "up to 4096"),
                          (["select", "--model", "bert-tiny", "--batch-size", "5000"], "up to 4096"),
                          (["select", "--model", "bert-tiny", "--distributed", "--gpu-count", "-2"], "Invalid value for")):
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 2 and message in out.output, out.output


def test_a_config_asked_twice_is_measured_once(tmp_path, monkeypatch):
    """`benchmark -m bert-tiny,bert-tiny --batch-sizes 1,1` measured the same config four times
    (and BERT-TINY, the same model spelled otherwise, again under another config key)
    and wrote four rows with one run id and config key: `devicefit ingest` refused the file
    ("results[1] repeats run_id ... and config_key ...") and --database would have stored none
    (found by a fault hunt, 2026-11-29)."""
    from typer.testing import CliRunner

    import benchmark_runners.sweep as sweep
    from benchmark_runners.records import BenchmarkResult
    from devicefit.cli import app

    asked = []

    def fake_sweep(configs, run_id=None, on_event=None, inventory=None):
        asked.extend(configs)
        return [BenchmarkResult.for_config(c, run_id, "2026-11-29T00:00:00+00:00", "skipped", "not measured here") for c in configs]

    monkeypatch.setattr(sweep, "run_sweep", fake_sweep)
    monkeypatch.setattr(sweep, "start_worker_early", lambda *_a, **_k: None)
    out = CliRunner().invoke(app, ["benchmark", "--model", "bert-tiny,bert-tiny,BERT-TINY", "--batch-sizes", "1,1,2",
                                   "--precision", "fp32,fp32", "--json", str(tmp_path / "rows.json")])
    assert out.exit_code == 0, out.output
    assert [(c.model, c.batch_size, c.precision) for c in asked] == [("bert-tiny", 1, "fp32"), ("bert-tiny", 2, "fp32")]
    rows = json.loads((tmp_path / "rows.json").read_text())["results"]
    assert len({r["config_key"] for r in rows}) == len(rows) == 2


@pytest.mark.parametrize("content", [bytes(range(128, 256)) * 4, b"model,p50_ms\n" + b"a" * 200_000 + b",1\n"])
@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_a_binary_or_oversized_baseline_is_named_not_a_traceback(tmp_path, content, suffix):
    """A binary baseline was "error: 'utf-8' codec can't decode byte 0x80 ..." naming no file, and
    a CSV field over csv's 128 KiB limit escaped as a csv.Error traceback (found by a fault hunt,
    2026-11-29)."""
    path = tmp_path / f"baseline{suffix}"
    path.write_bytes(content)
    with pytest.raises(regression.BaselineError, match=f"baseline {path} is unreadable"):
        regression.load_baseline(str(path), None, [])


def test_a_ci_run_whose_every_config_failed_writes_its_failing_report(tmp_path, monkeypatch):
    """`benchmark --compare-to BASE --output-ci CI` where every config failed ended with "error:
    nothing measured to compare", exit 2 and no CI report: CI saw a usage error instead of the
    failed configs (found by a fault hunt, 2026-11-29)."""
    from typer.testing import CliRunner

    import benchmark_runners.sweep as sweep
    from benchmark_runners.records import BenchmarkResult
    from devicefit.cli import app

    def failing_sweep(configs, run_id=None, on_event=None, inventory=None):
        return [BenchmarkResult.for_config(c, run_id, "2026-11-29T00:00:00+00:00", "failed", "worker process killed by SIGKILL")
                for c in configs]

    monkeypatch.setattr(sweep, "run_sweep", failing_sweep)
    monkeypatch.setattr(sweep, "start_worker_early", lambda *_a, **_k: None)
    identity = regression.ConfigIdentity("bert-tiny", "cpu", "torch", "fp32", "inference", 1, None)
    baseline = regression.write_baseline_csv([regression.SampleSet(identity, [1.0] * 8, 1.0, "base")], tmp_path / "base.csv")
    ci = tmp_path / "ci.json"
    out = CliRunner().invoke(app, ["benchmark", "--model", "bert-tiny", "--compare-to", str(baseline), "--output-ci", str(ci)])
    assert out.exit_code == 1, out.output
    report = json.loads(ci.read_text())
    assert report["status"] == "fail" and [r["status"] for r in report["results"]] == ["failed"]
