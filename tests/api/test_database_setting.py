"""The store named by file: `--database FILE` (and BENCHMARK_DB_PATH, which the API guide sets for
the server) names the DuckDB file itself, whatever its name, not just its directory; and the app
uvicorn imports directly (`uvicorn devicefit.api.main:app`) reads BENCHMARK_DB_PATH as `devicefit
serve` passes it."""
import json
import os
import subprocess
import sys
from pathlib import Path

from devicefit.paths import DataPaths

ROOT = Path(__file__).resolve().parents[2]


def test_a_database_file_is_the_store_and_its_directory_holds_the_rest(tmp_path):
    paths = DataPaths.of_database(tmp_path / "benchmark_db.duckdb")
    assert paths.database == (tmp_path / "benchmark_db.duckdb").resolve() and paths.root == tmp_path.resolve()
    assert paths.outputs == tmp_path.resolve() / "outputs"
    assert DataPaths(tmp_path).database == tmp_path / "devicefit.duckdb"  # a directory keeps the default name

    from devicefit.cli.common import data_paths
    from devicefit.predict.api import HardwareModelPredictor

    assert data_paths(database=tmp_path / "benchmark_db.duckdb").database == paths.database
    assert HardwareModelPredictor(database_path=tmp_path / "benchmark_db.duckdb", record=False).paths.database == paths.database


def test_uvicorn_started_directly_reads_benchmark_db_path(tmp_path):
    store = tmp_path / "benchmark_db.duckdb"
    store.write_bytes(b"")  # /health says whether the store exists: it must be this file that is looked at
    env = {k: v for k, v in os.environ.items() if k not in ("BENCHMARK_DIR", "DEVICEFIT_DATA_DIR")}
    env.update(BENCHMARK_DB_PATH=str(store), DEVICEFIT_WARM_UP="0")
    code = ("import json; from devicefit.api.main import app; p = app.state.service.settings.paths(); "
            "print(json.dumps([str(p.database), str(p.root)]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    database, root = json.loads(out.stdout.strip().splitlines()[-1])
    assert (database, root) == (str(store.resolve()), str(tmp_path.resolve()))
