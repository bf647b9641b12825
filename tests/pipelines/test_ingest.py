"""Ingest: own export and optimum-benchmark output land and load; malformed files are refused
with a message naming the problem, and nothing stored is touched."""
import json
import subprocess
import sys

import pytest

from benchmark_runners.records import BenchmarkConfig
from benchmark_runners.sweep import run_sweep
from devicefit import store
from devicefit.ingest import ingest_file
from devicefit.landing import LandingFileError, load_landing_files
from devicefit.paths import DataPaths
from devicefit.results_io import results_document, write_json_atomic
from tests.conftest import FAST_POLICY

LATENCIES_S = [0.0081, 0.0080, 0.0083, 0.0079, 0.0082, 0.0080, 0.0081, 0.0084]


def optimum_documents(**backend) -> tuple[dict, dict]:
    """(benchmark_config, benchmark_report) in the shape optimum-benchmark writes."""
    config = {
        "name": "pytorch_bert", "backend": {"name": "pytorch", "model": "bert-base-uncased", "device": "cuda",
                                             "device_ids": "0", "torch_dtype": "float16", **backend},
        "scenario": {"name": "inference", "input_shapes": {"batch_size": 4, "sequence_length": 128}},
        "launcher": {"name": "process"},
        "environment": {"cpu": "AMD EPYC 7R13", "cpu_count": 16, "cpu_ram_mb": 131072, "gpu": ["NVIDIA H100 80GB HBM3"],
                        "gpu_vram_mb": 81559, "transformers_version": "4.46.0", "optimum_benchmark_version": "0.5.0"},
    }
    n = len(LATENCIES_S)
    report = {
        "load": {"latency": {"unit": "s", "values": [1.7], "count": 1}},
        "forward": {"latency": {"unit": "s", "values": list(LATENCIES_S), "count": n, "mean": sum(LATENCIES_S) / n},
                    "throughput": {"unit": "samples/s", "value": 4 * n / sum(LATENCIES_S)},
                    "memory": {"unit": "MB", "max_ram": 2100.5, "max_allocated": 480.2, "max_reserved": 600.0}},
    }
    return config, report


def write_optimum_pair(directory, config, report):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "benchmark_config.json").write_text(json.dumps(config))
    (directory / "benchmark_report.json").write_text(json.dumps(report))
    return directory


def optimum_pair(tmp_path, **backend):
    """The shape optimum-benchmark writes (benchmark_config.json + benchmark_report.json)."""
    return write_optimum_pair(tmp_path / "optimum", *optimum_documents(**backend))


def test_optimum_benchmark_output_lands_and_loads(tmp_path):
    paths = DataPaths(tmp_path / "data")
    result = ingest_file(optimum_pair(tmp_path), paths.raw)
    assert result.format == "optimum-benchmark" and result.rows == 1
    load_landing_files(paths.database, paths.raw)
    con = store.connect(paths.database, read_only=True)
    [row] = store.query(con, "SELECT * FROM measurements")
    assert (row["device"], row["precision"], row["batch_size"], row["seq_length"]) == ("cuda:0", "fp16", 4, 128)
    assert row["p50_ms"] == pytest.approx(8.1)
    assert row["device_name"] == "NVIDIA H100 80GB HBM3" and row["hardware_fingerprint"].startswith("cuda-")
    # optimum-benchmark's MB are 10^6 bytes ("MB, not MiB"): read as MiB they were 4.9% high
    assert (row["device_allocated_peak_bytes"], row["peak_rss_bytes"]) == (480_200_000, 2_100_500_000)
    con.close()


def test_reingesting_the_same_content_replaces_instead_of_adding(tmp_path):
    paths = DataPaths(tmp_path / "data")
    pair = optimum_pair(tmp_path)
    first = ingest_file(pair, paths.raw)
    second = ingest_file(pair / "benchmark_report.json", paths.raw)  # the same content, named differently
    assert first.source_key == second.source_key
    load_landing_files(paths.database, paths.raw)
    con = store.connect(paths.database, read_only=True)
    assert con.execute("SELECT count(*) FROM measurements").fetchone()[0] == 1
    con.close()


def test_own_export_lands(tmp_path):
    rows = run_sweep([BenchmarkConfig("bert-tiny", policy=FAST_POLICY)])
    exported = tmp_path / "export.json"
    write_json_atomic(exported, results_document(rows[0].run_id, rows, {}))
    result = ingest_file(exported, tmp_path / "raw")
    assert result.rows == 1 and result.source_key.startswith("ingest:")


@pytest.mark.parametrize("make,message", [
    (lambda d: d / "missing.json", "no such file"),
    (lambda d: (d / "x.json").write_text("{oops") and d / "x.json", "not valid JSON"),
    (lambda d: (d / "x.json").write_text('{"hello": 1}') and d / "x.json", "neither a devicefit results file"),
    (lambda d: (d / "x.json").write_text(json.dumps({"format": "devicefit.benchmark_results/1", "results": [{"status": "ok"}]})) and d / "x.json",
     r"results\[0\] lacks run_id"),
])
def test_malformed_files_are_refused_naming_the_problem(tmp_path, make, message):
    with pytest.raises(LandingFileError, match=message):
        ingest_file(make(tmp_path), tmp_path / "raw")
    assert not (tmp_path / "raw").exists() or not list((tmp_path / "raw").glob("*.json"))


