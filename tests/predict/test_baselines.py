"""The fitted physical baselines: they recover known parameters, and say what they cover."""
import pytest

from devicefit.predict.features import model_point
from devicefit.predict.hardware_specs import DeviceSpec
from devicefit.predict.memory_model import TERMS, fit_memory_model
from devicefit.predict.operator_roofline import fit_operator_roofline, operator_time_ms, parameter_priors
from models.resolve import resolve_model

SPEC = DeviceSpec("cpu", "test cpu", 200.0, 50.0, "measured_probe")
MODELS = ("bert-tiny", "all-MiniLM-L6-v2", "mobilenet-v2", "resnet-50", "t5-small", "gpt2")


@pytest.fixture(scope="module")
def points():
    return [model_point(resolve_model(m)) for m in MODELS]


def test_roofline_fit_recovers_the_parameters_that_made_the_times(points):
    has = {int(c) for p in points for c in set(p.profile.category.tolist())}
    truth = {k: v * 1.3 for k, v in parameter_priors(SPEC, {"fp32", "int8"}, {"inference"}, has).items()}
    truth["linear_gflops_fp32"] = 140.0
    samples = [(p, b, pr, "inference", operator_time_ms(p, b, pr, "inference", truth))
               for p in points for b in (1, 4, 16) for pr in ("fp32", "int8")]
    fit = fit_operator_roofline("cpu", "torch", samples, SPEC)
    assert fit.rms_log_error < 0.05
    for p, b, pr, m, ms in samples:
        assert fit.time_ms(p, b, pr, m) == pytest.approx(ms, rel=0.1)
    assert fit.values["linear_gflops_fp32"] == pytest.approx(140.0, rel=0.15)


def test_roofline_fit_recovers_a_transcendental_rate_and_the_cache_term(points):
    """With exp-evaluating activations 10x slower than their prior (EfficientNet's SiLU, GELU in
    bert and gpt2), the fit finds their rate; small operators run faster than DRAM bandwidth
    under a cache gain."""
    points = [*points, model_point(resolve_model("efficientnet-b0"))]
    has = {int(c) for p in points for c in set(p.profile.category.tolist())} | {"transcendental"}
    truth = parameter_priors(SPEC, {"fp32"}, {"inference"}, has)
    truth["transcendental_gelems"] /= 10
    samples = [(p, b, "fp32", "inference", operator_time_ms(p, b, "fp32", "inference", truth))
               for p in points for b in (1, 4, 16)]
    fit = fit_operator_roofline("cpu", "torch", samples, SPEC)
    # from 10x off at its prior to within 35% (the prior's weak pull keeps part of the gap)
    assert fit.values["transcendental_gelems"] == pytest.approx(truth["transcendental_gelems"], rel=0.35)
    mobilenet = points[MODELS.index("mobilenet-v2")]
    without_cache = {**truth, "cache_bandwidth_gain": 0.0}
    assert operator_time_ms(mobilenet, 1, "fp32", "inference", truth) < operator_time_ms(mobilenet, 1, "fp32", "inference", without_cache)


def test_roofline_covers_only_what_it_was_fitted_on(points):
    samples = [(p, b, "fp32", "inference", 10.0 * b) for p in points[:3] for b in (1, 4)]
    fit = fit_operator_roofline("cpu", "torch", samples, SPEC)
    assert fit.covers("fp32", "inference")
    assert not fit.covers("int8", "inference") and not fit.covers("fp32", "training")


def test_memory_model_recovers_counted_terms(points):
    truth = dict(zip(TERMS, (4e8, 1.0, 1.0, 0.7, 3.0, 1.2)))
    from devicefit.predict.memory_model import MemoryModel

    model = MemoryModel("cpu", truth, ["fp32", "int8"], ["inference", "training"], 0)
    samples = [(p, b, pr, m, model.bytes(p, b, pr, m)) for p in points[:4] for b in (1, 8)
               for pr, m in (("fp32", "inference"), ("int8", "inference"), ("fp32", "training"))]
    fit = fit_memory_model("cpu", samples)
    for p, b, pr, m, nbytes in samples:
        assert fit.bytes(p, b, pr, m) == pytest.approx(nbytes, rel=0.01)
    assert fit.covers("int8", "inference") and not fit.covers("fp16", "inference")
    # An int8 row peaks with the fp32 build and the int8 copy both counted.
    p = points[0]
    assert model.bytes(p, 1, "int8", "inference") > model.bytes(p, 1, "fp32", "inference")


