"""LightGBM on the TPOT line's held-out error: trained and validated leave-one-model-out with
nothing of the held-out model in its fold, served only where that validation favoured it."""
import math

import pytest

from devicefit.predict.generation import decode_roofline, predict_generation, residual_request
from devicefit.predict.hardware_specs import DeviceSpec
from devicefit.predict.tpot_residual import Request, correction, features, train_and_validate
from models.resolve import resolve_model

CPU = DeviceSpec("cpu", "test CPU", 300.0, 25.0, "measured_probe")


def _request(i: int, batch: int, encoder_decoder: bool) -> Request:
    return Request(roofline_ms=2.0 + i, kernels=200 + 40 * i, batch=batch, active_params=1e8 * (i + 1), kv_bytes=1e6 * batch,
                   bytes_per_step=4e8 * (i + 1), encoder_decoder=encoder_decoder, active_share=1.0, asynchronous=False,
                   half_precision=False)


def _dataset(slow_encoder_decoders: float):
    """Ten models, four rows each (batch 1, 2, 4, 8); the line is exact except that every
    encoder-decoder takes `slow_encoder_decoders` times what it says."""
    models, measured, rows, line = [], [], [], []
    for i in range(10):
        for batch in (1, 2, 4, 8):
            request = _request(i, batch, encoder_decoder=i % 2 == 1)
            predicted = 5.0 + i + 0.1 * batch
            models.append(f"m{i}")
            rows.append(features(request))
            line.append(predicted)
            measured.append(predicted * (slow_encoder_decoders if request.encoder_decoder else 1.0))
    return models, measured, rows, line


def test_the_trees_learn_what_the_line_misses_and_are_served_because_they_beat_it_held_out():
    models, measured, rows, line = _dataset(1.6)
    calls = []

    def line_without(i, excluded):
        calls.append((i, excluded))
        return line[i]

    section = train_and_validate(models, measured, rows, line, line_without)
    assert section["used"] and section["with_trees_mape"] < section["line_mape"]
    assert section["line_mape"] == pytest.approx(0.5 * 0.6 / 1.6)  # half the rows a factor 1.6 off
    assert section["validated_rows"] == 40 and sorted(section["per_model"]) == sorted(set(models))
    # Nested: every training row's target came from a line fitted without the held-out model and
    # without the row's own model; a row is never a training row of its own model's fold.
    assert calls and all(len(excluded) == 2 and models[i] in excluded for i, excluded in calls)
    assert {frozenset(e) - {models[i]} for i, e in calls} == {frozenset({m}) for m in set(models)}
    slow = correction(section, _request(3, 4, encoder_decoder=True))
    fast = correction(section, _request(4, 4, encoder_decoder=False))
    assert slow[0] > 1.25 and fast[0] < 1.1 and "LightGBM" in slow[1] and "without" in slow[1]


def test_trees_that_do_not_beat_the_line_held_out_are_kept_but_not_served():
    models, measured, rows, line = _dataset(1.0)
    # The line is exact but for noise tied to nothing the features see: the trees can only add error.
    measured = [m * (1.08 if (i * 7919) % 3 == 0 else 0.95) for i, m in enumerate(measured)]
    section = train_and_validate(models, measured, rows, line, lambda i, excluded: line[i])
    assert section["with_trees_mape"] >= section["line_mape"] and not section["used"] and section["booster"]
    assert correction(section, _request(3, 4, encoder_decoder=True)) is None


def test_too_few_models_train_nothing_and_say_why():
    section = train_and_validate(["a", "a", "b"], [1.0, 2.0, 3.0], [features(_request(0, 1, False))] * 3, [1.0, 2.0, 3.0],
                                 lambda i, excluded: 1.0)
    assert not section["used"] and "need 3" in section["reason"] and "booster" not in section


def test_a_served_correction_scales_tpot_and_names_the_trained_predictor():
    models, measured, rows, line = _dataset(1.6)
    section = train_and_validate(models, measured, rows, line, lambda i, excluded: line[i])
    spec = resolve_model("t5-small")
    cal = {"decode_efficiency": {"cpu|torch|fp32|b1": {"log_ratio": math.log(1.5), "n": 6, "models": ["gpt2", "qwen2.5-0.5b"]}},
           "dispatch": {"cpu|torch": {"step_ms": 1.0, "us_per_kernel": 10.0, "asynchronous": False, "n": 6, "models": ["gpt2"]}}}
    ttft = {"latency": 50.0, "source": "trained_predictor", "detail": "forward pass"}
    plain = predict_generation(spec, "cpu", "torch", CPU, 1, "fp32", None, None, ttft, cal)
    served = predict_generation(spec, "cpu", "torch", CPU, 1, "fp32", None, None, ttft, {**cal, "tpot_residual": section})
    roof = decode_roofline(spec, 1, "fp32", None, None, CPU)
    factor, _ = correction(section, residual_request(spec, roof, 1, "fp32", asynchronous=False))
    assert plain["tpot_source"] == "roofline_calibrated" and served["tpot_source"] == "trained_predictor"
    assert served["tpot_ms"] == pytest.approx(plain["tpot_ms"] * factor) and factor > 1.25  # t5-small is an encoder-decoder
    assert f"that line's {plain['tpot_ms']:.3f} ms x" in served["tpot_detail"] and "LightGBM" in served["tpot_detail"]
    unused = predict_generation(spec, "cpu", "torch", CPU, 1, "fp32", None, None, ttft,
                                {**cal, "tpot_residual": {**section, "used": False}})
    assert unused["tpot_ms"] == pytest.approx(plain["tpot_ms"]) and unused["tpot_source"] == "roofline_calibrated"


def test_the_trees_leave_a_prior_ratio_alone():
    """Trained on the error of fitted ratios, the trees do not correct an answer whose device
    ratio is the prior's (no ratio fitted at this precision)."""
    models, measured, rows, line = _dataset(1.6)
    section = train_and_validate(models, measured, rows, line, lambda i, excluded: line[i])
    spec = resolve_model("t5-small")
    cal = {"dispatch": {"cpu|torch": {"step_ms": 1.0, "us_per_kernel": 10.0, "asynchronous": False, "n": 6, "models": ["gpt2"]}},
           "tpot_residual": section}
    out = predict_generation(spec, "cpu", "torch", CPU, 1, "fp32", None, None,
                             {"latency": 50.0, "source": "trained_predictor", "detail": "forward pass"}, cal)
    assert out["tpot_source"] == "roofline_calibrated" and "LightGBM" not in out["tpot_detail"]
