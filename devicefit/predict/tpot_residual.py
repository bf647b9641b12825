"""LightGBM on what the TPOT line misses, trained and validated leave-one-model-out like the
forward-pass targets, and served only where it beat the line on models it never saw.

The line (`devicefit.predict.generation`: a device roofline times a fitted ratio against the
host's kernel dispatch) is physics with a handful of fitted numbers; it extrapolates to a 70B
model because it is physics. A tree model cannot extrapolate, so it does not replace the line:
it learns the line's error, the log of measured TPOT over the line's prediction, from features
of the request (the decode roofline, the kernels a step launches, batch, active parameters, the
KV cache's share of the bytes a step reads, encoder-decoder, experts, host-bound kind,
precision). Stacked honestly:
- each row's target is the line's prediction *without that row's model* (out of fold), which is
  the error a model nobody measured will see, not the line's smaller in-sample error;
- its validation is nested: for each held-out model M, the trees are trained on the other
  models' rows, each with a target from a line fitted without M and without the row's own
  model, so nothing of M informs the answer for M;
- the artifact keeps both held-out MAPEs; the trees correct answers only where theirs is lower
  (`used`), and the answer's detail says by how much they moved it.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

FEATURES = ("log_roofline_ms", "log_kernels", "log_batch", "log_active_params", "kv_share", "encoder_decoder",
            "active_share", "asynchronous", "half_precision")
MIN_MODELS = 3  # fewer: a held-out fold has too little to learn from and the check means nothing
# The residual may move an answer by at most this factor either way: trees trained on a few
# dozen rows must not override the line by more than the largest error they were trained on.
MAX_CORRECTION = 2.0


@dataclass(frozen=True)
class Request:
    """What the features are computed from: one generation request on one device."""

    roofline_ms: float
    kernels: int
    batch: int
    active_params: float  # the parameters a decode step uses (an encoder-decoder's decoder's)
    kv_bytes: float  # the KV cache read per step, at the request's mean context
    bytes_per_step: float
    encoder_decoder: bool
    active_share: float  # active over total parameters: below 1 for a mixture of experts
    asynchronous: bool
    half_precision: bool


def features(r: Request) -> tuple[float, ...]:
    return (math.log(max(r.roofline_ms, 1e-9)), math.log(max(r.kernels, 1)), math.log(r.batch), math.log(max(r.active_params, 1.0)),
            r.kv_bytes / r.bytes_per_step if r.bytes_per_step else 0.0, float(r.encoder_decoder), r.active_share,
            float(r.asynchronous), float(r.half_precision))


def _fit(X, y):
    from devicefit.predict.booster_settings import LGB_PARAMS, NUM_ROUNDS, lightgbm  # the forward-pass targets' settings

    lgb = lightgbm()
    return lgb.train(LGB_PARAMS, lgb.Dataset(X, y, params={"verbose": -1}), num_boost_round=NUM_ROUNDS)


def _clip(log_correction):
    import numpy as np

    bound = math.log(MAX_CORRECTION)
    return np.clip(log_correction, -bound, bound)


def train_and_validate(models: list[str], measured: list[float], rows_features: list[tuple[float, ...]],
                       out_of_fold: list[float | None],
                       line_without: Callable[[int, frozenset[str]], float | None]) -> dict[str, Any]:
    """The residual's artifact section. Per row i: its model, measured TPOT, features and the
    line's prediction without its model (`out_of_fold`, None where no line could be fitted
    without it); `line_without(i, models)` is row i's line prediction from a fit without those
    models (None where nothing is left to fit)."""
    import numpy as np

    rows = [i for i, p in enumerate(out_of_fold) if p]
    seen = sorted({models[i] for i in rows})
    section: dict[str, Any] = {"features": list(FEATURES), "rows": len(rows), "models": seen, "used": False,
                               "max_correction": MAX_CORRECTION, "method": "leave one model out, nested (the line refitted "
                               "without the held-out model and without each training row's own model)"}
    if len(seen) < MIN_MODELS:
        return {**section, "reason": f"{len(seen)} models with a held-out line prediction; the trees need {MIN_MODELS}"}
    X = np.array([rows_features[i] for i in rows])
    actual = np.array([measured[i] for i in rows])
    line = np.array([out_of_fold[i] for i in rows])
    with_trees = np.full(len(rows), np.nan)
    for held in seen:
        test = np.array([models[i] == held for i in rows])
        train_idx, targets = [], []
        for k, i in enumerate(rows):
            if models[i] == held:
                continue
            inner = line_without(i, frozenset({held, models[i]}))
            if inner:
                train_idx.append(k)
                targets.append(math.log(measured[i] / inner))
        if len({models[rows[k]] for k in train_idx}) < MIN_MODELS - 1:
            continue
        booster = _fit(X[train_idx], np.array(targets))
        with_trees[test] = line[test] * np.exp(_clip(booster.predict(X[test])))
    scored = ~np.isnan(with_trees)
    if not scored.any():
        return {**section, "reason": "no fold had enough models to train on"}
    line_mape = float(np.mean(np.abs(line[scored] / actual[scored] - 1)))
    trees_mape = float(np.mean(np.abs(with_trees[scored] / actual[scored] - 1)))
    per_model = {m: {"line_mape": float(np.mean(np.abs(line[sel] / actual[sel] - 1))),
                     "with_trees_mape": float(np.mean(np.abs(with_trees[sel] / actual[sel] - 1))), "rows": int(sel.sum())}
                 for m in seen for sel in [scored & np.array([models[i] == m for i in rows])] if sel.any()}
    booster = _fit(X, np.log(actual / line))
    return {**section, "used": trees_mape < line_mape, "validated_rows": int(scored.sum()),
            "line_mape": line_mape, "with_trees_mape": trees_mape, "per_model": per_model,
            "median_correction": float(statistics.median(np.exp(_clip(booster.predict(X))))),
            "booster": booster.model_to_string()}


@lru_cache(maxsize=8)
def _booster(text: str):
    from devicefit.predict.booster_text import load_booster

    return load_booster(text)


def correction(section: dict[str, Any] | None, request: Request) -> tuple[float, str] | None:
    """The factor the trees apply to the line's TPOT for this request, with the words for the
    detail; None where the artifact has no residual or its validation did not favour it."""
    if not section or not section.get("used") or not section.get("booster") or list(section.get("features") or ()) != list(FEATURES):
        return None
    import numpy as np

    factor = float(np.exp(_clip(_booster(section["booster"]).predict(np.array([features(request)]))[0])))
    return factor, (f"x {factor:.2f} from LightGBM on the line's held-out error ({section['rows']} generation rows of "
                    f"{len(section['models'])} models; leave-one-model-out TPOT MAPE {section['with_trees_mape']:.1%} with it, "
                    f"{section['line_mape']:.1%} without)")
