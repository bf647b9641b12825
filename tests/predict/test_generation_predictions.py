"""Generation predicted for models too large to measure here: TTFT from the forward-pass chain,
TPOT from the decode roofline calibrated on measured generation rows, the KV cache from the
config; each figure labelled with what produced it."""
import json
import math

import pytest
from typer.testing import CliRunner

from devicefit.cli import app
from devicefit.predict.decode_calibration import calibrate_generation
from devicefit.predict.generation import STATIC_DECODE_EFFICIENCY, STATIC_DISPATCH, decode_roofline, predict_generation
from devicefit.predict.hardware_specs import DeviceSpec
from models.resolve import resolve_model

runner = CliRunner()
CPU = DeviceSpec("cpu", "test CPU", 300.0, 25.0, "measured_probe")
GPU = DeviceSpec("cuda", "test GPU", 5e5, 4000.0, "measured_probe")


def _row(model: str, tpot_ms: float, batch: int = 1) -> dict:
    return {"mode": "generation", "status": "ok", "model": model, "device_kind": "cpu", "backend": "torch", "precision": "fp32",
            "batch_size": batch, "prompt_tokens": None if model == "whisper-tiny" else 256, "new_tokens": 64,
            "tpot_p50_ms": tpot_ms, "host_fingerprint": "cpu-test"}


def test_the_decode_roofline_reads_the_weights_and_the_mean_cache():
    spec = resolve_model("gpt2")
    roof = decode_roofline(spec, 1, "fp32", 256, 64, CPU)
    weights = (124_439_808 - 1024 * 768) * 4  # all but the position table wpe, of which a step gathers one row
    per_position = 12 * 2 * 12 * 64 * 4
    assert roof.bytes_per_step == pytest.approx(weights + per_position * (319 - 63 / 2))
    assert roof.ms == pytest.approx(roof.bytes_per_step / 25e9 * 1e3)  # memory bound at batch 1
    assert decode_roofline(spec, 1, "bf16", 256, 64, CPU).bytes_per_step < roof.bytes_per_step * 0.51


def test_calibration_is_the_measured_over_roofline_ratio_and_is_validated_leaving_each_model_out():
    specs = {"cpu@cpu-test": CPU}
    models = ("gpt2", "qwen2.5-0.5b", "t5-small")
    # Every model measured at exactly twice its roofline: calibrated 2x, and each held-out model
    # is predicted from the others without error.
    rows = [_row(m, 2 * decode_roofline(resolve_model(m), b, "fp32", 256, 64, CPU).ms, b) for m in models for b in (1, 4)]
    rows.append({**_row("gpt2", 1.0), "mode": "inference"})  # a forward-pass row is not a decode rate
    cal = calibrate_generation(rows, specs)
    # per device (a kind on one host) and batch size
    assert sorted(cal["decode_efficiency"]) == ["cpu@cpu-test|torch|fp32|b1", "cpu@cpu-test|torch|fp32|b4"]
    for entry in cal["decode_efficiency"].values():
        assert entry["log_ratio"] == pytest.approx(math.log(2)) and entry["n"] == 3 and entry["models"] == sorted(models)
    assert cal["validation"]["tpot_mape"] == pytest.approx(0, abs=1e-4) and cal["validation"]["rows"] == 6
    assert cal["dispatch"]["cpu@cpu-test|torch"]["asynchronous"] is False  # on a CPU, dispatch and compute add
    # each model's host line fitted without it, for the held-out TTFT check
    assert {m: sorted(v) for m, v in cal["validation"]["held_out_step_ms"].items()} == {m: ["cpu@cpu-test|torch"] for m in models}
    # gpt2 measured at 3x its roofline, the others at 2x: held out, gpt2 is predicted from the
    # others' 2x, so it is a third too fast.
    rows[0]["tpot_p50_ms"] *= 1.5
    rows[1]["tpot_p50_ms"] *= 1.5
    assert calibrate_generation(rows, specs)["validation"]["per_group"]["cpu@cpu-test|torch"]["tpot_mape"] > 0.05


def test_a_local_config_file_model_is_calibrated_by_the_path_its_rows_name(tmp_path):
    """A model measured from a config file (`devicefit benchmark --model my-model.json`) is named
    by its file's stem in its rows, which no catalog lookup finds: the calibration resolves it by
    the row's model_path, as training does, so its rows count."""
    import json

    config = tmp_path / "gpt2-six-layers.json"
    config.write_text(json.dumps({**resolve_model("gpt2").config, "n_layer": 6}))
    local = resolve_model(str(config))
    specs = {"cpu@cpu-test": CPU}
    rows = [_row(m, 2 * decode_roofline(resolve_model(m), 1, "fp32", 256, 64, CPU).ms) for m in ("gpt2", "t5-small")]
    rows.append({**_row(local.name, 2 * decode_roofline(local, 1, "fp32", 256, 64, CPU).ms), "model_path": str(config)})
    cal = calibrate_generation(rows, specs)
    assert local.name == "gpt2-six-layers" and cal["decode_efficiency"]["cpu@cpu-test|torch|fp32|b1"]["models"] == sorted(
        ["gpt2", "t5-small", "gpt2-six-layers"])


