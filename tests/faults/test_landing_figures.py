"""Figures of a landing row that no measurement makes, and JSON that is not JSON: each refused by
name before it is stored, so the aggregates, the published snapshot and /benchmarks never serve
them; and a run landed again with corrected figures replaces its samples' history too (found by
a fault hunt, 2026-11-30)."""
import json
import math
import re

import pytest

from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
from devicefit import store
from devicefit.landing import LandingFileError, load_landing_files, write_landing
from devicefit.paths import DataPaths
from devicefit.results_io import results_document
from tests.pipelines.test_store import _doc, _row


def _write_raw(path, document) -> None:
    """A landing file as anything might write it: no validation on the way (NaN as json writes it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))


def _no_constant(name):
    raise AssertionError(f"the published snapshot holds {name}, which is not JSON")


@pytest.mark.parametrize("change, named", [
    ({"p95_ms": -1e300}, "p95_ms -1e+300"),
    ({"p99_ms": 1e308}, "p99_ms 1e+308"),
    ({"ttft_ms": 1e308}, "ttft_ms 1e+308"),
    ({"forward_ms": -5.0}, "forward_ms -5.0"),
    ({"min_ms": 0.0}, "min_ms 0.0"),
    ({"stdev_ms": -1.0}, "stdev_ms -1.0"),
    ({"warmup_ms": [3.0, -2.0]}, "warmup_ms -2.0"),
    ({"decode_tokens_per_s": 1e300}, "decode_tokens_per_s 1e+300"),
    ({"phase_samples_ms": {"forward": [1.0, -1.0]}}, "phase_samples_ms['forward'] -1.0"),
    ({"p90_ms": 20.0, "p95_ms": 12.0}, "p90_ms 20.0 above p95_ms 12.0"),
    ({"max_ms": 5.0}, "p50_ms 10.0 above max_ms 5.0"),
    ({"ci_low_ms": 11.0, "ci_high_ms": 12.0}, "the median's interval 11.0 to 12.0 ms does not hold its p50 10.0"),
])
def test_an_ok_row_with_a_figure_no_measurement_makes_is_refused_by_name(tmp_path, change, named):
    """A p95 of -1e300 (or a ttft of 1e308, a p99 under the p50) loaded, passed the store's checks
    and /benchmarks served it: only the samples, p50, mean and throughput had bounds."""
    with pytest.raises(LandingFileError, match=rf"results\[0\] is 'ok' with {re.escape(named)}"):
        write_landing(tmp_path, "ingest:x", _doc([{**_row(), **change}]))


def test_real_percentiles_and_phases_still_load(tmp_path):
    row = {**_row(), "min_ms": 9.9, "p90_ms": 10.1, "p95_ms": 10.1, "p99_ms": 10.1, "max_ms": 10.1, "stdev_ms": 0.0, "cv": 0.0,
           "ci_low_ms": 9.9, "ci_high_ms": 10.1, "warmup_ms": [30.0, 11.0], "phase_samples_ms": {"forward": [3.0, 3.1]}}
    write_landing(tmp_path, "ingest:x", _doc([row]))


@pytest.mark.parametrize("change, field", [
    ({"input": {"dims": {"seq_length": 128, "x": math.inf}}}, "input.dims"),
    ({"output_check": {"max_abs": math.nan}}, "output_check"),
    ({"policy": {"x": -math.inf}}, "policy"),
    ({"environment": {"hostname": "h", "versions": {"torch": math.nan}}}, "environment.versions"),
    ({"backend_config": {"threads": [2, math.inf]}}, "backend_config"),
])
def test_nan_or_infinity_inside_a_json_column_is_quarantined_and_never_published(tmp_path, change, field):
    """Python's json reads NaN and Infinity; JSON has neither. They were stored in the JSON
    columns as such and the published benchmarks.json held `"x": Infinity`."""
    from devicefit.pipeline import refresh_aggregates

    paths = DataPaths(tmp_path)
    write_landing(paths.raw, "partition:cpu|bert-tiny", _doc([_row(run_id="base")]))
    _write_raw(paths.raw / "ingest__nan.json", {**_doc([{**_row(precision="int8", run_id="nan"), **change}]), "source_key": "ingest:nan"})
    report = load_landing_files(paths.database, paths.raw)
    reason = dict(report.quarantined)["ingest__nan.json"]
    assert field in reason and "NaN or infinite number" in reason, reason
    assert report.loaded == [("partition:cpu|bert-tiny", 1)]
    refresh_aggregates(paths)
    json.loads((paths.outputs / "benchmarks.json").read_text(), parse_constant=_no_constant)


def test_a_document_devicefit_writes_keeps_an_infinite_figure_as_text_and_loads(tmp_path):
    """OpenVINO's agreement check records an infinite difference where the output shapes differ
    (a failed row): the writer keeps it as text, so its own file is never refused."""
    from devicefit.landing_bounds import finite_json

    cfg = BenchmarkConfig("bert-tiny", device="openvino:CPU", backend="openvino")
    failed = BenchmarkResult.for_config(cfg, "r1", "2026-11-22T00:00:00+00:00", "failed", "OutputMismatch: shapes differ",
                                        output_check={"max_abs_diff": math.inf, "relative": math.nan, "shape": [1, 2]})
    document = results_document("r1", [failed], {"probes": {"cpu": {"note": math.nan}}})
    assert document["results"][0]["output_check"] == {"max_abs_diff": "inf", "relative": "nan", "shape": [1, 2]}
    assert document["hardware"]["probes"]["cpu"]["note"] == "nan"
    json.loads(json.dumps(document), parse_constant=_no_constant)
    write_landing(tmp_path, "partition:openvino|bert-tiny", document)
    assert finite_json({"a": [1.5, -math.inf, {"b": 2}]}) == {"a": [1.5, "-inf", {"b": 2}]}


def test_a_memory_breakdown_figure_that_is_no_byte_count_is_refused_and_aggregation_goes_on(tmp_path):
    """"497 MB" in memory_breakdown.weights_bytes loaded (the column is JSON), and every later
    aggregation of the store failed with DuckDB's conversion error, naming no file or row."""
    from devicefit.pipeline import refresh_aggregates

    breakdown = {"weights_bytes": 497_000_000, "kv_cache_bytes": 1024, "activation_bytes": 2048, "process_bytes": None,
                 "measured_over_estimate": 1.1, "activation_method": "measured"}
    with pytest.raises(LandingFileError, match=r"memory_breakdown\.weights_bytes"):
        write_landing(tmp_path / "refused", "ingest:x", _doc([{**_row(), "memory_breakdown": {**breakdown, "weights_bytes": "497 MB"}}]))
    with pytest.raises(LandingFileError, match=r"memory_breakdown\.kv_cache_bytes"):
        write_landing(tmp_path / "refused", "ingest:x", _doc([{**_row(), "memory_breakdown": {**breakdown, "kv_cache_bytes": -1}}]))
    paths = DataPaths(tmp_path)
    write_landing(paths.raw, "partition:cpu|bert-tiny", _doc([{**_row(), "memory_breakdown": breakdown}]))
    _write_raw(paths.raw / "ingest__mb.json",
               {**_doc([{**_row(precision="int8", run_id="mb"), "memory_breakdown": {"weights_bytes": "497 MB"}}]), "source_key": "ingest:mb"})
    report = load_landing_files(paths.database, paths.raw)
    assert "memory_breakdown.weights_bytes" in dict(report.quarantined)["ingest__mb.json"]
    frame = refresh_aggregates(paths)
    assert [r["breakdown_weights_bytes"] for r in frame] == [497_000_000]


def test_a_run_landed_again_with_corrected_figures_replaces_its_sample_history(tmp_path):
    """sample_history kept the first version of a (run, config) for good (ON CONFLICT DO
    NOTHING): `compare` and baseline exports read 3.45 ms where the store held 10.35."""
    paths = DataPaths(tmp_path)
    write_landing(paths.raw, "partition:cpu|bert-tiny", _doc([_row(p50=3.45)]))
    load_landing_files(paths.database, paths.raw)
    write_landing(paths.raw, "partition:cpu|bert-tiny", _doc([_row(p50=10.35)]))
    load_landing_files(paths.database, paths.raw)
    con = store.connect(paths.database, read_only=True)
    try:
        assert con.execute("SELECT p50_ms FROM measurements").fetchall() == [(10.35,)]
        assert con.execute("SELECT p50_ms, list_max(samples_ms), source_key FROM sample_history").fetchall() == [
            (10.35, pytest.approx(10.35 * 1.01), "partition:cpu|bert-tiny")]
    finally:
        con.close()
