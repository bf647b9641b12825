"""Generated tests for one model of each family really run with pytest here: the CPU tests
pass, absent hardware skips with detection's reason, and each file records its template and
where its recommendation and requirements came from."""
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from devicefit.cli import app
from devicefit.testgen import TestGenerationError, generate_test

ONE_PER_FAMILY = {"embedding": "bert-tiny", "text_generation": "t5-small", "vision": "mobilenet-v2",
                  "audio": "whisper-tiny", "multimodal": "clip-vit-base-patch32"}


@pytest.fixture(scope="module")
def generated(tmp_path_factory, measured, artifact):
    out = tmp_path_factory.mktemp("generated")
    return out, {family: generate_test(model, out, benchmark_dir=measured.root) for family, model in ONE_PER_FAMILY.items()}


def test_one_file_per_family_records_its_template_and_basis(generated):
    out, results = generated
    for family, result in results.items():
        text = result.path.read_text()
        assert result.family == family and result.template == f"hf_{family}_template.py"
        assert f"Template: hf_{family}_template.py" in text and "hardware-aware classification (predictor" in text
        assert "min_memory_mb" in text and result.validation["dtype"] == "torch.float32"
        compile(text, str(result.path), "exec")


def test_the_generated_tests_pass_here_and_skip_absent_hardware(generated):
    out, results = generated
    run = subprocess.run([sys.executable, "-m", "pytest", str(out), "-q", "-rs", "-p", "no:cacheprovider"],
                         capture_output=True, text=True, timeout=900, cwd=out)
    summary = run.stdout.strip().splitlines()[-1]
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed >= 2 * len(results)  # cpu forward + pooled reuse per model (more if an accelerator is present)
    if "skipped" in summary:
        assert "cuda is absent here:" in run.stdout and "mps is absent here:" in run.stdout


def test_without_a_trained_predictor_the_cold_start_decides_and_the_file_says_so(tmp_path):
    """Before any training run the classification answers cold (devicefit.predict.cold_start):
    the file names that predictor and the static_rule figures that chose its hardware."""
    result = generate_test("bert-tiny", tmp_path / "out", benchmark_dir=tmp_path / "no-data")
    text = result.path.read_text()
    assert result.template == "hf_embedding_template.py" and "predictor cold-start" in result.classification_source
    assert "chosen by hardware-aware classification (predictor cold-start)" in text and "static_rule" in text


def test_bad_requests_are_refused_with_the_reason(tmp_path):
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(TestGenerationError, match="cannot generate a test on cuda"):
            generate_test("bert-tiny", tmp_path, device="cuda", benchmark_dir=tmp_path / "no-data")
    with pytest.raises(TestGenerationError, match="timeout"):
        generate_test("bert-tiny", tmp_path, timeout=0)
    out = CliRunner().invoke(app, ["generate-tests", "--model", "bert-tinyy", "--output-dir", str(tmp_path)])
    assert out.exit_code == 2 and "bert-tiny" in out.output


def test_generate_tests_cli(tmp_path, measured, artifact):
    out = CliRunner().invoke(app, ["generate-tests", "--model", "bert-tiny", "--output-dir", str(tmp_path), "--clear-cache",
                                   "--timeout", "30", "--device", "cpu", "--benchmark-dir", str(measured.root)])
    assert out.exit_code == 0, out.output
    text = (tmp_path / "test_hf_bert_tiny.py").read_text()
    assert "POOL.clear()" in text and "idle_timeout_s=30.0" in text and 'DEVICE_UNDER_TEST = "cpu"' in text
