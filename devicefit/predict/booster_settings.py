"""The LightGBM settings every booster of the predictors shares (the forward-pass targets in
`training`, the TPOT residual in `tpot_residual`): one place, so the two are trained alike and
neither module imports the other."""

# Small trees, few rounds: with tens of rows they correct the baseline's residual, no more.
LGB_PARAMS = {
    "objective": "regression", "learning_rate": 0.05, "num_leaves": 4, "min_data_in_leaf": 10,
    "min_data_per_group": 1, "cat_smooth": 1.0, "cat_l2": 1.0, "max_cat_to_onehot": 8, "min_data_in_bin": 1,
    "lambda_l2": 1.0, "verbose": -1, "seed": 0, "deterministic": True, "num_threads": 1,
}
NUM_ROUNDS = 60
