"""The guides' module names, importable as written: `from hardware_selector import HardwareSelector`.

The requirement guides (shared/spec 000-004) import from modules of an older, flat layout. Each
of those names is a module in this directory that re-exports the devicefit objects the guides use
(the same objects, not copies: `hardware_selector.HardwareSelector is
devicefit.select.selector.HardwareSelector`). They are not installed as top-level modules, so
that names as generic as `resource_pool` never shadow another package's; a guide's example runs
as written with this directory on the path:

    PYTHONPATH="$(devicefit guide --modules-path)" python my_guide_example.py

MODULES below is the table (guide module -> devicefit module); tests/test_guide_modules.py checks
that every import of the guides' Python examples resolves through it.

One spelling does not carry over: the guides' `logging.getLogger("hardware_selector")` names a
logger devicefit does not use; the selector logs as `devicefit.select`.
"""
from __future__ import annotations

from pathlib import Path

MODULES: dict[str, str] = {
    "hardware_selection_client": "devicefit.client",  # 000
    "hardware_model_predictor": "devicefit.predict.api",  # 001
    "model_performance_predictor": "devicefit.predict.api",  # 001 (train_prediction_models)
    "hardware_selector": "devicefit.select.selector",  # 002
    "enhanced_hardware_benchmark_runner": "devicefit.benchmark_runner",  # 002
    "hardware_model_integration": "devicefit.select.resources",  # 003
    "resource_pool": "devicefit.resource_pool",  # 003
    "hardware_detection": "devicefit.hardware_detection",  # 003
    "model_family_classifier": "models.classifier",  # 003
}


def modules_path() -> Path:
    """The directory to put on PYTHONPATH (or sys.path) for the guides' imports."""
    return Path(__file__).resolve().parent
