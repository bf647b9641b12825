"""The predictors import LightGBM without scikit-learn (devicefit.predict.booster_settings.lightgbm):
a second of every process that loads a booster, for estimator classes they never use."""
import platform
import subprocess
import sys

import pytest

SCRIPT = """
import sys
{before}
from devicefit.predict.booster_settings import LGB_PARAMS, lightgbm
import numpy as np
lgb = lightgbm()
print("sklearn after lightgbm:", "sklearn" in sys.modules)
rng = np.random.default_rng(0)
X = rng.random((60, 3)); y = X @ [1.0, 2.0, 3.0]
booster = lgb.train(LGB_PARAMS, lgb.Dataset(X, y, params={{"verbose": -1}}), num_boost_round=20)
from devicefit.predict.booster_text import load_booster
again = load_booster(booster.model_to_string())
assert np.allclose(again.predict(X[:5]), booster.predict(X[:5]))
import sklearn.base
print("sklearn importable:", sklearn.__version__ is not None, "lightgbm saw it:", lgb.compat.SKLEARN_INSTALLED)
"""


def _run(before: str = "") -> str:
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(before=before)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason=f"on {platform.machine()} lightgbm imports scikit-learn as it chooses (its libgomp TLS order)")
def test_a_booster_trains_and_loads_without_importing_sklearn_which_stays_importable():
    out = _run()
    assert "sklearn after lightgbm: False" in out
    assert "sklearn importable: True lightgbm saw it: False" in out


def test_a_process_that_imported_sklearn_first_gets_lightgbm_as_usual():
    out = _run("import sklearn")
    assert "sklearn after lightgbm: True" in out and "lightgbm saw it: True" in out