def test_an_asynchronous_gpu_decodes_at_the_longer_of_host_dispatch_and_device_time():
    """On a GPU small models decode at the host's pace (kernels dispatched one by one from
    Python), whatever their bytes: rows built from a known host line (2 ms + 11 us per kernel)
    over a 1.5x device ratio give that line back, each held-out model is predicted from the
    others, and a 7B model is answered by whichever of the two is longer, saying which."""
    gpu = DeviceSpec("cuda", "test GPU", 50_000.0, 4_000.0, "measured_probe")
    specs = {"cuda@cpu-test": gpu}
    rows = []
    for m in ("gpt2", "gpt2-medium", "qwen2.5-0.5b", "t5-small"):
        for b in (1, 4):
            roof = decode_roofline(resolve_model(m), b, "bf16", 256, 64, gpu)
            assert roof.kernels > 50  # counted on meta: a step launches one kernel per layer op
            rows.append({**_row(m, max(1.5 * roof.ms, 2.0 + roof.kernels * 0.011), b), "device_kind": "cuda", "precision": "bf16"})
    cal = calibrate_generation(rows, specs)
    line = cal["dispatch"]["cuda@cpu-test|torch"]
    assert line["asynchronous"] is True and line["n"] == 8
    assert line["step_ms"] == pytest.approx(2.0, rel=0.02) and line["us_per_kernel"] == pytest.approx(11.0, rel=0.02)
    assert all(e["device_bound_rows"] == 0 for e in cal["decode_efficiency"].values())  # small models: host-bound
    assert cal["validation"]["tpot_mape"] < 0.01
    spec = resolve_model("llama-2-7b")
    out = predict_generation(spec, "cuda", "torch", gpu, 1, "bf16", None, None, {"latency": None}, cal, "cuda@cpu-test")
    roof = decode_roofline(spec, 1, "bf16", None, None, gpu)
    host = line["step_ms"] + roof.kernels * line["us_per_kernel"] / 1e3
    device = roof.ms * math.exp(cal["decode_efficiency"]["cuda@cpu-test|torch|bf16|b1"]["log_ratio"])
    assert out["tpot_ms"] == pytest.approx(max(host, device)) and out["decode_kernels"] == roof.kernels
    assert ("host-bound" if host > device else "device-bound") in out["tpot_detail"]
    assert "none of them device-bound" in out["tpot_detail"]  # the ratio is the prior's, and it says so
    assert "no generation rows of its own" not in out["tpot_detail"]
    # Another GPU host, with no generation rows: answered from this one's fit, and told so.
    other = predict_generation(spec, "cuda", "torch", gpu, 1, "bf16", None, None, {"latency": None}, cal, "cuda@cpu-other")
    assert other["tpot_ms"] == pytest.approx(out["tpot_ms"])
    assert "the fit is cuda@cpu-test's: cuda@cpu-other has no generation rows of its own" in other["tpot_detail"]


def test_two_cpus_get_their_own_host_lines():
    """Two machines dispatch at their own pace: rows of two hosts built from two host lines give
    each host its own line back, not one line through both."""
    specs = {"cpu@host-a": CPU, "cpu@host-b": CPU}
    rows = []
    for host, step_ms in (("host-a", 2.0), ("host-b", 12.0)):
        for m in ("gpt2", "gpt2-medium", "qwen2.5-0.5b", "t5-small"):
            roof = decode_roofline(resolve_model(m), 1, "fp32", 256, 64, CPU)
            rows.append({**_row(m, 1.5 * roof.ms + step_ms + roof.kernels * 0.01), "host_fingerprint": host})
    cal = calibrate_generation(rows, specs)
    # (the prior's pull on the device ratio, 2x where the rows were built at 1.5x, moves a CPU's
    # fixed cost by a little: the two lines stay apart)
    assert cal["dispatch"]["cpu@host-a|torch"]["step_ms"] < 5 < 9 < cal["dispatch"]["cpu@host-b|torch"]["step_ms"]
    assert set(cal["validation"]["per_group"]) == {"cpu@host-a|torch", "cpu@host-b|torch"}


