"""Guide name (001) for devicefit.predict.api."""
from devicefit.predict.api import HardwareModelPredictor, PredictorSourceError, train_prediction_models

__all__ = ["HardwareModelPredictor", "PredictorSourceError", "train_prediction_models"]
