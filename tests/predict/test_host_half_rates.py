"""A host's bf16 speed-up over fp32, measured on that host, carries a bf16 rate between devices
whose specs have no bf16 matmul of their own (OpenVINO's CPU devices, probes from before the
probe measured bf16)."""
import pytest

from devicefit.predict.hardware_specs import DeviceSpec
from devicefit.predict.host_half_rates import MIN_HALF_ROWS, host_speedups, on_host_cpu, transfer_factors, with_probed_half
from devicefit.predict.operator_roofline import OperatorRoofline, transfer_roofline
from devicefit.predict.training import Baselines

AMX_HOST, AVX512_HOST, THIRD = "cpu-aaaaaaaaaaaa", "cpu-bbbbbbbbbbbb", "cpu-cccccccccccc"


def fit(kind: str, backend: str, rates: dict[str, float], peak: float, transferred_from: str | None = None,
        half_gflops: dict[str, float] | None = None, rows: int = 20) -> OperatorRoofline:
    values = {**{f"linear_gflops_{p}": r for p, r in rates.items()}, "bandwidth_gbs": 10.0, "kernel_ms": 0.01}
    return OperatorRoofline(kind, backend, values, dict(values), rows * len(rates), 0.1, peak, 30.0, transferred_from, half_gflops,
                            precision_rows=None if transferred_from else {p: rows for p in rates})


def spec(kind: str, peak: float, bf16: float | None = None) -> DeviceSpec:
    return DeviceSpec(kind, kind, peak, 30.0, "measured_probe", bf16_gflops=bf16)


def test_each_hosts_speedup_is_torchs_on_that_machines_own_cpu_by_rows_and_by_probe():
    roofline = {
        f"cpu@{AMX_HOST}|torch": fit("cpu", "torch", {"fp32": 300.0, "bf16": 930.0}, 325.0),  # 3.1x from rows
        f"openvino@{AVX512_HOST}|openvino": fit("openvino", "openvino", {"fp32": 220.0, "bf16": 420.0}, 194.0),  # not torch's
        f"cpu@{AVX512_HOST}|torch": fit("cpu", "torch", {"fp32": 170.0}, 194.0),  # no bf16 rows: its probe only
        f"cpu@{AVX512_HOST}+t1|torch": fit("cpu", "torch", {"fp32": 90.0, "bf16": 900.0}, 194.0),  # a profile: not the machine
        f"cpu@{AVX512_HOST}|plugin": fit("cpu", "plugin", {"fp32": 90.0, "bf16": 900.0}, 194.0),  # another backend
        f"cpu@{THIRD}|torch": fit("cpu", "torch", {"fp32": 1.0, "bf16": 50.0}, 1.0, transferred_from="cpu@x"),  # not its rows
        f"cuda@{AVX512_HOST}+cuda-123456789abc|torch": fit("cuda", "torch", {"fp32": 9000.0, "bf16": 90000.0}, 19500.0),
    }
    specs = {f"cpu@{AMX_HOST}": spec("cpu", 325.0, bf16=1300.0), f"cpu@{AVX512_HOST}": spec("cpu", 194.0, bf16=299.0),
             f"openvino@{THIRD}": spec("openvino", 100.0, bf16=5000.0)}  # only a machine's CPU probe counts
    speedups = host_speedups(roofline, specs)
    assert speedups[AMX_HOST]["bf16"]["rows"][0] == pytest.approx(3.1)
    assert f"cpu@{AMX_HOST}'s 20 bf16 rows" in speedups[AMX_HOST]["bf16"]["rows"][1]
    assert speedups[AMX_HOST]["bf16"]["probe"][0] == pytest.approx(4.0)
    assert speedups[AVX512_HOST] == {"bf16": {"probe": (pytest.approx(299.0 / 194.0), f"cpu@{AVX512_HOST}'s probe: bf16 matmul 1.54x fp32")}}
    assert THIRD not in speedups
    # OpenVINO between the two: the measure both hosts share (the probes), not the AMX host's rows
    (factor, basis), = transfer_factors(f"openvino@{AVX512_HOST}", f"openvino@{AMX_HOST}", speedups).values()
    assert factor == pytest.approx(4.0 / (299.0 / 194.0)) and "rows" not in basis
    # without the AMX host's probe: its rows against the other's probe
    no_probe = host_speedups(roofline, {**specs, f"cpu@{AMX_HOST}": spec("cpu", 325.0)})
    (factor, basis), = transfer_factors(f"openvino@{AVX512_HOST}", f"openvino@{AMX_HOST}", no_probe).values()
    assert factor == pytest.approx(3.1 / (299.0 / 194.0)) and "rows" in basis and "probe" in basis
    # a GPU behind the host does not take its CPU's speed-up
    assert transfer_factors(f"cpu@{AVX512_HOST}", f"cuda@{AMX_HOST}+cuda-123456789abc", speedups) == {}
    assert on_host_cpu(f"cpu@{AMX_HOST}+t1") and not on_host_cpu("cpu") and not on_host_cpu(f"wasm@{AMX_HOST}")