def test_a_7b_model_gets_calibrated_tpot_and_its_kv_cache_by_hand():
    spec = resolve_model("llama-2-7b")  # 32 layers, 32 heads of 128 (no grouped KV)
    cal = {"decode_efficiency": {"cpu|torch|fp32|b1": {"log_ratio": math.log(1.5), "n": 6, "spread": 0.05,
                                                       "models": ["gpt2", "qwen2.5-0.5b", "t5-small"]},
                                 "cpu|torch|fp32|b4": {"log_ratio": math.log(3.0), "n": 3, "spread": 0.05,
                                                       "models": ["gpt2", "qwen2.5-0.5b", "t5-small"]}}}
    ttft = {"latency": 1234.0, "source": "roofline_calibrated", "detail": "forward pass at 256 tokens"}
    out = predict_generation(spec, "cpu", "torch", CPU, 1, "fp32", None, None, ttft, cal)
    assert out["kv_cache"]["total_bytes"] == 32 * 2 * 32 * 128 * (256 + 63) * 1 * 4
    assert out["tpot_source"] == "roofline_calibrated" and "6 generation rows" in out["tpot_detail"]
    assert out["tpot_ms"] == pytest.approx(1.5 * decode_roofline(spec, 1, "fp32", None, None, CPU).ms)
    assert out["tpot_ms"] > 26.9e9 / 25e9 * 1e3  # at least the fp32 weights read once per token
    # TTFT: the forward pass's answer plus generate()'s own per-step cost, here the H200 host's
    # line (nothing fitted on this device), named
    assert out["ttft_ms"] == pytest.approx(1234.0 + STATIC_DISPATCH["step_ms"]) == 1234.0 + out["ttft_generate_step_ms"]
    assert "generate()'s own per-step cost" in out["ttft_detail"] and "not this machine's" in out["ttft_detail"]
    assert out["request_ms"] == pytest.approx(out["ttft_ms"] + 63 * out["tpot_ms"])
    assert out["decode_tokens_per_s"] == pytest.approx(1e3 / out["tpot_ms"])
    # Batch 8 is not measured: the nearest measured batch (4) answers, and says so.
    eight = predict_generation(spec, "cpu", "torch", CPU, 8, "fp32", None, None, ttft, cal)
    assert eight["tpot_ms"] == pytest.approx(3.0 * decode_roofline(spec, 8, "fp32", None, None, CPU).ms)
    assert "at batch 4" in eight["tpot_detail"] and "batch 8 itself is not measured" in eight["tpot_detail"]
    static = predict_generation(spec, "cpu", "torch", CPU, 1, "fp32", None, None, ttft, {})
    assert static["tpot_source"] == "static_rule" and "assumed" in static["tpot_detail"]
    # nothing measured: half the bandwidth roofline plus the H200 host's dispatch line (on a CPU the two add)
    roof = decode_roofline(spec, 1, "fp32", None, None, CPU)
    host = STATIC_DISPATCH["step_ms"] + roof.kernels * STATIC_DISPATCH["us_per_kernel"] / 1e3
    assert static["tpot_ms"] == pytest.approx(roof.ms / STATIC_DECODE_EFFICIENCY + host)
    assert "fitted on an H200 host's generation rows (not this machine's)" in static["tpot_detail"]


def test_predict_answers_the_generation_scenario_on_an_empty_data_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "empty"))
    out = runner.invoke(app, ["predict", "--model", "llama-2-7b", "--hardware", "cpu,cuda", "--scenario", "generation", "--json"])
    assert out.exit_code == 0, out.output
    answer = json.loads(out.stdout)
    assert answer["mode"] == "generation" and answer["sequence_length"] == 256
    for kind in ("cpu", "cuda"):
        p = answer["predictions"][kind]
        assert p["ttft_source"] == "static_rule" and p["tpot_source"] == "static_rule"
        assert p["ttft_ms"] > 0 and p["tpot_ms"] > 0 and p["kv_cache"]["total_bytes"] == 32 * 2 * 32 * 128 * 319 * 4
    assert answer["predictions"]["cuda"]["tpot_ms"] < answer["predictions"]["cpu"]["tpot_ms"]  # HBM against DDR
    table = runner.invoke(app, ["predict", "--model", "llama-2-7b", "--hardware", "cpu", "--mode", "generation", "--new-tokens", "32"])
    assert table.exit_code == 0, table.output
    assert "256 prompt tokens + 32 new" in table.output and "TPOT" in table.output
    refused = runner.invoke(app, ["predict", "--model", "bert-base-uncased", "--mode", "generation"])
    assert refused.exit_code != 0 and "does not generate" in refused.output
    refused = runner.invoke(app, ["predict", "--model", "gpt2", "--new-tokens", "8"])
    assert refused.exit_code != 0 and "generation scenario" in refused.output


