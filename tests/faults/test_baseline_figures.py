"""Baseline files whose figures or rows no measurement wrote: each is refused naming the file and
the problem, never a comparison that passes CI having compared nothing (found by a fault hunt,
2026-11-30)."""
import json
from pathlib import Path

import pytest

from devicefit.reports import regression

IDENTITY = regression.ConfigIdentity("bert-tiny", "cpu", "torch", "fp32", "inference", 1, None)
CURRENT = [regression.SampleSet(IDENTITY, [10.0, 10.1, 10.2, 10.3], 10.15, "now", "cpu-aaaa")]
CSV_HEADER = "model,device_kind,backend,precision,mode,batch_size,hardware_fingerprint,p50_ms,samples_ms\n"


@pytest.mark.parametrize("p50, samples", [("nan", ""), ("inf", ""), ("0", ""), ("-5", ""), ("", "nan;nan;nan;nan"),
                                          ("5", "1;inf;2;3")])
def test_a_csv_baseline_time_that_is_no_time_is_refused(tmp_path, p50, samples):
    """A NaN median made every config 'unchanged' and exit 0 (and wrote NaN into the strict-JSON
    CI report); infinity made every config an 'improvement'; 0 ended in 'both sides need samples
    or a median', naming neither file nor line."""
    path = tmp_path / "baseline.csv"
    path.write_text(CSV_HEADER + f"bert-tiny,cpu,torch,fp32,inference,1,cpu-aaaa,{p50},{samples}\n")
    with pytest.raises(regression.BaselineError, match=rf"baseline {path} line 2: .* is not a positive finite time in ms"):
        regression.check_against_baseline(CURRENT, str(path), None, 0.1)


@pytest.mark.parametrize("document", [
    {"results": [{"status": "ok", "model": "bert-tiny", "device": "cpu", "precision": "fp32", "mode": "inference", "batch_size": 1,
                  "p50_ms": float("nan"), "samples_ms": [], "hardware_fingerprint": "cpu-aaaa"}]},
    {"results": [{"status": "ok", "model": "bert-tiny", "device": "cpu", "precision": "fp32", "mode": "inference", "batch_size": 1,
                  "p50_ms": 10.0, "samples_ms": [float("nan")] * 4, "hardware_fingerprint": "cpu-aaaa"}]},
    {"format": regression.CI_FORMAT, "comparisons": [{"identity": IDENTITY.__dict__, "current_p50_ms": float("inf")}]},
])
def test_a_json_baseline_with_nan_or_infinity_is_refused(tmp_path, document):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(document))  # json writes NaN and Infinity, and json.loads reads them back
    with pytest.raises(regression.BaselineError, match="is not a positive finite time in ms"):
        regression.check_against_baseline(CURRENT, str(path), None, 0.1)


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_a_baseline_holding_a_config_twice_is_refused_not_half_missing(tmp_path, suffix):
    """A baseline CSV pasted twice compared each config with its first row and reported every
    second copy 'missing' from this run (337 unchanged, 337 missing); two different figures for
    one config were settled silently by file order."""
    path = tmp_path / f"baseline{suffix}"
    if suffix == ".csv":
        row = "bert-tiny,cpu,torch,fp32,inference,1,cpu-aaaa,10.1,10;10.1;10.2\n"
        path.write_text(CSV_HEADER + row + row.replace("10.1,", "20.1,"))
    else:
        row = {"status": "ok", "model": "bert-tiny", "device": "cpu", "precision": "fp32", "mode": "inference", "batch_size": 1,
               "p50_ms": 10.1, "samples_ms": [10.0, 10.1, 10.2], "hardware_fingerprint": "cpu-aaaa"}
        path.write_text(json.dumps({"results": [row, row]}))
    with pytest.raises(regression.BaselineError, match=r"holds bert-tiny · cpu · fp32 · inference · batch 1 on cpu-aaaa twice"):
        regression.check_against_baseline(CURRENT, str(path), None, 0.1)
    other = tmp_path / f"two_machines{suffix}"  # one config on two machines is two baselines, each its machine's
    other.write_text(path.read_text().replace("cpu-aaaa", "cpu-bbbb", 1))
    report = regression.check_against_baseline(CURRENT, str(other), None, 0.1)
    assert report["summary"]["missing"] == 1 and report["summary"]["new"] == 0


def test_an_exported_baseline_keeps_a_constraint_profile_apart_from_its_cpu(tmp_path):
    """`compare --export-baseline` wrote no device_profile column: read back, a store's `t1` rows
    were the unconstrained CPU's configs a second time (537 configs of a store holding the Xeon
    and its t1/avx2 profiles compared with their own export: 200 new, 200 missing)."""
    samples = [10.0, 10.1, 10.2, 10.3]
    t1 = regression.ConfigIdentity(*[getattr(IDENTITY, f) for f in ("model", "device_kind", "backend", "precision", "mode", "batch_size",
                                                                      "input_dims")], "t1")
    current = [*CURRENT, regression.SampleSet(t1, [2 * x for x in samples], 20.15, "now", "cpu-aaaa")]
    path = regression.write_baseline_csv(current, tmp_path / "baseline.csv")
    report = regression.check_against_baseline(current, str(path), None, 0.1)
    assert report["summary"]["unchanged"] == 2, report["summary"]



