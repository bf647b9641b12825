"""Readers of the files the pipeline publishes under outputs/: a damaged one is an error naming
it, never an answer that silently leaves its figures out (found by a fault hunt, 2026-11-30)."""
from __future__ import annotations

import pytest

from tests.api.server import call, running

DAMAGED = {"cut-short": b'{"format": "devicefit.benchmark_snapshot/1", "generated_at": "2026-11-30T00:00:00Z", "rows": [{"mo',
           "row-not-an-object": b'{"format": "devicefit.benchmark_snapshot/1", "generated_at": "x", "database": "d", "rows": [1]}'}


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    from devicefit.api.app import Settings, create_app

    root = tmp_path_factory.mktemp("cold-api-data")
    with running(create_app(Settings(benchmark_dir=root, warm_models=()))) as base:
        yield base, root


@pytest.mark.parametrize("content", DAMAGED.values(), ids=DAMAGED.keys())
def test_a_damaged_snapshot_is_503_for_the_analysis_not_an_answer_without_its_measurements(cold, content):
    """/analysis/model (and `devicefit analyze --model`) took a damaged benchmarks.json for none and
    answered every measured config as predicted, while /benchmarks refused the same file."""
    base, root = cold
    snapshot = root / "outputs" / "benchmarks.json"
    snapshot.parent.mkdir(exist_ok=True)
    snapshot.write_bytes(content)
    try:
        code, r = call(base, "/analysis/model", {"model_name": "bert-tiny", "batch_sizes": [1], "hardware_platforms": ["cpu"]})
        assert code == 503 and "benchmarks.json" in r["message"], (code, r)
    finally:
        snapshot.unlink()
    code, r = call(base, "/analysis/model", {"model_name": "bert-tiny", "batch_sizes": [1], "hardware_platforms": ["cpu"]})
    assert code == 200 and r["benchmark_snapshot"] is None, (code, r)  # none published yet: predictions, as before


def test_the_cli_analysis_over_a_damaged_snapshot_names_it(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from devicefit.cli import app

    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path))
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "benchmarks.json").write_bytes(DAMAGED["cut-short"])
    out = CliRunner().invoke(app, ["analyze", "--model", "bert-tiny", "--batch-sizes", "1", "--hardware", "cpu", "--json"])
    assert out.exit_code == 2 and "benchmarks.json is unreadable" in out.output, out.output


def test_readers_of_the_aggregates_say_when_the_table_is_older_than_the_measurements(tmp_path, monkeypatch):
    """`devicefit ingest` stores rows without aggregating them: `report`, `analyze --output` and
    `recommendations` read the aggregates table alone and left out, silently, every config
    ingested since (337 of 537 configs after a second machine's dataset was ingested); a store
    only ingested into was "no aggregates yet"."""
    from pathlib import Path

    from typer.testing import CliRunner

    from devicefit.cli import app
    from devicefit.ingest import ingest_file
    from devicefit.paths import DataPaths
    from devicefit.pipeline import load_results, refresh_aggregates
    from devicefit.reports.data import load_report_data

    datasets = Path(__file__).resolve().parents[2] / "benchmarks" / "datasets"
    paths = DataPaths(tmp_path / "data")
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(paths.root))
    ingest_file(datasets / "epyc-2c-run33" / "partition__cpu-245a6e58dfb9__bert-tiny.json", paths.raw)
    load_results(paths)
    data = load_report_data(paths)  # ingested, never aggregated: reported from the measurements
    assert data.aggregates and "has not aggregated its measurements yet" in data.note
    before = len(refresh_aggregates(paths))
    assert load_report_data(paths).note is None
    ingest_file(datasets / "xeon-spr-2c-calibrated" / "partition__cpu__bert-tiny.json", paths.raw)
    load_results(paths)
    data = load_report_data(paths)
    assert len(data.aggregates) == before and f"aggregates ({before} configs) are older than its measurements" in data.note
    out = CliRunner().invoke(app, ["analyze", "--output", str(tmp_path / "analysis.csv")])
    assert out.exit_code == 0 and "are older than its measurements" in out.output, out.output
    assert "are older than" in (write_index(data, tmp_path))
    after = len(refresh_aggregates(paths))
    assert after > before and load_report_data(paths).note is None


def write_index(data, tmp_path) -> str:
    from devicefit.reports.dashboard import write_report

    return write_report(data, tmp_path / "report", png=False).index.read_text()


@pytest.mark.parametrize("predictor, reason", [
    ({"validation": None}, "validation is damaged"), ({"validation": {"targets": 5}}, "validation is damaged"),
    ('{"format": "%s", "valid', "is unreadable"), (None, "no trained predictor is published yet")])
def test_a_damaged_predictor_leaves_its_figure_out_saying_so_not_the_report(tmp_path, predictor, reason):
    """A published predictor whose validation lacked a key ended `devicefit report` (and the
    benchmark_reports asset) with a KeyError traceback; an unreadable one left its figure out as
    "the measurements hold nothing this figure can show yet"."""
    import json
    from pathlib import Path

    from devicefit.ingest import ingest_file
    from devicefit.paths import DataPaths
    from devicefit.pipeline import load_results
    from devicefit.predict.training import ARTIFACT_FORMAT
    from devicefit.reports.dashboard import write_report
    from devicefit.reports.data import load_report_data

    paths = DataPaths(tmp_path / "data")
    ingest_file(Path(__file__).resolve().parents[2] / "benchmarks" / "datasets" / "epyc-2c-run33" /
                "partition__cpu-245a6e58dfb9__bert-tiny.json", paths.raw)
    load_results(paths)
    if predictor is not None:
        (paths.root / "predictors").mkdir()
        text = (predictor % ARTIFACT_FORMAT if isinstance(predictor, str)
                else json.dumps({"format": ARTIFACT_FORMAT, "version": "v", **predictor}))
        (paths.root / "predictors" / "current.json").write_text(text)
    out = write_report(load_report_data(paths), tmp_path / "report", png=False)
    assert reason in out.missing["predicted_vs_measured"], out.missing
    assert "hardware_comparison" in out.html and reason in out.index.read_text().replace("&#x27;", "'")