def test_training_calibrates_the_decode_efficiency_from_real_generation_rows(measured):
    """The session's forward-pass rows plus real t5-small generation rows: the artifact's
    `generation` section calibrates this CPU (cpu@<host>|torch|fp32) per batch size on them, and a 7B model's TPOT on this CPU
    is then answered by the calibrated link, naming the rows."""
    from benchmark_runners.hardware import detect_hardware
    from benchmark_runners.measure import ConfigMeasurer
    from benchmark_runners.records import BenchmarkConfig
    from devicefit import store
    from devicefit.predict.hardware_specs import device_specs, row_device
    from devicefit.predict.training import train
    from tests.conftest import FAST_POLICY

    rows = store.rows_of(store.training_frame(store.connect(measured.database, read_only=True)))
    host = rows[0]
    measurer = ConfigMeasurer("gen-run", {}, {"cpu": {"name": host["device_name"], "fingerprint": host["hardware_fingerprint"]}})
    generated = []
    for batch in (1, 2):
        r = measurer.run(BenchmarkConfig("t5-small", mode="generation", batch_size=batch, seq_length=32, new_tokens=8,
                                         policy=FAST_POLICY)).to_json()
        assert r["status"] == "ok", r["error"]
        generated.append({**r, "device_kind": "cpu", "host_fingerprint": host["host_fingerprint"],
                          "hostname": host.get("hostname")})
    assert {row_device(g) for g in generated} == {row_device(host)}
    artifact = train([*rows, *generated], device_specs(detect_hardware().to_json()), host["host_fingerprint"])
    assert artifact["skipped"].get("generation_scenario") == 2  # never a forward-pass target
    entry = artifact["generation"]["decode_efficiency"][f"{row_device(host)}|torch|fp32|b1"]
    assert entry["n"] == 1 and entry["models"] == ["t5-small"] and math.isfinite(entry["log_ratio"])
    assert artifact["generation"]["validation"]["tpot_mape"] is None  # one model: nothing to hold out against
    # TTFT checked in the forward-pass folds: the fold that held t5-small out answers its
    # generation rows at their prompt's length; an encoder-decoder is reported apart. A row timed
    # beside a busy neighbour (contended) is left out of the check, as it is on a busy machine.
    clean = [g for g in generated if not g["contended"]]
    ttft = artifact["validation"].get("ttft")
    if not clean:
        assert ttft is None
    else:
        assert ttft["rows"] == len(clean) and set(ttft["per_model"]) == {"t5-small"}
        assert ttft["decoder_only_rows"] == 0 and ttft["decoder_only_mape"] is None and ttft["mape"] >= 0
        for held_out, g in zip(ttft["held_out_rows"], clean):
            assert held_out["held_out"] == "its fold" and held_out["encoder_decoder"] and held_out["prompt_tokens"] == 32
            assert held_out["ttft_ms"] == g["ttft_ms"] and held_out["ttft_predicted_ms"] > 0
    from devicefit.predict.predictor import PerformancePredictor

    predictor = PerformancePredictor(artifact)
    device = predictor.specs.get(predictor.device_of("cpu"))
    out = predict_generation(resolve_model("llama-2-7b"), "cpu", "torch", device, 1, "fp32", None, None,
                             {"latency": 1.0, "source": "x", "detail": "x"}, artifact["generation"], predictor.device_of("cpu"))
    assert out["tpot_source"] == "roofline_calibrated"
    assert f"1 generation rows of {row_device(host)}/torch/fp32 at batch 1 (t5-small)" in out["tpot_detail"]
    assert "no generation rows of its own" not in out["tpot_detail"]


def test_the_api_answers_generation_with_its_figures_and_refuses_what_cannot_generate(tmp_path):
    from devicefit.api.app import Settings, create_app
    from tests.api.server import call, running

    with running(create_app(Settings(benchmark_dir=tmp_path / "empty", warm_models=()))) as base:
        status, body = call(base, "/performance/predict", {"model_name": "gpt2", "hardware": ["cpu", "openvino", "wasm"],
                                                           "mode": "generation", "new_tokens": 32})
        assert status == 200, body
        cpu = body["predictions"]["cpu"]
        assert cpu["tpot_source"] == "static_rule" and cpu["tpot_ms"] > 0 and cpu["ttft_ms"] > 0
        assert cpu["new_tokens"] == 32 and cpu["kv_cache"]["self_positions"] == 256 + 31
        assert cpu["latency"] == pytest.approx(cpu["ttft_ms"] + 31 * cpu["tpot_ms"])
        assert body["predictions"]["openvino"]["tpot_source"] == "static_rule"  # openvino-genai generates there
        assert body["predictions"]["wasm"]["source"] == "unavailable"  # the browser backend does not generate
        for payload, why in (({"model_name": "bert-base-uncased", "mode": "generation"}, "does not generate"),
                             ({"model_name": "gpt2", "mode": "generation", "sequence_length": 1000}, "1024 positions"),
                             ({"model_name": "gpt2", "new_tokens": 8}, "mode generation")):
            status, body = call(base, "/performance/predict", payload)
            assert status == 422 and why in json.dumps(body), (payload, status, body)
        status, _ = call(base, "/performance/predict", {"model_name": "gpt2", "mode": "generation", "new_tokens": 1})
        assert status == 422


