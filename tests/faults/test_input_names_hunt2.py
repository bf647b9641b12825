"""Model directories, names and configs from a second fault hunt: each case was reproduced from
the CLI before its fix."""
import json
import shutil


def _cli(*args: str):
    from typer.testing import CliRunner

    from devicefit.cli import app

    return CliRunner().invoke(app, list(args))


def test_models_add_refuses_pickle_only_weights_as_benchmark_does(tmp_path, tiny_models):
    """A directory whose only weights were pytorch_model.bin was registered (exit 0), and every
    `benchmark` of it then failed: devicefit never unpickles weights."""
    directory = tmp_path / "pickled"
    shutil.copytree(tiny_models["text"], directory)
    (directory / "pytorch_model.bin").write_bytes(b"not unpickled")
    data = tmp_path / "data"
    out = _cli("models", "add", str(directory), "--benchmark-dir", str(data))
    assert out.exit_code == 2, out.output
    assert "pytorch_model.bin: pickle, which devicefit never unpickles" in " ".join(out.output.split())
    registry = data / "models.json"
    assert not registry.exists() or json.loads(registry.read_text())["models"] == {}
    # with a safetensors copy beside it, the directory is welcome
    (directory / "model.safetensors").write_bytes(b"")
    assert _cli("models", "add", str(directory), "--benchmark-dir", str(data)).exit_code == 0

