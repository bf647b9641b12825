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


def test_benchmark_refuses_a_directory_named_with_control_characters(tmp_path, tiny_models, monkeypatch):
    """`benchmark --model DIR --database F` stored rows under 'evil\\x1b[31mred\\nline', a name the
    registry refuses; it is refused before measuring, and registering the directory names it.
    Other characters the registry refuses (a comma, a space) stay allowed: tests/test_cli.py
    measures 'bert,2-layers'."""
    directory = tmp_path / "evil\x1b[31mred\nline"
    shutil.copytree(tiny_models["text"], directory)
    database = tmp_path / "db.duckdb"
    out = _cli("benchmark", "--model", str(directory), "--database", str(database), "--timing", "quick")
    assert out.exit_code == 2, out.output
    assert "the model name 'evil\\x1b[31mred\\nline' holds the control character '\\x1b'" in " ".join(out.output.split()), out.output
    assert "configs on" not in out.output and not database.exists()  # refused before any run started

    from models.resolve import resolve_model, unnamable_local

    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "data"))
    assert _cli("models", "add", str(directory), "--name", "evil-ok").exit_code == 0
    spec = resolve_model(str(directory))
    assert spec.name == "evil-ok" and unnamable_local([spec]) is None
    registry = _cli("models", "add", str(directory), "--name", "tab\there")
    assert registry.exit_code == 2 and "holds the control character '\\t'" in registry.output, registry.output


def test_an_absurd_token_type_or_2d_position_table_is_refused_like_vocab_size(tmp_path, tiny_models):
    """`type_vocab_size: 1000000000` passed the size limits (a 32-billion-parameter BERT was
    analysed) while `vocab_size` of that size was refused; LayoutLM's
    `max_2d_position_embeddings` was likewise unbounded."""
    import pytest

    from models.catalog import InvalidModelError, load_local_model

    for key, what in (("type_vocab_size", "vocabulary size"), ("max_2d_position_embeddings", "positions")):
        directory = tmp_path / key
        shutil.copytree(tiny_models["text"], directory)
        config = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps({**config, key: 1_000_000_000}))
        with pytest.raises(InvalidModelError, match=f"config {key} = 1000000000 exceeds the limit of \\d+ {what}"):
            load_local_model(directory)
    out = _cli("models", "add", str(tmp_path / "type_vocab_size"), "--benchmark-dir", str(tmp_path / "data"))
    assert out.exit_code == 2 and "type_vocab_size" in out.output, out.output


def test_cache_prune_of_a_name_two_directories_share_prunes_neither_and_a_path_prunes_one(tmp_path, monkeypatch):
    """`cache prune --model checkpoint-500` removed the converted models of runs/v1/checkpoint-500
    and runs/v2/checkpoint-500 alike (entries are named by model name), and the path of one was
    'no cache entry records the model'. The bare name is refused, naming both directories; the
    path prunes that directory's entries only."""
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DEVICEFIT_CACHE_DIR", str(tmp_path / "derived"))
    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(tmp_path / "locks"))
    onnx = tmp_path / "data" / "cache" / "onnx"
    onnx.mkdir(parents=True)
    files = {}
    for run, key in (("v1", "0123456789abcdef"), ("v2", "fedcba9876543210")):
        directory = tmp_path / "runs" / run / "checkpoint-500"
        directory.mkdir(parents=True)
        stem = onnx / f"checkpoint-500-{key}"
        for suffix in (".onnx", ".reference.npy"):
            stem.with_name(stem.name + suffix).write_bytes(b"x")
        meta = stem.with_name(stem.name + ".json")
        meta.write_text(json.dumps({"identity": {"model": "checkpoint-500", "path": str(directory.resolve())}}))
        files[run] = (directory, meta)

    out = _cli("cache", "prune", "--model", "checkpoint-500")
    assert out.exit_code == 2, out.output
    said = " ".join(out.output.split())
    assert "cache entries of 2 models are named 'checkpoint-500'" in said and all(str(d.resolve()) in said for d, _ in files.values())
    assert all(meta.exists() for _, meta in files.values())

    out = _cli("cache", "prune", "--model", str(files["v1"][0]))
    assert out.exit_code == 0 and "removed 1 entries" in out.output, out.output
    assert not files["v1"][1].exists() and files["v2"][1].exists()
    # one directory left under the name: the bare name names it again
    assert _cli("cache", "prune", "--model", "checkpoint-500").exit_code == 0 and not files["v2"][1].exists()
