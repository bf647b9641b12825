"""Model directories from the command line (issue 21, items 5 and 7): `devicefit models add`
registers only a usable directory, with a one-line error otherwise; `serve --model-dir` refuses a
bad directory before binding; and a directory without config.json or with an odd
`architectures` entry is a one-line error in every command that takes a model, never a traceback."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from devicefit.cli import app


def _run(*args: str):
    return CliRunner().invoke(app, list(args))


def _one_line_error(out, *needles: str) -> None:
    assert out.exit_code != 0 and (out.exception is None or isinstance(out.exception, SystemExit)), (out.output, out.exception)
    assert "Traceback" not in out.output
    for needle in needles:
        assert needle in out.output, out.output


@pytest.fixture(scope="module")
def bad_dirs(tmp_path_factory) -> dict[str, tuple]:
    root = tmp_path_factory.mktemp("bad-model-dirs")
    configs = {
        "no-config": (None, "no config.json"),
        "number": ({"model_type": "bert", "architectures": 7}, "must be a list of class names"),
        "non-strings": ({"model_type": "bert", "architectures": [1, None]}, "must be a list of class names"),
        "unknown-class": ({"model_type": "bert", "architectures": ["TotallyMadeUpModel"]}, "none of them a model class"),
        "not-json": ("{oops", "not valid JSON"),
        "huge": ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 400, "n_embd": 8192, "vocab_size": 1_000_000},
                 "limit of 160 layers"),
    }
    out = {}
    for name, (config, message) in configs.items():
        directory = root / name
        directory.mkdir()
        if config is not None:
            (directory / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
        out[name] = (directory, message)
    return out


def test_models_add_registers_and_lists(tmp_path, tiny_models):
    out = _run("models", "add", str(tiny_models["text"]), "--name", "team/tiny-bert", "--benchmark-dir", str(tmp_path))
    assert out.exit_code == 0, out.output
    assert "registered team/tiny-bert" in out.output
    rows = json.loads(_run("models", "--json", "--benchmark-dir", str(tmp_path)).output)
    mine = [r for r in rows if r["name"] == "team/tiny-bert"]
    assert len(mine) == 1 and mine[0]["source"] == "registered" and mine[0]["path"] == str(tiny_models["text"].resolve())
    assert sum(r["source"] == "catalog" for r in rows) >= 15  # `devicefit models` with no subcommand still lists
    out = _run("models", "--benchmark-dir", str(tmp_path))
    assert out.exit_code == 0 and "team/tiny-bert" in out.output and "registered" in out.output
    _one_line_error(_run("models", "add", str(tiny_models["causal"]), "--name", "team/tiny-bert", "--benchmark-dir", str(tmp_path)),
                    "already registered")
    assert _run("models", "remove", "team/tiny-bert", "--benchmark-dir", str(tmp_path)).exit_code == 0
    assert not [r for r in json.loads(_run("models", "--json", "--benchmark-dir", str(tmp_path)).output) if r["source"] == "registered"]


@pytest.mark.parametrize("case", ["no-config", "number", "non-strings", "unknown-class", "not-json", "huge", "missing"])
def test_models_add_refuses_a_bad_directory_in_one_line(tmp_path, bad_dirs, case):
    directory, message = bad_dirs.get(case, (tmp_path / "missing", "not a directory"))
    _one_line_error(_run("models", "add", str(directory), "--benchmark-dir", str(tmp_path / "data")), message)
    assert not (tmp_path / "data" / "models.json").exists()


def test_models_add_refuses_a_catalog_name_or_an_odd_name(tmp_path, tiny_models):
    _one_line_error(_run("models", "add", str(tiny_models["text"]), "--name", "bert-tiny", "--benchmark-dir", str(tmp_path)),
                    "taken by the catalog model")
    _one_line_error(_run("models", "add", str(tiny_models["text"]), "--name", "a b\nc", "--benchmark-dir", str(tmp_path)),
                    "not allowed")


def test_serve_refuses_a_bad_model_dir_before_binding(tmp_path, bad_dirs, monkeypatch):
    import uvicorn

    def no_server(*args, **kwargs):
        raise AssertionError("serve started a server for a model directory it should have refused")

    monkeypatch.setattr(uvicorn, "run", no_server)
    directory, message = bad_dirs["unknown-class"]
    _one_line_error(_run("serve", "--model-dir", str(directory), "--benchmark-dir", str(tmp_path), "--port", "9"), message)


COMMANDS = {
    "select": lambda d, data: ["select", "--model", d, "--benchmark-dir", data],
    "resources": lambda d, data: ["resources", d, "--benchmark-dir", data],
    "analyze": lambda d, data: ["analyze", "--model", d, "--benchmark-dir", data],
    "generate-tests": lambda d, data: ["generate-tests", "--model", d, "--benchmark-dir", data, "--no-validate"],
    "memory-search": lambda d, data: ["memory-search", "--model", d, "--memory-constrained", "512", "--benchmark-dir", data],
    "classify": lambda d, data: ["classify", d, "--hardware-aware", "--benchmark-dir", data],
    "predict": lambda d, data: ["predict", "--model", d, "--benchmark-dir", data],
    "distributed": lambda d, data: ["distributed", "--model", d, "--gpu-count", "2"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", ["no-config", "number", "unknown-class", "huge"])
def test_every_command_reports_a_bad_model_directory_in_one_line(measured, artifact, bad_dirs, tmp_path, monkeypatch, command, case):
    monkeypatch.chdir(tmp_path)  # generate-tests would write here
    directory, message = bad_dirs[case]
    _one_line_error(_run(*COMMANDS[command](str(directory), str(measured.root))), message)


def test_plain_classify_of_a_bad_directory_does_not_trace_back(bad_dirs):
    for directory, message in bad_dirs.values():
        _one_line_error(_run("classify", str(directory)), message)