def test_a_decode_step_that_cannot_be_traced_leaves_the_host_term_out_and_says_so(monkeypatch):
    """A model whose cached step the meta trace cannot run still gets its device-side TPOT; its
    rows are not fitted, and the answer says the host's dispatch is not counted."""
    from devicefit.predict import generation

    def untraceable(spec):
        raise AttributeError("no past_key_values")

    monkeypatch.setattr(generation, "decode_step_ops", untraceable)
    spec = resolve_model("gpt2")
    roof = decode_roofline(spec, 1, "fp32", 256, 64, CPU)
    assert roof.kernels is None and roof.ms > 0
    cal = {"dispatch": {"cpu@cpu-test|torch": {"step_ms": 5.0, "us_per_kernel": 10.0, "asynchronous": False, "n": 4, "models": ["x"]}},
           "decode_efficiency": {"cpu@cpu-test|torch|fp32|b1": {"log_ratio": math.log(2), "n": 4, "models": ["x"]}}}
    out = predict_generation(spec, "cpu", "torch", CPU, 1, "fp32", None, None, {"latency": None}, cal, "cpu@cpu-test")
    assert out["tpot_ms"] == pytest.approx(2 * roof.ms) and "could not be traced" in out["tpot_detail"]
    assert calibrate_generation([_row("gpt2", 30.0)], {"cpu@cpu-test": CPU})["dispatch"] == {}


def test_a_held_out_model_alone_at_its_batch_is_validated_as_predicted():
    """Leave-one-model-out scores a held-out row as a prediction answers it: a model measured
    alone at batch 8 gets the batch-4 ratio fitted on the others (the nearest batch), not the prior."""
    from devicefit.predict.decode_calibration import _Point, _predict_point

    point = _Point("cpu@cpu-test|torch|fp32|b8", "gpt2-medium", 10.0, 300, 30.0)
    line = {"step_ms": 0.0, "us_per_kernel": 0.0}
    assert _predict_point(point, {"cpu@cpu-test|torch|fp32|b4": math.log(3)}, line, False) == pytest.approx(30.0)
    assert _predict_point(point, {}, line, False) == pytest.approx(10.0 / STATIC_DECODE_EFFICIENCY)  # nothing fitted: the prior


def test_the_prefill_point_drops_the_logits_of_all_but_the_last_position_and_the_decoder_beyond_its_start():
    """By hand: gpt2's prefill at 32 tokens is its forward pass less the LM head over the 31
    positions whose logits generate() never computes (2 x 768 x 50257 FLOPs each); t5-small's
    runs its decoder over the start token alone, so far less than its forward pass over 32."""
    from devicefit.predict.features import model_point, prefill_point
    from models.op_profile import prefill_peak_activation_bytes

    gpt2 = resolve_model("gpt2")
    assert model_point(gpt2, 32).flops_per_sample - prefill_point(gpt2, 32).flops_per_sample == 2 * 768 * 50257 * 31
    t5 = resolve_model("t5-small")
    forward, prefill = model_point(t5, 32), prefill_point(t5, 32)
    assert prefill.flops_per_sample < 0.75 * forward.flops_per_sample and prefill.ops < forward.ops
    assert prefill.inference_activation_bytes(1) == pytest.approx(prefill_peak_activation_bytes(t5, 32)[0])


def test_ttft_is_the_forward_pass_scaled_to_the_prefill_and_says_so():
    from devicefit.predict.generation import ttft_answer
    from devicefit.predict.predictor import Prediction

    forward = Prediction(100.0, 10.0, 1e9, None, None, None, "trained_predictor", "fitted", None)
    scaled = ttft_answer(forward, (0.4, "the per-operator roofline fitted on cpu@x"))
    assert scaled["latency"] == pytest.approx(40.0) and scaled["prefill_scaled"] and scaled["source"] == "trained_predictor"
    assert "x 0.40" in scaled["detail"] and "cpu@x" in scaled["detail"] and "100 ms" in scaled["detail"]
    plain = ttft_answer(forward, None)
    assert plain["latency"] == 100.0 and "not scaled to the prefill" in plain["detail"] and not plain.get("prefill_scaled")
    missing = ttft_answer(Prediction(None, None, None, None, None, None, "unavailable", "nothing", None), (0.4, "x"))
    assert missing["latency"] is None


def test_an_encoder_decoder_ttft_is_scaled_on_the_devices_roofline_and_no_longer_called_an_overestimate(tmp_path):
    from devicefit.api.app import Settings, create_app
    from tests.api.server import call, running

    with running(create_app(Settings(benchmark_dir=tmp_path / "empty", warm_models=()))) as base:
        status, body = call(base, "/performance/predict", {"model_name": "t5-small", "hardware": ["cpu"], "mode": "generation",
                                                           "sequence_length": 128, "new_tokens": 16})
    assert status == 200, body
    cpu = body["predictions"]["cpu"]
    assert cpu["ttft_ms"] > 0 and "the prefill's time over that pass's" in cpu["ttft_detail"]
    assert "overestimate" not in cpu["ttft_detail"]


