"""Guide name (003) for devicefit.select.resources."""
from devicefit.select.resources import (
    ClassifierInputError,
    HardwareAwareModelClassifier,
    get_hardware_aware_model_classification,
)

__all__ = ["ClassifierInputError", "HardwareAwareModelClassifier", "get_hardware_aware_model_classification"]