@pytest.mark.parametrize("change,message", [
    ({"backend": "onnxruntime"}, "only the pytorch backend"),
    ({"torch_dtype": "float8"}, "torch_dtype 'float8'"),
])
def test_optimum_files_outside_what_devicefit_can_hold_are_refused(tmp_path, change, message):
    pair = optimum_pair(tmp_path)
    config = json.loads((pair / "benchmark_config.json").read_text())
    if "backend" in change:
        config["backend"]["name"] = change["backend"]
    else:
        config["backend"].update(change)
    (pair / "benchmark_config.json").write_text(json.dumps(config))
    with pytest.raises(LandingFileError, match=message):
        ingest_file(pair, tmp_path / "raw")


def test_optimum_report_with_a_negative_latency_is_refused(tmp_path):
    pair = optimum_pair(tmp_path)
    report = json.loads((pair / "benchmark_report.json").read_text())
    report["forward"]["latency"]["values"][2] = -0.001
    (pair / "benchmark_report.json").write_text(json.dumps(report))
    with pytest.raises(LandingFileError, match="positive seconds"):
        ingest_file(pair, tmp_path / "raw")


def test_optimum_config_without_its_report_is_refused(tmp_path):
    pair = optimum_pair(tmp_path)
    (pair / "benchmark_report.json").unlink()
    with pytest.raises(LandingFileError, match="benchmark_report.json"):
        ingest_file(pair / "benchmark_config.json", tmp_path / "raw")


def devicefit(args, data_dir):
    import os

    return subprocess.run([sys.executable, "-m", "devicefit.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "DEVICEFIT_DATA_DIR": str(data_dir)})


def test_db_and_ingest_commands(tmp_path):
    data = tmp_path / "data"
    out = devicefit(["db", "status"], data)
    assert out.returncode == 2 and "devicefit db init" in out.stderr
    assert devicefit(["db", "init"], data).returncode == 0
    out = devicefit(["ingest", str(optimum_pair(tmp_path))], data)
    assert out.returncode == 0, out.stderr
    assert "landed 1 rows (optimum-benchmark)" in out.stdout
    status = json.loads(devicefit(["db", "status", "--json"], data).stdout)
    assert status["tables"]["measurements"] == 1 and status["statuses"] == {"ok": 1}
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    out = devicefit(["ingest", str(bad)], data)
    assert out.returncode == 2 and "not valid JSON" in out.stderr
    assert json.loads(devicefit(["db", "status", "--json"], data).stdout)["tables"]["measurements"] == 1


def test_a_directory_of_landing_files_lands_whole_or_not_at_all(tmp_path):
    """Another machine's landing files, as `../shared/datasets/*` holds them: every file lands;
    one bad file among them lands none, and the error names it."""
    from devicefit.ingest import ingest_path

    rows = run_sweep([BenchmarkConfig("bert-tiny", policy=FAST_POLICY), BenchmarkConfig("bert-tiny", batch_size=2, policy=FAST_POLICY)])
    machine = tmp_path / "other-machine"
    machine.mkdir()
    for i, row in enumerate(rows):
        write_json_atomic(machine / f"partition_{i}.json", results_document(row.run_id, [row], {}))
    results = ingest_path(machine, tmp_path / "raw")
    assert [r.rows for r in results] == [1, 1] and len({r.source_key for r in results}) == 2
    (machine / "zz-truncated.json").write_text('{"format": "devicefit.benchmark_results/1", "resu')
    with pytest.raises(LandingFileError, match="zz-truncated.json"):
        ingest_path(machine, tmp_path / "raw2")
    assert not (tmp_path / "raw2").exists() or not list((tmp_path / "raw2").glob("*.json"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LandingFileError, match="neither devicefit results files"):
        ingest_path(empty, tmp_path / "raw3")


def test_a_prefill_target_in_tokens_per_second_is_not_stored_as_samples_per_second(tmp_path):
    """optimum-benchmark before 0.5 reports prefill throughput in tokens/s (batch x sequence a
    second); the importer took any throughput value for samples/s, 128x too high here."""
    config, report = optimum_documents()
    forward = report.pop("forward")
    seconds = sum(LATENCIES_S)
    report["prefill"] = {**forward, "throughput": {"unit": "tokens/s", "value": 4 * 128 * len(LATENCIES_S) / seconds}}
    paths = DataPaths(tmp_path / "data")
    ingest_file(write_optimum_pair(tmp_path / "optimum", config, report), paths.raw)
    load_landing_files(paths.database, paths.raw)
    con = store.connect(paths.database, read_only=True)
    [row] = store.query(con, "SELECT throughput_samples_per_s, forward_tokens_per_s FROM measurements")
    con.close()
    assert row["throughput_samples_per_s"] == pytest.approx(4 * len(LATENCIES_S) / seconds)
    assert row["forward_tokens_per_s"] == pytest.approx(4 * 128 * len(LATENCIES_S) / seconds)
