"""Generated tests for one model of each family really run with pytest here: the CPU tests
pass, absent hardware skips with detection's reason, and each file records its template and
where its recommendation and requirements came from."""
import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

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


# --- The integration guide's own Jinja2 code (spec 003 L247), run as written ------------------

GUIDE_BLOCK = Path(__file__).resolve().parents[1] / "guide_examples" / "integration_guide_L247.py"
SPEC = Path(os.environ.get("DEVICEFIT_SPEC_DIR") or Path(__file__).resolve().parents[2].parent / "shared" / "spec")


def test_the_kept_block_is_the_guides_own():
    guide = SPEC / "003_integration_guide.md"
    if not guide.exists():
        pytest.skip(f"the guides are not beside this checkout ({SPEC}): the kept copy is used as it is")
    lines = guide.read_text().splitlines(keepends=True)
    assert lines[246].startswith("from hardware_model_integration import") and lines[245].strip() == "```python"
    end = next(i for i in range(246, len(lines)) if lines[i].strip() == "```")
    assert "".join(lines[246:end]) == GUIDE_BLOCK.read_text()


def test_the_guides_template_code_runs_as_written_and_its_test_passes(tmp_path):
    """`devicefit export-templates` puts the templates in ./templates under the names
    `recommended_template` gives; the guide's block, unchanged, with only the guide modules on
    PYTHONPATH (an empty data directory: the classification answers from the cold start), renders
    the embedding template with a plain jinja2.Environment and its own variables; the file it
    writes is a pytest file that passes here."""
    from devicefit.guide_modules import modules_path

    exported = CliRunner().invoke(app, ["export-templates", str(tmp_path / "templates")])
    assert exported.exit_code == 0, exported.output
    shutil.copyfile(GUIDE_BLOCK, tmp_path / "example.py")
    # Its own lock directory: an empty data directory has no earlier probe, and beside another
    # devicefit process measuring on this CPU none is taken, so the cold start has nothing to answer from.
    env = {**os.environ, "PYTHONPATH": str(modules_path()), "DEVICEFIT_DATA_DIR": str(tmp_path / "data"),
           "DEVICEFIT_LOCK_DIR": str(tmp_path / "locks")}
    run = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "Generated hardware-aware test file: test_hf_bert_base_uncased.py"
    written = tmp_path / "generated_tests" / "test_hf_bert_base_uncased.py"
    tree = ast.parse(written.read_text())
    assert "bert-base-uncased (embedding" in ast.get_docstring(tree) and "rendered from devicefit's template" in ast.get_docstring(tree)
    constants = {n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign)}
    assert ast.literal_eval(constants["MODEL"]) == "bert-base-uncased" and ast.literal_eval(constants["FAMILY"]) == "embedding"
    tested = subprocess.run([sys.executable, "-m", "pytest", str(written), "-q", "-rs", "-p", "no:cacheprovider"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    passed = re.search(r"\b(\d+) passed", tested.stdout)
    assert tested.returncode == 0 and passed and int(passed.group(1)) >= 2, tested.stdout[-3000:]  # cpu forward + pooled reuse


def test_export_keeps_an_edited_template_unless_forced(tmp_path):
    from devicefit.testgen.naming import TEMPLATE_DIR

    target = tmp_path / "templates"
    assert CliRunner().invoke(app, ["export-templates", str(target)]).exit_code == 0
    assert CliRunner().invoke(app, ["export-templates", str(target)]).exit_code == 0  # same content: nothing lost
    (target / "hf_vision_template.py").write_text("{# my edits #}\n")
    refused = CliRunner().invoke(app, ["export-templates", str(target)])
    assert refused.exit_code != 0 and "hf_vision_template.py" in refused.output and "--force" in refused.output
    assert (target / "hf_vision_template.py").read_text() == "{# my edits #}\n"
    assert CliRunner().invoke(app, ["export-templates", str(target), "--force"]).exit_code == 0
    assert (target / "hf_vision_template.py").read_bytes() == (TEMPLATE_DIR / "hf_vision_template.py.j2").read_bytes()


def test_export_refuses_a_file_as_its_directory_and_a_directory_in_a_templates_place(tmp_path):
    target = tmp_path / "templates"
    target.write_text("my notes")
    refused = CliRunner().invoke(app, ["export-templates", str(target)])
    assert refused.exit_code != 0 and "is a file, not a directory" in refused.output and target.read_text() == "my notes"
    target.unlink()
    (target / "hf_audio_template.py").mkdir(parents=True)
    for force in ([], ["--force"]):
        refused = CliRunner().invoke(app, ["export-templates", str(target), *force])
        assert refused.exit_code != 0 and "directories named hf_audio_template.py" in refused.output
        assert not (target / "hf_vision_template.py").exists()