def test_a_fitted_rate_from_too_few_half_precision_rows_is_its_prior_and_does_not_count():
    few = fit("cpu", "torch", {"fp32": 300.0, "bf16": 930.0}, 325.0, rows=MIN_HALF_ROWS - 1)
    assert host_speedups({f"cpu@{AMX_HOST}|torch": few}, {}) == {}
    stored_before = OperatorRoofline.from_json({k: v for k, v in few.to_json().items() if k != "precision_rows"})
    assert host_speedups({f"cpu@{AMX_HOST}|torch": stored_before}, {}) == {}


def test_a_transfer_carries_bf16_by_the_hosts_speedups_where_the_probes_have_no_bf16_matmul():
    source = fit("openvino", "openvino", {"fp32": 220.0, "bf16": 420.0}, 194.0)
    target = spec("openvino", 325.0)
    moved = transfer_roofline(source, target, f"openvino@{AVX512_HOST}", {"bf16": (2.0, "the hosts' figures")})
    compute = 325.0 / 194.0
    assert moved.values["linear_gflops_fp32"] == pytest.approx(220.0 * compute)
    assert moved.values["linear_gflops_bf16"] == pytest.approx(420.0 * compute * 2.0)
    assert moved.half_by_fp32 == () and moved.half_by_hosts == {"bf16": "the hosts' figures"}
    assert "speed-ups over fp32" in moved.basis(f"openvino@{AMX_HOST}", "bf16") and "the hosts' figures" in moved.basis("x", "bf16")
    assert OperatorRoofline.from_json(moved.to_json()) == moved
    # both probes measured bf16: their ratio wins over the hosts' factor
    probed = transfer_roofline(fit("cpu", "torch", {"fp32": 150.0, "bf16": 250.0}, 194.0, half_gflops={"bf16": 299.0}),
                               spec("cpu", 325.0, bf16=1000.0), "cpu@b", {"bf16": (2.0, "unused")})
    assert probed.values["linear_gflops_bf16"] == pytest.approx(250.0 * 1000.0 / 299.0) and probed.half_by_hosts is None
    # without the hosts' figures, the fp32 peaks carry it and say so
    assert transfer_roofline(source, target).half_by_fp32 == ("bf16",)


def test_baselines_carry_openvinos_bf16_to_a_host_whose_torch_rows_measured_its_speedup():
    """Leave-one-device-out's case: OpenVINO measured on one host, torch (in fp32 and bf16) on
    another; OpenVINO's fit reaches the second host with bf16 scaled by its torch speed-up, and
    the fits of the devices' own rows are left as they are."""
    own = {f"openvino@{AVX512_HOST}|openvino": fit("openvino", "openvino", {"fp32": 220.0, "bf16": 420.0}, 194.0),
           f"cpu@{AMX_HOST}|torch": fit("cpu", "torch", {"fp32": 300.0, "bf16": 930.0}, 325.0)}
    specs = {f"openvino@{AMX_HOST}": spec("openvino", 325.0), f"cpu@{AVX512_HOST}": spec("cpu", 194.0, bf16=299.0),
             f"cpu@{AMX_HOST}": spec("cpu", 325.0)}
    carried = Baselines(dict(own), {}).with_devices(specs, {f"openvino@{AMX_HOST}", *(k.split("|")[0] for k in own)})
    assert all(carried.roofline[k] == v for k, v in own.items())
    moved = carried.roofline[f"openvino@{AMX_HOST}|openvino"]
    assert moved.transferred_from == f"openvino@{AVX512_HOST}"
    assert moved.values["linear_gflops_bf16"] == pytest.approx(420.0 * 325.0 / 194.0 * 3.1 / (299.0 / 194.0))
    # with no measure of the AMX host's bf16, the fp32 peaks alone, as before
    alone = Baselines({k: v for k, v in own.items() if "openvino" in k}, {}).with_devices(specs, {f"openvino@{AMX_HOST}"})
    assert alone.roofline[f"openvino@{AMX_HOST}|openvino"].half_by_fp32 == ("bf16",)