def test_ttft_adds_the_fitted_host_lines_per_step_cost_and_the_check_takes_it_from_the_fold():
    """A bare forward pass (what TTFT is scaled from) does not pay generate()'s own work in the
    first step (inputs, cache, logits processors, the token's pick): the device's fitted host
    line's step_ms is added, named; the held-out check adds the line fitted without the model."""
    import numpy as np

    from devicefit.predict.ttft_check import ttft_validation

    spec = resolve_model("gpt2")
    cal = {"dispatch": {"cuda@h|torch": {"step_ms": 1.5, "us_per_kernel": 12.0, "asynchronous": True, "n": 20,
                                         "models": ["t5-small", "whisper-tiny"]}}}
    gpu = DeviceSpec("cuda", "test GPU", 50_000.0, 4_000.0, "measured_probe")
    out = predict_generation(spec, "cuda", "torch", gpu, 1, "fp32", 256, 64, {"latency": 4.0, "source": "trained_predictor",
                                                                          "detail": "fitted"}, cal, "cuda@h")
    assert out["ttft_ms"] == pytest.approx(5.5) and out["ttft_generate_step_ms"] == 1.5
    assert "1.50 ms, the host line fitted on 20 generation rows of cuda@h/torch" in out["ttft_detail"]
    measured = [{"model": "gpt2", "device": "cuda@h", "backend": "torch", "ttft_ms": 6.0, "encoder_decoder": False},
                {"model": "qwen2.5-0.5b", "device": "cuda@h", "backend": "torch", "ttft_ms": 10.0, "encoder_decoder": False}]
    check = ttft_validation(measured, np.array([4.0, 8.0]), {"gpt2": {"cuda@h|torch": 2.0}})
    assert [r["ttft_predicted_ms"] for r in check["held_out_rows"]] == [6.0, 8.0]  # qwen: no line without it, none added
    assert check["per_model"]["gpt2"]["mape"] == 0 and check["per_model"]["qwen2.5-0.5b"]["mape"] == pytest.approx(0.2)


def test_generation_memory_is_the_prefills_peak_not_the_forward_passs(artifact):
    """The prefill holds the last position's logits only, where the forward pass at the prompt's
    length holds all of them (gpt2 at 256 tokens: 255 x 50257 x 4 bytes more): the generation
    answer's memory is the forward pass's scaled by the device's memory model at the two points."""
    from devicefit.predict.features import model_point, prefill_point
    from devicefit.predict.memory_model import TERMS, MemoryModel
    from devicefit.predict.predictor import PerformancePredictor, Request

    gpt2 = resolve_model("gpt2")
    forward, prefill = model_point(gpt2, 256), prefill_point(gpt2, 256)
    activations_only = MemoryModel("cpu", {t: float(t == "inference_activations") for t in TERMS}, ["fp32"], ["inference"], 1)
    dropped = activations_only.bytes(forward, 1, "fp32", "inference") - activations_only.bytes(prefill, 1, "fp32", "inference")
    # 71.1 MB against 36.2 MB traced: the forward pass peaks on the logits of every position
    # (51.5 MB) beside the prompt's KV cache, the prefill elsewhere, holding the last position's
    assert dropped > 0.6 * 255 * 50257 * 4
    predictor = PerformancePredictor(artifact)
    factor, basis = predictor.prefill_memory_factor(Request(forward, 1, "fp32", "inference", "cpu"), prefill)
    assert 0 < factor <= 1 and predictor.device_of("cpu") in basis


def test_a_mixture_of_experts_decode_reads_the_experts_its_tokens_are_routed_to():
    """Mixtral's first four layers (8 experts of 3 x 4096 x 14336 a layer, 2 a token), bf16. On a
    CPU each expert hit is read once: 8 x (1 - (6/8)^batch) of them, 2 at batch 1 and 5.47 at
    batch 4. On a GPU generate() decodes with batched_mm, which copies the expert of each
    (token, expert) pair and reads the copy: 3 x batch x 2 experts' bytes a layer (the H200's
    profile: 8.4 GB a step at batch 1, 33.8 GB at batch 4)."""
    from models.analysis import experts_of

    spec = resolve_model("benchmarks/configs/mixtral-8x7b-4layers.json")
    moe = experts_of(spec)
    assert (moe.experts, moe.per_token, moe.params) == (8, 2, 4 * 8 * 3 * 4096 * 14336)
    per_expert = 2 * 4 * 3 * 4096 * 14336  # bf16 bytes of one expert in each of the four layers
    for batch, distinct in ((1, 2.0), (4, 8 * (1 - 0.75 ** 4))):
        on_gpu, on_cpu = decode_roofline(spec, batch, "bf16", 256, 64, GPU), decode_roofline(spec, batch, "bf16", 256, 64, CPU)
        assert on_gpu.bytes_per_step - on_cpu.bytes_per_step == pytest.approx((3 * batch * 2 - distinct) * per_expert, rel=1e-6)
    # the experts' 33.8 GB, the rest of the weights but the gathered embed_tokens, and the cache
    assert decode_roofline(spec, 4, "bf16", 256, 64, GPU).bytes_per_step / 1e9 == pytest.approx(34.44, abs=0.02)
    # a dense model reads every weight at any batch, on either kind
    gpt2 = resolve_model("gpt2")
    assert decode_roofline(gpt2, 4, "fp32", 256, 64, GPU).bytes_per_step == decode_roofline(gpt2, 4, "fp32", 256, 64, CPU).bytes_per_step


