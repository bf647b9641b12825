"""Training targets at the device's typical speed (devicefit/predict/speed.py)."""
import pytest

from benchmark_runners.speed_reference import MIN_READINGS, TRACKING, training_power
from devicefit.predict import speed, training
from devicefit.predict.hardware_specs import DeviceSpec, row_device
from tests.predict.test_predictors import rows_of


def _row(device_kind: str, host: str, rate: float | None, backend: str = "torch") -> dict:
    reference = None if rate is None else {"before_gflops": rate, "after_gflops": rate}
    return {"device_kind": device_kind, "device": device_kind, "host_fingerprint": host, "speed_reference": reference,
            "backend": backend}


def test_each_row_is_scaled_by_its_reading_over_its_devices_typical_one():
    """By the ratio to the power TRACKING: a model's time follows about 0.6 of the reading's swing."""
    assert 0 < TRACKING < 1
    rows = [_row("cpu", "cpu-a", r) for r in (100, 100, 100, 100, 80, 120, 40, 400)] + [_row("cpu", "cpu-a", None)]
    factors, summary = speed.speed_factors(rows)
    assert factors[:6] == pytest.approx([1, 1, 1, 1, 0.8 ** TRACKING, 1.2 ** TRACKING])
    # beyond MAX_FACTOR a reading is more likely disturbed itself: its ratio clamped
    assert factors[6] == pytest.approx((1 / speed.MAX_FACTOR) ** TRACKING) and factors[7] == pytest.approx(speed.MAX_FACTOR ** TRACKING)
    assert factors[8] == 1.0  # no reading: the measured figure
    (device, figures), = summary.items()
    assert figures["typical_gflops"] == 100 and figures["rows"] == 8 and figures["power"] == TRACKING


def test_openvino_rows_keep_their_measured_figure_where_torch_rows_are_scaled():
    """Over three make runs OpenVINO's rows were predicted better unscaled (TRACKING_BY_BACKEND)."""
    assert training_power("openvino") == 0 and training_power("torch") == TRACKING
    rows = [_row("openvino", "cpu-a", r, "openvino") for r in (100, 100, 100, 100, 80)] \
        + [_row("cpu", "cpu-a", r) for r in (100, 100, 100, 100, 80)]
    factors, summary = speed.speed_factors(rows)
    assert factors[:5] == [1.0] * 5 and factors[9] == pytest.approx(0.8 ** TRACKING)
    assert [s["power"] for s in summary.values()] == [TRACKING]  # only the torch device is scaled


def test_devices_are_scaled_apart_and_a_device_with_few_readings_is_not_scaled():
    rows = [_row("cpu", "cpu-a", 100)] * 5 + [_row("cpu", "cpu-b", 50)] * 4 + [_row("cpu", "cpu-b", 40)]
    factors, summary = speed.speed_factors(rows)
    assert factors == [1.0] * 9 + [pytest.approx(0.8 ** TRACKING)]  # cpu-b's typical rate is its own
    assert {f["typical_gflops"] for f in summary.values()} == {100, 50}
    few = [_row("cpu", "cpu-c", 100)] * (MIN_READINGS - 1) + [_row("cpu", "cpu-c", 50)]
    assert speed.speed_factors(few[1:])[0] == [1.0] * (MIN_READINGS - 1)


def test_training_targets_follow_the_reference_and_the_stored_rows_do_not_change(measured):
    rows = [dict(r, contended=False) for r in rows_of(measured)]
    assert any(r.get("speed_reference") for r in rows), "measured CPU rows carry a speed reference"
    # Fixed peaks: a local probe beside a busy process is not cached (benchmark_runners.hardware),
    # and the scaling under test does not depend on them.
    specs = {row_device(r): DeviceSpec("cpu", "test CPU", 100.0, 20.0, "test") for r in rows}
    steady = [dict(r, speed_reference={"before_gflops": 100.0, "after_gflops": 100.0}) for r in rows]
    slow = dict(steady[0], speed_reference={"before_gflops": 80.0, "after_gflops": 80.0})
    base = training.training_data(steady, specs)
    assert len(base) == len(rows), base.skipped
    scaled = training.training_data([slow, *steady[1:]], specs)
    assert scaled.actual["latency"][0] == pytest.approx(base.actual["latency"][0] * 0.8 ** TRACKING)
    assert scaled.actual["throughput"][0] == pytest.approx(base.actual["throughput"][0] / 0.8 ** TRACKING)
    assert scaled.actual["memory"][0] == base.actual["memory"][0]
    assert slow["mean_ms"] == steady[0]["mean_ms"]  # the row itself is untouched
    assert list(scaled.speed.values())[0]["typical_gflops"] == 100.0
