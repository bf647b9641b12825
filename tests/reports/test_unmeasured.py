"""A baseline config the compared run has no ok row for is `missing`; where the run skipped it
(over the quick profile's call budget) or it failed, the comparison says so with the row's own
reason (devicefit/reports/unmeasured.py), in the CI report and on the terminal."""
import json
from dataclasses import replace

from typer.testing import CliRunner

from benchmark_runners.call_budget import REASON_CODE
from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
from devicefit import store
from devicefit.reports import regression, unmeasured
from devicefit.results_io import results_document
from pipelines.cli import app

FINGERPRINT = "cpu-aaaa"
WHY = "not measured: one call is predicted to take 3.1 s, over the quick profile's 2.25 s budget"


def _row(run: str, batch: int, status: str = "ok", fingerprint: str = FINGERPRINT, **extra) -> dict:
    config = replace(BenchmarkConfig("bert-tiny"), batch_size=batch)
    samples = [10.0 * batch * f for f in (0.99, 1.0, 1.01, 1.0, 0.995, 1.005)]
    figures = {"p50_ms": 10.0 * batch, "mean_ms": sum(samples) / 6, "samples_ms": samples,
               "throughput_samples_per_s": 1000.0 / 10.0, "iterations": 6}
    error, code = {"ok": (None, None), "skipped": (WHY, REASON_CODE), "failed": ("RuntimeError: boom", "exception")}[status]
    return BenchmarkResult.for_config(config, run, f"2026-11-30T0{'1' if run == 'r1' else '2'}:00:00+00:00", status, error, code,
                                      hardware_fingerprint=fingerprint, family="embedding",
                                      **(figures if status == "ok" else {}), **extra).to_json()


def test_a_config_the_run_skipped_is_missing_with_the_runs_reason(tmp_path):
    path = tmp_path / "devicefit.duckdb"
    store.init_db(path)
    con = store.connect(path)
    try:
        store.replace_source(con, "partition:r1", "partition", {**results_document("r1", [], {}),
                                                                "results": [_row("r1", b) for b in (1, 4, 16)]})
        store.replace_source(con, "partition:r2", "partition", {**results_document("r2", [], {}),
                                                                "results": [_row("r2", 1), _row("r2", 16, "skipped")]})
    finally:
        con.close()
    ci = tmp_path / "ci.json"
    out = CliRunner().invoke(app, ["compare", "--run", "r2", "--baseline", "r1", "--benchmark-dir", str(tmp_path),
                                   "--output-ci", str(ci)])
    assert out.exit_code == 0, out.output
    methods = {c["identity"]["batch_size"]: (c["verdict"], c["method"]) for c in json.loads(ci.read_text())["comparisons"]}
    assert methods[16] == ("missing", f"in the baseline; skipped in this run ({REASON_CODE}): {WHY}")
    assert methods[4] == ("missing", "in the baseline, not in this run")  # r2 has no row of it at all
    assert methods[1][0] == "unchanged"
    assert f"batch 16: missing, skipped in this run ({REASON_CODE})" in " ".join(out.output.split())
    assert "batch 4: missing" not in out.output  # a config the run never had is counted, not listed


def test_another_machines_skip_does_not_explain_a_missing_config(tmp_path):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"results": [_row("r1", b) for b in (1, 16)]}))
    results = [_row("r2", 1), _row("r2", 16, "skipped", fingerprint="cpu-bbbb")]
    current = regression.sets_from_results(results)
    report = regression.check_against_baseline(current, str(baseline), None, 0.1, unmeasured=unmeasured.from_results(results))
    missing = [c for c in report["comparisons"] if c["verdict"] == "missing"]
    assert [c["method"] for c in missing] == ["in the baseline, not in this run"]
    results[1] = _row("r2", 16, "failed")
    report = regression.check_against_baseline(current, str(baseline), None, 0.1, unmeasured=unmeasured.from_results(results))
    assert [c["method"] for c in report["comparisons"] if c["verdict"] == "missing"] == [
        "in the baseline; failed in this run (exception): RuntimeError: boom"]


def test_a_skip_at_other_inputs_does_not_explain_a_missing_config(tmp_path):
    """The run skipped bert-tiny at 512 tokens; the baseline's config at 128 is missing for no
    reason the run recorded."""
    base = _row("r1", 16)
    base["input"] = {"dims": {"seq_length": 128}}
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"results": [_row("r1", 1), base]}))
    skipped = _row("r2", 16, "skipped")
    skipped["input"] = {"dims": {"seq_length": 512}}
    results = [_row("r2", 1), skipped]
    report = regression.check_against_baseline(regression.sets_from_results(results), str(baseline), None, 0.1,
                                               unmeasured=unmeasured.from_results(results))
    assert [c["method"] for c in report["comparisons"] if c["verdict"] == "missing"] == ["in the baseline, not in this run"]
    skipped["input"] = {"dims": {"seq_length": 128}}
    report = regression.check_against_baseline(regression.sets_from_results(results), str(baseline), None, 0.1,
                                               unmeasured=unmeasured.from_results(results))
    assert [c["method"] for c in report["comparisons"] if c["verdict"] == "missing"] == [
        f"in the baseline; skipped in this run ({REASON_CODE}): {WHY}"]
