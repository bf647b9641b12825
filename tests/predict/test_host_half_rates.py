"""A host's bf16 speed-up over fp32, measured on that host, carries a bf16 rate between devices
whose specs have no bf16 matmul of their own (OpenVINO's CPU devices, probes from before the
probe measured bf16)."""
import pytest

from devicefit.predict.hardware_specs import DeviceSpec
from devicefit.predict.host_half_rates import host_speedups, transfer_factors
from devicefit.predict.operator_roofline import OperatorRoofline, transfer_roofline
from devicefit.predict.training import Baselines

AMX_HOST, AVX512_HOST = "cpu-aaaaaaaaaaaa", "cpu-bbbbbbbbbbbb"


def fit(kind: str, backend: str, rates: dict[str, float], peak: float, transferred_from: str | None = None,
        half_gflops: dict[str, float] | None = None) -> OperatorRoofline:
    values = {**{f"linear_gflops_{p}": r for p, r in rates.items()}, "bandwidth_gbs": 10.0, "kernel_ms": 0.01}
    return OperatorRoofline(kind, backend, values, dict(values), 40, 0.1, peak, 30.0, transferred_from, half_gflops)


def spec(kind: str, peak: float, bf16: float | None = None) -> DeviceSpec:
    return DeviceSpec(kind, kind, peak, 30.0, "measured_probe", bf16_gflops=bf16)


def test_a_hosts_speedup_comes_from_torchs_fitted_rows_first_then_its_probe():
    roofline = {
        f"cpu@{AMX_HOST}|torch": fit("cpu", "torch", {"fp32": 300.0, "bf16": 930.0}, 325.0),  # 3.1x from rows
        f"openvino@{AMX_HOST}|openvino": fit("openvino", "openvino", {"fp32": 360.0, "bf16": 1350.0}, 325.0),  # not torch's
        f"cpu@{AVX512_HOST}|torch": fit("cpu", "torch", {"fp32": 170.0}, 194.0),  # no bf16 rows: its probe
        f"cpu@{AVX512_HOST}+t1|torch": fit("cpu", "torch", {"fp32": 90.0, "bf16": 900.0}, 194.0),  # a profile: not the machine
        "cpu@cpu-cccccccccccc|torch": fit("cpu", "torch", {"fp32": 1.0, "bf16": 50.0}, 1.0, transferred_from="cpu@x"),
        f"cuda@{AVX512_HOST}+cuda-123456789abc|torch": fit("cuda", "torch", {"fp32": 9000.0, "bf16": 90000.0}, 19500.0),
    }
    specs = {f"cpu@{AMX_HOST}": spec("cpu", 325.0), f"cpu@{AVX512_HOST}": spec("cpu", 194.0, bf16=299.0),
             f"openvino@{AVX512_HOST}": spec("openvino", 194.0, bf16=5000.0)}  # only a CPU's own probe counts
    speedups = host_speedups(roofline, specs)
    assert speedups[AMX_HOST]["bf16"][0] == pytest.approx(3.1)
    assert f"cpu@{AMX_HOST}'s bf16 rows" in speedups[AMX_HOST]["bf16"][1]
    assert speedups[AVX512_HOST]["bf16"][0] == pytest.approx(299.0 / 194.0)
    assert "probe" in speedups[AVX512_HOST]["bf16"][1]
    assert "cpu-cccccccccccc" not in speedups
    # OpenVINO from the AVX-512 host to the AMX host: bf16 is 3.1 / 1.54 times the fp32 peaks' ratio
    (factor, basis), = transfer_factors(f"openvino@{AVX512_HOST}", f"openvino@{AMX_HOST}", speedups).values()
    assert factor == pytest.approx(3.1 / (299.0 / 194.0)) and "rows" in basis and "probe" in basis
    # a GPU behind the host does not take its CPU's speed-up
    assert transfer_factors(f"cpu@{AVX512_HOST}", f"cuda@{AMX_HOST}+cuda-123456789abc", speedups) == {}


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
    another; OpenVINO's fit reaches the second host with bf16 scaled by its torch speed-up."""
    baselines = Baselines({f"openvino@{AVX512_HOST}|openvino": fit("openvino", "openvino", {"fp32": 220.0, "bf16": 420.0}, 194.0),
                           f"cpu@{AMX_HOST}|torch": fit("cpu", "torch", {"fp32": 300.0, "bf16": 930.0}, 325.0)}, {})
    specs = {f"openvino@{AMX_HOST}": spec("openvino", 325.0), f"cpu@{AVX512_HOST}": spec("cpu", 194.0, bf16=299.0),
             f"cpu@{AMX_HOST}": spec("cpu", 325.0)}
    carried = baselines.with_devices(specs, {f"openvino@{AMX_HOST}"}).roofline[f"openvino@{AMX_HOST}|openvino"]
    assert carried.transferred_from == f"openvino@{AVX512_HOST}"
    assert carried.values["linear_gflops_bf16"] == pytest.approx(420.0 * 325.0 / 194.0 * 3.1 / (299.0 / 194.0))
    # with no measure of the AMX host's bf16, the fp32 peaks alone, as before
    alone = Baselines({k: v for k, v in baselines.roofline.items() if "openvino" in k}, {}).with_devices(specs, {f"openvino@{AMX_HOST}"})
    assert alone.roofline[f"openvino@{AMX_HOST}|openvino"].half_by_fp32 == ("bf16",)
