"""`benchmarks/cuda_dataset.sh` runs `devicefit detect` and `devicefit benchmark` on a GPU host that
has torch, transformers, typer, rich and psutil but none of the store's, the pipeline's, the
predictors' or OpenVINO's packages (a lent GPU machine: nothing can be installed there). These
commands must not import them: on 2026-11-29 `benchmark` imported DuckDB through its baseline
check even without --compare-to, and failed there before measuring anything."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What a bare GPU host lacks (the lent machines' package list: ../.library/device/KINDS.md).
# Matched as prefixes of the top-level name: dagster_* and openvino_* too. (pydantic is absent from
# that list as well, but typer here imports it; the benchmark path itself does not.)
ABSENT = ("dagster", "duckdb", "openvino", "nncf", "lightgbm", "fastapi", "uvicorn", "celery", "redis",
          "playwright", "optimum_benchmark", "polars", "upath", "plotly", "kaleido")

BLOCKER = f"""
import importlib.abc, sys
ABSENT = {ABSENT!r}
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0].startswith(ABSENT):
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent on a bare GPU host)", name=name)
        return None
sys.meta_path.insert(0, Absent())
"""


def _bare_host_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "bare-host-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    # its own data directory: a hardware cache this session wrote (OpenVINO importable) is not the bare host's
    env = dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{REPO}", DEVICEFIT_DATA_DIR=str(tmp_path / "bare-host-data"),
               DEVICEFIT_LOCK_DIR=str(tmp_path / "bare-host-locks"))  # no wait on another test's device lock
    env.pop("PYTHONSTARTUP", None)
    return env


def test_the_blocker_hides_what_a_bare_gpu_host_lacks(tmp_path):
    """The check below means something only if the stand-in host really lacks DuckDB."""
    proc = subprocess.run([sys.executable, "-c", "import duckdb"], env=_bare_host_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "absent on a bare GPU host" in proc.stderr


def test_detect_and_benchmark_run_without_the_store_pipeline_or_openvino(tmp_path, tiny_models):
    env = _bare_host_env(tmp_path)
    cli = [sys.executable, "-m", "devicefit.cli"]
    detect = subprocess.run(cli + ["detect", "--json", "--refresh"], env=env, capture_output=True, text=True, timeout=300)
    assert detect.returncode == 0, detect.stderr[-2000:]
    platforms = json.loads(detect.stdout)["platforms"]
    assert platforms["cpu"]["available"]
    assert not platforms["openvino"]["available"] and platforms["openvino"]["reason"]  # absent, and said why
    out = tmp_path / "rows.json"
    bench = subprocess.run(cli + ["benchmark", "--device", "cpu", "--model", str(tiny_models["causal"]),
                                  "--mode", "inference,generation", "--new-tokens", "4", "--seq-length", "8",
                                  "--timing", "quick", "--max-time", "0.2", "--json", str(out)],
                           env=env, capture_output=True, text=True, timeout=600)
    assert bench.returncode == 0, (bench.stdout + bench.stderr)[-3000:]
    rows = json.loads(out.read_text())["results"]
    assert sorted(r["mode"] for r in rows) == ["generation", "inference"]
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
