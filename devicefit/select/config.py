"""The selection configuration of spec 002, validated field by field.

Shipped defaults live in `default_selection_config.json` next to this module; `--config FILE`
(or `config_path=`) overrides any subset of them. Every wrong value is refused with its dotted
path and what was expected, before any selection runs.
"""
from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark_runners import registry
from devicefit.errors import DevicefitError
from models.catalog import FAMILIES

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default_selection_config.json")
IMPORTANCE = {"low": 0.5, "medium": 1.0, "high": 1.5}  # multiplies the weight the importance governs
CRITERIA = {
    "inference": ("latency_weight", "throughput_weight", "memory_weight", "compatibility_weight"),
    "training": ("throughput_weight", "convergence_weight", "memory_weight", "compatibility_weight"),
    # The generation scenario: time per output token, time to first token, decode tokens/s, the
    # memory with the whole KV cache (devicefit/predict/generation.py).
    "generation": ("tpot_weight", "ttft_weight", "throughput_weight", "memory_weight", "compatibility_weight"),
}
FACTORS = ("cost_factor", "availability_factor", "power_factor")
SIZE_KEYS = ("small", "medium", "large")


class SelectionConfigError(DevicefitError, ValueError):
    """A configuration value of the wrong type or range; the message names its path."""


@dataclass(frozen=True)
class SelectionConfig:
    selection_criteria: dict[str, dict[str, float]]
    model_families: dict[str, dict[str, str]]
    hardware_preferences: dict[str, dict[str, float]]
    batch_size_thresholds: dict[str, int]
    model_size_categories: dict[str, int]
    source: str

    def size_category(self, parameters: int) -> str:
        """The smallest category whose upper bound holds the model; larger is "xlarge"."""
        for key in SIZE_KEYS:
            if parameters <= self.model_size_categories[key]:
                return key
        return "xlarge"

    def batch_category(self, batch_size: int) -> str:
        category = "small"
        for key in SIZE_KEYS:
            if batch_size >= self.batch_size_thresholds[key]:
                category = key
        return category

    def weights(self, mode: str, family: str) -> dict[str, float]:
        """The mode's criteria weights, scaled by the family's importances: batch-size
        importance scales throughput, model-size importance scales memory."""
        w = dict(self.selection_criteria[mode])
        prefs = self.model_families.get(family, {})
        w["throughput_weight"] *= IMPORTANCE[prefs.get("batch_size_importance", "medium")]
        w["memory_weight"] *= IMPORTANCE[prefs.get("model_size_importance", "medium")]
        return w

    def preference(self, hardware: str) -> tuple[float, dict[str, float]]:
        """Geometric mean of the hardware's cost, availability and power factors (1.0 if unset)."""
        f = self.hardware_preferences.get(hardware, {})
        factors = {k: float(f.get(k, 1.0)) for k in FACTORS}
        product = factors["cost_factor"] * factors["availability_factor"] * factors["power_factor"]
        return product ** (1 / 3), factors


