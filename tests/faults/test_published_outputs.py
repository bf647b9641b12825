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