def test_nothing_measured_a_gpu_decodes_at_95_percent_of_its_bandwidth_a_cpu_at_half():
    from devicefit.predict.generation import decode_efficiency_prior

    spec = resolve_model("llama-2-7b")
    ttft = {"latency": 100.0, "source": "static_rule", "detail": "forward pass"}
    on_gpu = predict_generation(spec, "cuda", "torch", GPU, 64, "bf16", None, None, ttft, {})
    on_cpu = predict_generation(spec, "cpu", "torch", CPU, 64, "bf16", None, None, ttft, {})
    assert decode_efficiency_prior(True) == 0.95 and decode_efficiency_prior(False) == STATIC_DECODE_EFFICIENCY == 0.5
    assert "95% of its bandwidth" in on_gpu["tpot_detail"] and "50% of its bandwidth" in on_cpu["tpot_detail"]
    assert on_gpu["tpot_ms"] >= decode_roofline(spec, 64, "bf16", None, None, GPU).ms / 0.95


def test_a_gpu_decode_of_a_mixture_of_experts_holds_one_layers_expert_copies():
    """batched_mm gathers the expert of each (token, expert) pair of a layer: batch x k experts,
    0.33 GiB each for Mixtral in bf16 (3 x 4096 x 14336 x 2 bytes). Nothing on a CPU, nothing
    for a dense model."""
    from devicefit.predict.generation import batched_experts_bytes

    spec = resolve_model("benchmarks/configs/mixtral-8x7b-4layers.json")
    one_expert = 3 * 4096 * 14336 * 2
    assert batched_experts_bytes(spec, 16, "bf16", "cuda") == pytest.approx(16 * 2 * one_expert, rel=1e-9)
    assert batched_experts_bytes(spec, 16, "bf16", "cpu") == 0.0
    assert batched_experts_bytes(resolve_model("gpt2"), 16, "bf16", "cuda") == 0.0


def test_an_encoder_decoder_mixture_with_its_own_expert_loop_decodes_its_decoders_experts_unbatched(tmp_path):
    """A Switch-style model: experts in the encoder and the decoder, looped by the model's own
    code (not transformers' experts interface, which generate() batches on a GPU). A decode step
    reads the decoder's experts only, the same on a CPU and a GPU, and holds no copies."""
    from devicefit.predict.generation import batched_experts_bytes
    from models.analysis import experts_of

    path = tmp_path / "switch-tiny.json"
    path.write_text(json.dumps({"model_type": "switch_transformers", "architectures": ["SwitchTransformersForConditionalGeneration"],
                                "num_layers": 2, "num_decoder_layers": 2, "num_sparse_encoder_layers": 1,
                                "num_sparse_decoder_layers": 1, "d_model": 64, "d_ff": 128, "num_heads": 4, "d_kv": 16,
                                "num_experts": 4, "vocab_size": 100, "is_encoder_decoder": True, "decoder_start_token_id": 0,
                                "pad_token_id": 0, "eos_token_id": 1}))
    spec = resolve_model(str(path))
    moe = experts_of(spec)
    assert not moe.interface and moe.decoder_layers == 1 and moe.decoder_params == moe.params / 2 == 4 * 2 * 64 * 128
    on_cpu, on_gpu = decode_roofline(spec, 4, "fp32", 16, 8, CPU), decode_roofline(spec, 4, "fp32", 16, 8, GPU)
    assert on_cpu.bytes_per_step == on_gpu.bytes_per_step > on_cpu.cache_bytes
    assert batched_experts_bytes(spec, 4, "fp32", "cuda") == 0.0


def test_a_mixture_whose_experts_cannot_be_counted_is_read_as_a_dense_model(monkeypatch):
    import devicefit.predict.generation as generation
    import devicefit.predict.moe_decode as moe_decode
    from models.analysis import Experts

    spec = resolve_model("gpt2")
    dense = decode_roofline(spec, 4, "fp32", 256, 64, CPU).bytes_per_step
    monkeypatch.setattr(moe_decode, "experts_of", lambda s: Experts(8, 2, 0, 0, 0, 0, True))
    assert decode_roofline(spec, 4, "fp32", 256, 64, CPU).bytes_per_step == dense
    assert generation.batched_experts_bytes(spec, 4, "fp32", "cuda") == 0.0


def test_the_tpot_detail_says_how_a_mixtures_experts_were_counted():
    spec = resolve_model("benchmarks/configs/mixtral-8x7b-4layers.json")
    ttft = {"latency": 10.0, "source": "static_rule", "detail": "forward pass"}
    on_gpu = predict_generation(spec, "cuda", "torch", GPU, 4, "bf16", None, None, ttft, {})
    on_cpu = predict_generation(spec, "cpu", "torch", CPU, 4, "bf16", None, None, ttft, {})
    assert "batched_mm" in on_gpu["tpot_detail"] and "4 x 2 (token, expert) pairs" in on_gpu["tpot_detail"]
    assert "the 5.5 that a batch of 4 at 2 experts a token hits" in on_cpu["tpot_detail"]
    assert on_gpu["decode_transient_mb"] == pytest.approx(4 * 2 * 3 * 4096 * 14336 * 2 / 2**20) and on_cpu["decode_transient_mb"] == 0