def finite(value: Any) -> float | None:
    """`value` as a float where it is a finite number; None for NaN, the infinities and an
    integer beyond a float (JSON reads a 400-digit number as one; math.isfinite would raise)."""
    try:
        number = float(value)
    except (OverflowError, TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def shown(value: Any) -> str:
    """A number as an error message can show it (str() refuses an integer of 4300 digits or more)."""
    return f"an integer of {value.bit_length()} bits" if isinstance(value, int) and value.bit_length() > 64 else str(value)


def _number(value: Any, path: str, low: float = 0.0, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SelectionConfigError(f"{path} must be a number, got {value!r} ({type(value).__name__})")
    number = finite(value)
    if number is None:  # JSON's NaN and Infinity: every score they touch is NaN, and NaN ranks arbitrarily
        raise SelectionConfigError(f"{path} must be a finite number, got {shown(value)}")
    if number < low or (high is not None and number > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise SelectionConfigError(f"{path} must be {bound}, got {value}")
    return number


def _mapping(value: Any, path: str) -> dict:
    if not isinstance(value, dict):
        raise SelectionConfigError(f"{path} must be an object, got {value!r}")
    return value


def _ascending(values: dict[str, Any], path: str) -> dict[str, int]:
    missing = [k for k in SIZE_KEYS if k not in values]
    if missing:
        raise SelectionConfigError(f"{path} needs {', '.join(SIZE_KEYS)}; missing {', '.join(missing)}")
    out = {}
    for k in SIZE_KEYS:
        v = values[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SelectionConfigError(f"{path}.{k} must be a positive integer, got {v!r}")
        out[k] = v
    if not out["small"] < out["medium"] < out["large"]:
        raise SelectionConfigError(f"{path} must ascend small < medium < large, got {out}")
    return out


def _known(key: str, path: str, known: tuple[str, ...]) -> None:
    if key not in known:
        close = difflib.get_close_matches(key, known, n=1)
        raise SelectionConfigError(f"{path}.{key}: not a known {'family' if path == 'model_families' else 'device kind'}"
                                   f"{f' (did you mean {close[0]}?)' if close else ''}; known: {', '.join(known)}")


def validate_config(raw: dict[str, Any], source: str) -> SelectionConfig:
    raw = _mapping(raw, "config")
    unknown = set(raw) - {"selection_criteria", "model_families", "hardware_preferences", "batch_size_thresholds",
                          "model_size_categories"}
    if unknown:
        raise SelectionConfigError(f"unknown configuration section(s): {', '.join(sorted(unknown))}")
    criteria = {}
    for mode, keys in CRITERIA.items():
        section = _mapping(_mapping(raw.get("selection_criteria"), "selection_criteria").get(mode), f"selection_criteria.{mode}")
        extra = set(section) - set(keys)
        if extra:
            raise SelectionConfigError(f"selection_criteria.{mode} has unknown weight(s) {', '.join(sorted(extra))}; "
                                       f"known: {', '.join(keys)}")
        criteria[mode] = {k: _number(section.get(k, 0.0), f"selection_criteria.{mode}.{k}") for k in keys}
        if sum(criteria[mode].values()) <= 0:
            raise SelectionConfigError(f"selection_criteria.{mode}: at least one weight must be positive")
    families = {}
    for family, prefs in _mapping(raw.get("model_families", {}), "model_families").items():
        _known(family, "model_families", FAMILIES)  # a misspelt family ("visoin") would weigh nothing, silently
        prefs = _mapping(prefs, f"model_families.{family}")
        for key, value in prefs.items():
            if key not in ("batch_size_importance", "model_size_importance"):
                raise SelectionConfigError(f"model_families.{family}.{key} is not a known preference")
            if value not in IMPORTANCE:
                raise SelectionConfigError(f"model_families.{family}.{key} must be one of {', '.join(IMPORTANCE)}, got {value!r}")
        families[family] = dict(prefs)
    preferences = {}
    for hw, factors in _mapping(raw.get("hardware_preferences", {}), "hardware_preferences").items():
        _known(hw, "hardware_preferences", tuple(registry.kinds()))  # keyed by device kind, as selection asks
        factors = _mapping(factors, f"hardware_preferences.{hw}")
        extra = set(factors) - set(FACTORS)
        if extra:
            raise SelectionConfigError(f"hardware_preferences.{hw} has unknown factor(s) {', '.join(sorted(extra))}")
        preferences[hw] = {k: _number(v, f"hardware_preferences.{hw}.{k}", 0.0, 1.0) for k, v in factors.items()}
        if any(v == 0 for v in preferences[hw].values()):
            raise SelectionConfigError(f"hardware_preferences.{hw}: a factor of 0 would rule the hardware out; "
                                       "leave it out of available_hardware instead")
    return SelectionConfig(criteria, families, preferences,
                           _ascending(_mapping(raw.get("batch_size_thresholds"), "batch_size_thresholds"), "batch_size_thresholds"),
                           _ascending(_mapping(raw.get("model_size_categories"), "model_size_categories"), "model_size_categories"),
                           source)


def load_config(path: str | Path | None = None) -> SelectionConfig:
    """Shipped defaults, with the sections of `path` (if given) replacing theirs."""
    raw = json.loads(DEFAULT_CONFIG_PATH.read_text())
    source = "shipped defaults"
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise SelectionConfigError(f"selection config {path} does not exist")
        try:
            override = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SelectionConfigError(f"selection config {path} is not valid JSON: {exc}") from None
        except RecursionError:  # json.loads's own error for nesting past the decoder, which is no ValueError
            raise SelectionConfigError(f"selection config {path} is not valid JSON: nested too deeply to read") from None
        for section, value in _mapping(override, str(path)).items():
            if isinstance(value, dict) and isinstance(raw.get(section), dict):
                raw[section] = {**raw[section], **value}
            else:
                raw[section] = value
        source = f"{path} over shipped defaults"
    return validate_config(raw, source)