def test_a_probed_half_precision_matmul_is_the_prior_of_its_gemms():
    """bf16/fp16 GEMMs start from the rate the device's probe measured (an H200's tensor cores do
    about 15x its fp32; a CPU without native bf16 less than 1x), not the fp32 peak x 2, which
    stays the prior where nothing was measured."""
    measured = DeviceSpec("cuda", "test gpu", 50_000.0, 4_000.0, "measured_probe", bf16_gflops=700_000.0)
    priors = parameter_priors(measured, {"fp32", "bf16", "fp16"}, {"inference"}, set())
    assert priors["linear_gflops_bf16"] == pytest.approx(0.75 * 700_000.0)
    assert priors["linear_gflops_fp16"] == pytest.approx(0.75 * 50_000.0 * 2)  # not measured: the 2x rule
    assert priors["linear_gflops_fp32"] == pytest.approx(0.75 * 50_000.0)


def test_the_probes_half_precision_figures_reach_the_device_spec_and_bad_ones_do_not():
    from devicefit.predict.hardware_specs import spec_from_probe

    spec = spec_from_probe("cpu", "x", {"matmul_gflops_best": 150.0, "memory_bandwidth_gbs_best": 30.0,
                                        "matmul_gflops_bf16_best": 40.0, "matmul_gflops_fp16_best": None})
    assert spec.bf16_gflops == 40.0 and spec.fp16_gflops is None
    garbage = spec_from_probe("cpu", "x", {"matmul_gflops_best": 150.0, "memory_bandwidth_gbs_best": 30.0,
                                           "matmul_gflops_bf16_best": float("nan"), "matmul_gflops_fp16_best": True})
    assert garbage.bf16_gflops is None and garbage.fp16_gflops is None


def test_a_transfer_scales_half_precision_rates_by_the_probed_half_precision_matmuls():
    """From an AVX2 CPU (bf16 emulated at 16 GFLOP/s beside 170 in fp32, the EPYC's probe) to
    one with AMX (1,000 bf16 beside 370 fp32): the bf16 GEMM rate follows the bf16 probes (x62),
    not the fp32 peaks (x2.2); fp16, which the second probe did not measure, follows fp32."""
    from devicefit.predict.operator_roofline import OperatorRoofline, transfer_roofline

    avx2 = DeviceSpec("cpu", "AVX2 CPU", 170.0, 20.0, "measured_probe", bf16_gflops=16.0, fp16_gflops=19.0)
    amx = DeviceSpec("cpu", "AMX CPU", 370.0, 30.0, "measured_probe", bf16_gflops=1000.0)
    values = {"linear_gflops_fp32": 120.0, "linear_gflops_bf16": 10.0, "linear_gflops_fp16": 12.0, "bandwidth_gbs": 15.0,
              "kernel_ms": 0.01}
    fit = OperatorRoofline("cpu", "torch", values, dict(values), 40, 0.1, avx2.peak_gflops, avx2.bandwidth_gbs,
                           half_gflops={"bf16": 16.0, "fp16": 19.0})
    moved = transfer_roofline(fit, amx, "cpu@avx2")
    assert moved.values["linear_gflops_bf16"] == pytest.approx(10.0 * 1000 / 16)
    assert moved.values["linear_gflops_fp16"] == pytest.approx(12.0 * 370 / 170)
    assert moved.values["linear_gflops_fp32"] == pytest.approx(120.0 * 370 / 170)
    assert moved.values["bandwidth_gbs"] == pytest.approx(15.0 * 30 / 20) and moved.values["kernel_ms"] == 0.01
    assert moved.half_gflops == {"bf16": 1000.0}
    assert OperatorRoofline.from_json(moved.to_json()) == moved
    # A fit from before probes measured half precision (no half_gflops): the fp32 ratio, as before.
    old = OperatorRoofline.from_json({k: v for k, v in fit.to_json().items() if k != "half_gflops"})
    assert transfer_roofline(old, amx).values["linear_gflops_bf16"] == pytest.approx(10.0 * 370 / 170)