def test_a_cpus_experts_are_costed_at_the_ratio_of_the_rows_each_expert_multiplies():
    """A CPU's GEMMs of few rows run far from the roofline (the EPYC: 2.6x at batch 1, 6.3x at 4),
    and a mixture's experts see fewer rows than the batch: at batch 4 the 8 (token, expert)
    pairs of a top-2 of 8 spread over the 5.47 experts hit, 1.46 rows each; at batch 16, 4.04.
    So the experts' part of the step takes the ratio of batch 1 and 4 there, the rest the
    batch's. On a GPU batched_mm multiplies one row per pair."""
    from devicefit.predict.moe_decode import expert_rows
    from models.analysis import experts_of

    spec = resolve_model("benchmarks/configs/mixtral-small-4layers.json")
    moe = experts_of(spec)
    assert expert_rows(moe, 4, False) == pytest.approx(8 / (8 * (1 - 0.75 ** 4))) == pytest.approx(1.463, abs=1e-3)
    assert expert_rows(moe, 16, False) == pytest.approx(4.04, abs=0.01) and expert_rows(moe, 16, True) == 1.0
    entry = {"n": 4, "models": ["gpt2", "qwen2.5-0.5b"]}
    cal = {"decode_efficiency": {"cpu@h|torch|fp32|b1": {**entry, "log_ratio": math.log(2.0)},
                                 "cpu@h|torch|fp32|b4": {**entry, "log_ratio": math.log(6.0)}},
           "dispatch": {"cpu@h|torch": {"step_ms": 1.0, "us_per_kernel": 10.0, "asynchronous": False, "n": 8, "models": ["gpt2"]}}}
    ttft = {"latency": None}
    for batch, expert_ratio in ((4, 2.0), (16, 6.0)):
        roof = decode_roofline(spec, batch, "fp32", 256, 64, CPU)
        assert 0 < roof.expert_ms < roof.ms and roof.expert_rows == pytest.approx(expert_rows(moe, batch, False))
        out = predict_generation(spec, "cpu", "torch", CPU, batch, "fp32", 256, 64, ttft, cal, "cpu@h")
        host = 1.0 + roof.kernels * 10.0 / 1e3
        assert out["tpot_ms"] == pytest.approx((roof.ms - roof.expert_ms) * 6.0 + roof.expert_ms * expert_ratio + host)
        assert f"the ratio at batch {1 if batch == 4 else 4}: each expert's product multiplies" in out["tpot_detail"]
    # a dense model has no experts' part: the batch's ratio for all of it
    gpt2 = decode_roofline(resolve_model("gpt2"), 4, "fp32", 256, 64, CPU)
    assert gpt2.expert_ms == 0.0


def test_the_fit_recovers_ratios_from_a_mixtures_rows_costed_at_their_experts_rows_and_predicts_it_held_out():
    """Rows built as the model says a CPU runs them (dense models at 2x the roofline at batch 1
    and 6x at batch 4; a 4-layer Mixtral's experts at the ratio of the batch nearest their rows:
    batch 1 for its batch 1 and 4, batch 4 for its batch 16): the fit gives the ratios back, and
    the held-out Mixtral is predicted from the dense models alone within the prior's small pull.
    Costing its experts at the batch's ratio instead would have put batch 4 at about 2.3x."""
    specs = {"cpu@cpu-test": CPU}
    ratio = {1: 2.0, 4: 6.0, 16: 6.0}  # batch 16 is measured on the mixture alone: its rest at the nearest dense ratio
    rows = [_row(m, ratio[b] * decode_roofline(resolve_model(m), b, "fp32", 256, 64, CPU).ms, b)
            for m in ("gpt2", "qwen2.5-0.5b", "t5-small") for b in (1, 4)]
    path = "benchmarks/configs/mixtral-small-4layers.json"
    mixtral = resolve_model(path)
    truth = {}
    for b, expert_batch in ((1, 1), (4, 1), (16, 4)):
        roof = decode_roofline(mixtral, b, "fp32", 256, 64, CPU)
        truth[b] = (roof.ms - roof.expert_ms) * ratio[b] + roof.expert_ms * ratio[expert_batch]
        rows.append({**_row(mixtral.name, truth[b], b), "model_path": path})
    cal = calibrate_generation(rows, specs)
    fitted = {int(k.rsplit("|b", 1)[1]): math.exp(v["log_ratio"]) for k, v in cal["decode_efficiency"].items()}
    assert fitted[1] == pytest.approx(2.0, rel=0.02) and fitted[4] == pytest.approx(6.0, rel=0.03)
    assert cal["validation"]["tpot_mape"] < 0.03
    four = decode_roofline(mixtral, 4, "fp32", 256, 64, CPU)
    assert four.ms * 6.0 / truth[4] > 2.0  # what the batch's ratio alone would have said

