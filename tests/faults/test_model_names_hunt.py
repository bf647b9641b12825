"""Hostile and odd model names and model directories (fault hunt A): each case was a defect
reproduced from the CLI or the API before its fix."""
import json
import os
import shutil
import subprocess
import sys


def test_serve_model_dir_under_a_path_with_a_colon_reaches_the_server_whole(tmp_path, tiny_models, monkeypatch):
    """`serve --model-dir /data/run:2/tiny-bert` was checked, then handed to the server joined
    with ':' and split back into '/data/run' and '2/tiny-bert': the server refused to start
    ('--model-dir is not a directory'), or served another directory where '/data/run' was one."""
    import uvicorn
    from typer.testing import CliRunner

    from devicefit.cli import app

    directory = tmp_path / "run:2" / "tiny-bert"
    shutil.copytree(tiny_models["text"], directory)
    for key in ("DEVICEFIT_MODEL_DIRS", "DEVICEFIT_DATA_DIR", "DEVICEFIT_WARM_UP", "DEBUG", "API_CACHE_SIZE", "BENCHMARK_DIR"):
        monkeypatch.setenv(key, os.environ.get(key, ""))
    monkeypatch.delenv("BENCHMARK_DIR")
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    out = CliRunner().invoke(app, ["serve", "--no-warm-up", "--benchmark-dir", str(tmp_path / "data"), "--model-dir", str(directory)])
    assert out.exit_code == 0, out.output
    probe = ("import json, devicefit.api.app as a\n"
             "a.create_app = lambda s: print(json.dumps([str(d) for d in s.model_dirs]))\n"
             "import devicefit.api.main\n")
    read = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert read.returncode == 0, read.stderr[-2000:]
    assert json.loads(read.stdout.strip().splitlines()[-1]) == [str(directory.resolve())]
