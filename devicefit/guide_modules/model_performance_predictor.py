"""Guide name (001, "custom prediction models") for the training entry of devicefit.predict.api."""
from devicefit.predict.api import PredictorSourceError, train_prediction_models
from devicefit.predict.training import InsufficientData

__all__ = ["InsufficientData", "PredictorSourceError", "train_prediction_models"]
