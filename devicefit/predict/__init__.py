"""Performance prediction: physics features, LightGBM regressors validated on unseen models,
conformal intervals, and a fallback chain that always says where a number came from."""