def test_a_served_device_of_a_machine_never_measured_takes_its_host_cpus_probe_for_bf16():
    """`devicefit select` asks for OpenVINO on a registered machine nothing was measured on with
    that machine's CPU probe beside the device's own figures (Request.host_spec): its bf16
    rides the two hosts' probes, as leave-one-machine-out validated it; without it, the fp32 peaks."""
    from devicefit.predict.features import model_point
    from devicefit.predict.predictor import PerformancePredictor, Request
    from models.resolve import resolve_model

    predictor = PerformancePredictor.__new__(PerformancePredictor)
    predictor.artifact, predictor.devices, predictor._carried = {}, {}, {}
    predictor.specs = {f"cpu@{AVX512_HOST}": spec("cpu", 194.0, bf16=299.0)}
    predictor.baselines = Baselines({f"openvino@{AVX512_HOST}|openvino": fit("openvino", "openvino", {"fp32": 220.0, "bf16": 420.0}, 194.0)}, {})
    point = model_point(resolve_model("bert-tiny"))
    ask = dict(point=point, batch_size=1, precision="bf16", mode="inference", kind="openvino", device=f"openvino@{AMX_HOST}",
               spec=spec("openvino", 325.0))
    with_host = predictor.baselines_for(Request(**ask, host_spec=spec("cpu", 325.0, bf16=1300.0)))
    moved = with_host.roofline[f"openvino@{AMX_HOST}|openvino"]
    assert moved.half_by_hosts and moved.values["linear_gflops_bf16"] == pytest.approx(420.0 * 325.0 / 194.0 * 4.0 / (299.0 / 194.0))
    alone = predictor.baselines_for(Request(**ask)).roofline[f"openvino@{AMX_HOST}|openvino"]
    assert alone.half_by_fp32 == ("bf16",)


def test_a_cpus_own_fit_takes_a_half_precision_it_has_no_rows_in_from_its_probe_alone():
    own = fit("cpu", "torch", {"fp32": 170.0}, 200.0, half_gflops={"bf16": 420.0})
    device = f"cpu@{AVX512_HOST}"
    probed = with_probed_half(own, device, "bf16", "inference")
    assert probed.values["linear_gflops_bf16"] == pytest.approx(170.0 * 420.0 / 200.0)
    assert {k: v for k, v in probed.values.items() if k != "linear_gflops_bf16"} == own.values  # every other rate as fitted
    assert probed.covers("bf16", "inference") and not own.covers("bf16", "inference")
    assert "its probe's bf16 matmul over fp32, 2.10x" in probed.basis(device, "bf16") and "probe" not in probed.basis(device, "fp32")
    assert "half_by_probe" not in own.to_json()  # an answer's, never stored
    # nothing to extend: a precision its rows measured, fp32 or int8, no probed figure, another backend or a GPU
    assert with_probed_half(fit("cpu", "torch", {"fp32": 170.0, "bf16": 300.0}, 200.0, half_gflops={"bf16": 420.0}), device, "bf16", "inference") is None
    assert with_probed_half(own, device, "int8", "inference") is None and with_probed_half(own, device, "fp32", "inference") is None
    assert with_probed_half(own, device, "fp16", "inference") is None  # the probe measured no fp16 matmul
    assert with_probed_half(fit("cpu", "torch", {"fp32": 170.0}, 200.0), device, "bf16", "inference") is None
    # an emulated half precision (the probe's matmul slower than fp32: fp16 on a Zen 4 EPYC, 0.19x) is not extended
    emulated = fit("cpu", "torch", {"fp32": 170.0}, 200.0, half_gflops={"bf16": 420.0, "fp16": 38.0})
    assert with_probed_half(emulated, device, "fp16", "inference") is None
    assert with_probed_half(emulated, device, "bf16", "inference") is not None
    assert with_probed_half(fit("openvino", "openvino", {"fp32": 170.0}, 200.0, half_gflops={"bf16": 420.0}),
                            f"openvino@{AVX512_HOST}", "bf16", "inference") is None
    assert with_probed_half(fit("cuda", "torch", {"fp32": 9000.0}, 19500.0, half_gflops={"bf16": 700000.0}),
                            f"cuda@{AVX512_HOST}+cuda-123456789abc", "bf16", "inference") is None
    # training needs a fitted backward: a fit without one is not extended to it
    assert with_probed_half(own, device, "bf16", "training") is None
    trains = fit("cpu", "torch", {"fp32": 170.0}, 200.0, half_gflops={"bf16": 420.0})
    trains.values["backward_factor"] = 2.0
    assert with_probed_half(trains, device, "bf16", "training").covers("bf16", "training")
    # a profile of the machine's CPU was probed under its profile: its own figure moves its own fit
    assert with_probed_half(own, f"{device}+t1", "bf16", "inference") is not None
