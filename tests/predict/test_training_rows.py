"""Which stored rows the predictors learn from: a device's rows measured under another allocator
setting than its others are counted, not learned (devicefit/predict/training_rows.py)."""
from devicefit.predict import training
from devicefit.predict.hardware_specs import DeviceSpec, row_device
from devicefit.predict.training_rows import allocator_skip, usual_allocators
from tests.predict.test_predictors import rows_of

DEFAULTS = {"libc": "glibc 2.36", "preload": None, "settings": {}}
TUNED = {"libc": "glibc 2.36", "preload": None, "settings": {"MALLOC_MMAP_MAX_": "0"}}


def _with_allocator(row: dict, allocator: dict | None) -> dict:
    environment = dict(row.get("environment") or {})
    if allocator is None:
        environment.pop("allocator", None)
    else:
        environment["allocator"] = allocator
    return dict(row, environment=environment)


def _row(device: str, allocator: dict | None) -> dict:
    return {"device_kind": "cpu", "device": "cpu", "host_fingerprint": device, "environment": {} if allocator is None else {"allocator": allocator}}


def test_a_devices_usual_allocator_is_what_most_of_its_rows_ran_with():
    rows = [_row("cpu-a", TUNED)] * 3 + [_row("cpu-a", DEFAULTS)] + [_row("cpu-a", None)] * 5 \
        + [_row("cpu-b", TUNED), _row("cpu-b", DEFAULTS)] + [_row("cpu-c", None)]
    usual = usual_allocators(rows)
    # rows that recorded no setting do not vote; a tie goes to the defaults; a device with none has none
    assert usual == {row_device(rows[0]): "glibc 2.36, MALLOC_MMAP_MAX_=0", row_device(rows[9]): "glibc 2.36 (defaults)"}


def test_rows_measured_under_another_allocator_are_counted_not_learned(measured):
    rows = [_with_allocator(dict(r, contended=False), DEFAULTS) for r in rows_of(measured)]
    specs = {row_device(r): DeviceSpec("cpu", "test CPU", 100.0, 20.0, "test") for r in rows}
    base = training.training_data(rows, specs)
    assert len(base) == len(rows) and not base.skipped, base.skipped
    tuned = [_with_allocator(rows[0], TUNED), _with_allocator(rows[1], None), *rows[2:]]
    data = training.training_data(tuned, specs)
    device = row_device(rows[0])
    assert data.allocator == {device: "glibc 2.36 (defaults)"}
    assert data.skipped == {allocator_skip("glibc 2.36, MALLOC_MMAP_MAX_=0", "glibc 2.36 (defaults)"): 1}
    # the tuned row is the one left out; the row that recorded no setting is learned
    assert len(data) == len(rows) - 1 and list(data.actual["latency"]) == list(base.actual["latency"][1:])