def test_compare_refuses_an_output_it_cannot_write_before_comparing_with_exit_2_not_the_regression_exit(tmp_path, monkeypatch):
    """`compare --output-ci DIR` compared, printed 'pass' and then exited 1 on the write's
    IsADirectoryError: the exit code that says 'a regression' (a CI gate read a path typo as one)."""
    from typer.testing import CliRunner

    from devicefit.cli import app
    from devicefit.ingest import ingest_file
    from devicefit.paths import DataPaths
    from devicefit.pipeline import load_results

    paths = DataPaths(tmp_path / "data")
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(paths.root))
    ingest_file(Path(__file__).resolve().parents[2] / "benchmarks" / "datasets" / "epyc-2c-run33" /
                "partition__cpu-245a6e58dfb9__bert-tiny.json", paths.raw)
    load_results(paths)
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "a_file").write_text("")
    for args in (["--output-ci", str(tmp_path / "a_dir")], ["--export-baseline", str(tmp_path / "a_file" / "b.csv")],
                 ["--output-ci", str(tmp_path / "x"), "--export-baseline", str(tmp_path / "x")]):
        out = CliRunner().invoke(app, ["compare", "--baseline", "previous", *args])
        assert out.exit_code == 2 and args[1] in out.output, (args, out.exit_code, out.output)
    out = CliRunner().invoke(app, ["compare", "--baseline", "previous", "--output-ci", str(tmp_path / "ci.json")])
    assert out.exit_code == 0 and (tmp_path / "ci.json").is_file(), out.output  # every config new: nothing regressed


def test_an_export_over_a_full_disk_keeps_the_old_baseline_whole(small_disk):
    """`compare --export-baseline baseline.csv` wrote in place: on a full disk the old baseline was
    gone and a file cut mid-row was left, which read back as a smaller baseline (321 of 537 configs,
    the rest 'new', exit 0)."""
    many = [regression.SampleSet(regression.ConfigIdentity(f"model-{i}", "cpu", "torch", "fp32", "inference", 1, None),
                                 [10.0 + j / 7 for j in range(200)], 10.5, "now", "cpu-aaaa") for i in range(400)]
    path = regression.write_baseline_csv(CURRENT, small_disk / "baseline.csv")
    before = path.read_bytes()
    (small_disk / "fill").write_bytes(b"\0" * (2 * 2**20 - len(before) - 64 * 1024))
    with pytest.raises(OSError):
        regression.write_baseline_csv(many, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["baseline.csv", "fill"]  # no temporary file left


def test_a_ci_report_that_compared_nothing_is_no_baseline(tmp_path):
    """`benchmark --output-ci` without --compare-to writes a CI report with its results and no
    comparisons; as `--compare-to` baseline it called every config 'new' and passed (537 new, exit 0)."""
    path = tmp_path / "ci.json"
    path.write_text(json.dumps({"format": regression.CI_FORMAT, "status": "pass", "comparisons": [], "results": [
        {"model": "bert-tiny", "device": "cpu", "precision": "fp32", "mode": "inference", "batch_size": 1, "status": "ok", "p50_ms": 10.1}]}))
    with pytest.raises(regression.BaselineError, match="compared no measured config"):
        regression.check_against_baseline(CURRENT, str(path), None, 0.1)
    path.write_text(json.dumps(regression.check_against_baseline(CURRENT, str(regression.write_baseline_csv(CURRENT, tmp_path / "b.csv")),
                                                                  None, 0.1)))
    assert regression.check_against_baseline(CURRENT, str(path), None, 0.1)["summary"]["unchanged"] == 1  # one that compared is one


@pytest.mark.parametrize("found", ["devicefit.benchmark_results/2", "devicefit.regression_report/2", "optimum-benchmark"])
def test_a_results_document_of_another_format_is_refused_not_read_as_this_ones(tmp_path, found):
    """A results document or CI report of another format version was read as this version's
    results (a '/2' CI report as a results document), comparing whatever its fields matched."""
    row = {"status": "ok", "model": "bert-tiny", "device": "cpu", "precision": "fp32", "mode": "inference", "batch_size": 1,
           "p50_ms": 10.1, "samples_ms": [10.0, 10.1, 10.2], "hardware_fingerprint": "cpu-aaaa"}
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"format": found, "results": [row]}))
    with pytest.raises(regression.BaselineError, match=f"has format '{found}'; this version reads"):
        regression.check_against_baseline(CURRENT, str(path), None, 0.1)
    path.write_text(json.dumps({"format": "devicefit.benchmark_results/1", "results": [row]}))
    assert regression.check_against_baseline(CURRENT, str(path), None, 0.1)["summary"]["unchanged"] == 1


def test_the_previous_run_of_an_older_run_is_the_one_before_it_not_a_later_one(tmp_path):
    """`compare --run <run 32> --baseline previous` took the newest other run (run 33, measured
    after it) as its 'previous': run 33's speed-up was reported as run 32's regression (exit 1)."""
    from devicefit.ingest import ingest_file
    from devicefit.paths import DataPaths
    from devicefit.pipeline import load_results

    paths = DataPaths(tmp_path / "data")
    datasets = Path(__file__).resolve().parents[2] / "benchmarks" / "datasets"
    runs = []
    for n in (31, 32, 33):
        document = json.loads((datasets / f"epyc-2c-run{n}" / "partition__cpu-245a6e58dfb9__bert-tiny.json").read_text())
        runs.append(document["run_id"])
        ingest_file(datasets / f"epyc-2c-run{n}" / "partition__cpu-245a6e58dfb9__bert-tiny.json", paths.raw)
        load_results(paths)
    for current_run, previous_run in ((runs[1], runs[0]), (runs[2], runs[1]), (None, runs[1]), (runs[0], None)):
        current = regression.current_sets(paths.database, current_run)
        previous = regression.previous_sets(paths.database, current)
        assert {s.run_id for s in previous.values()} == ({previous_run} if previous_run else set()), (current_run, previous)
