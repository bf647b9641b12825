"""A published predictor whose booster text was cut short is refused as damaged, not a crash of
the process that loads it (found by a fault hunt, 2026-11-30): LightGBM parses a model string's
trees in parallel and a parse error there aborts the process ("terminate called without an
active exception", SIGABRT) or faults it (SIGSEGV), so `devicefit predict` and the API server
died instead of saying "retrain"."""
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path

    import lightgbm as lgb
    import numpy as np

    from devicefit.predict.api import _published
    from devicefit.predict.artifacts import PredictorUnavailable

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6))
    text = lgb.train({"verbose": -1, "num_leaves": 7}, lgb.Dataset(x, x @ rng.normal(size=6)), num_boost_round=40).model_to_string()
    trees_end = text.index("end of trees")
    for cut in (len(text) // 5, len(text) // 2, trees_end - 5, trees_end + 40, len(text) - 60):
        try:
            _published({"boosters": {"latency": text[:cut]}}, Path("current.json"))
        except PredictorUnavailable as exc:
            assert "damaged (BoosterTextError" in str(exc), exc
            print("refused", cut)
        else:
            sys.exit(f"a booster cut at {cut} of {len(text)} characters was accepted")
    try:  # the whole text parses: the minimal artifact then lacks its other fields
        _published({"boosters": {"latency": text}}, Path("current.json"))
    except PredictorUnavailable as exc:
        assert "BoosterTextError" not in str(exc), exc
""")


def test_a_booster_cut_short_is_a_damaged_predictor_not_a_dead_process():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, errors="replace", timeout=110)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stdout[-500:]} {out.stderr[-1500:]}"
    assert out.stdout.count("refused") == 5
