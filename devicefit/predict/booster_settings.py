"""The LightGBM settings every booster of the predictors shares (the forward-pass targets in
`training`, the TPOT residual in `tpot_residual`): one place, so the two are trained alike and
neither module imports the other."""
import threading

# Small trees, few rounds: with tens of rows they correct the baseline's residual, no more.
LGB_PARAMS = {
    "objective": "regression", "learning_rate": 0.05, "num_leaves": 4, "min_data_in_leaf": 10,
    "min_data_per_group": 1, "cat_smooth": 1.0, "cat_l2": 1.0, "max_cat_to_onehot": 8, "min_data_in_bin": 1,
    "lambda_l2": 1.0, "verbose": -1, "seed": 0, "deterministic": True, "num_threads": 1,
}
NUM_ROUNDS = 60


def lightgbm():
    """The lightgbm module, imported without scikit-learn where nothing in this process has
    imported it yet. LightGBM imports scikit-learn at import time when it is installed (nncf and
    sentence-transformers install it here) for its estimator classes, which the predictors never
    use (lgb.train, lgb.Dataset, lgb.Booster): 1.2 s of every process that loads or trains a
    booster on the 2-core AMD EPYC (2.6 s in its slow states), the CLI's predictions and the
    API's cold start among them. During the import, `sys.modules["sklearn"] = None` makes
    `import sklearn` raise ImportError, which lightgbm.compat catches; the entry is removed after,
    so a later `import sklearn` works as usual (lightgbm's own scikit-learn estimators,
    `lgb.LGBMRegressor`, stay unusable in this process). Under a lock, so two threads loading
    boosters take turns; no devicefit code imports scikit-learn in a process that loads one.
    Only on x86-64: on Linux aarch64 lightgbm.compat imports scikit-learn first on purpose, so
    that libgomp finds room in the static TLS block (LightGBM issue 6509)."""
    import platform
    import sys

    with _IMPORT_LOCK:
        if "lightgbm" in sys.modules or "sklearn" in sys.modules or platform.machine().lower() not in ("x86_64", "amd64"):
            import lightgbm as lgb

            return lgb
        sys.modules["sklearn"] = None  # type: ignore[assignment]
        try:
            import lightgbm as lgb
        finally:
            if sys.modules.get("sklearn", 0) is None:
                del sys.modules["sklearn"]
        return lgb


_IMPORT_LOCK = threading.Lock()
