"""Which stored rows the predictors learn from: a device's rows measured under another allocator
tuning than the most common among its rows are counted, not learned (devicefit/predict/training_rows.py)."""
from devicefit.predict import training
from devicefit.predict.hardware_specs import DeviceSpec, row_device
from devicefit.predict.training_rows import allocator_skip, allocator_tuning, usual_allocators
from tests.predict.test_predictors import rows_of

DEFAULTS = {"libc": "glibc 2.36", "preload": None, "settings": {}}
TUNED = {"libc": "glibc 2.36", "preload": None, "settings": {"MALLOC_MMAP_MAX_": "0"}}
POLARS = {"libc": "glibc 2.36", "preload": None, "settings": {"_RJEM_MALLOC_CONF": "dirty_decay_ms:500,muzzy_decay_ms:1000"}}


def _with_allocator(row: dict, allocator: dict | None) -> dict:
    environment = dict(row.get("environment") or {})
    if allocator is None:
        environment.pop("allocator", None)
    else:
        environment["allocator"] = allocator
    return dict(row, environment=environment)


def _row(host: str, allocator: dict | None, kind: str = "cpu", backend: str = "torch", mode: str = "inference") -> dict:
    return {"device_kind": kind, "device": kind, "backend": backend, "mode": mode, "host_fingerprint": host,
            "environment": {} if allocator is None else {"allocator": allocator}}


def test_a_devices_usual_allocator_is_the_most_common_tuning_among_its_forward_pass_rows():
    a, b = _row("cpu-a", None), _row("cpu-b", None)
    rows = [_row("cpu-a", TUNED)] * 3 + [_row("cpu-a", DEFAULTS)] * 2 + [_row("cpu-a", None)] * 5 \
        + [_row("cpu-a", DEFAULTS, mode="generation")] * 4 \
        + [_row("cpu-b", TUNED), _row("cpu-b", dict(DEFAULTS, libc="glibc 2.39"))] + [_row("cpu-c", None)]
    # rows that recorded none and generation rows do not vote; a tie goes to the defaults (which
    # sort after "MALLOC_..."); the C library's version is no tuning; a device with none has none
    assert usual_allocators(rows) == {row_device(a): "MALLOC_MMAP_MAX_=0", row_device(b): "defaults"}
    # polars' setting for its own jemalloc, recorded for a while, is no tuning either
    assert allocator_tuning(_row("cpu-a", POLARS)) == allocator_tuning(_row("cpu-a", DEFAULTS)) == "defaults"
    # a browser kind's and a GPU's tensors are not in the recorded process's allocator
    assert allocator_tuning(_row("cpu-a", TUNED, kind="wasm", backend="browser")) is None
    assert allocator_tuning(_row("cpu-a", TUNED, kind="cuda")) is None
    assert allocator_tuning(_row("cpu-a", TUNED, kind="openvino", backend="openvino")) == "MALLOC_MMAP_MAX_=0"


def test_rows_measured_under_another_allocator_are_counted_not_learned(measured):
    rows = [_with_allocator(dict(r, contended=False), DEFAULTS) for r in rows_of(measured)]
    specs = {row_device(r): DeviceSpec("cpu", "test CPU", 100.0, 20.0, "test") for r in rows}
    base = training.training_data(rows, specs)
    assert len(base) == len(rows) and not base.skipped, base.skipped
    tuned = [_with_allocator(rows[0], TUNED), _with_allocator(rows[1], None), *rows[2:]]
    data = training.training_data(tuned, specs)
    device = row_device(rows[0])
    assert data.allocator == {device: "defaults"}
    assert data.skipped == {allocator_skip("MALLOC_MMAP_MAX_=0", "defaults"): 1}
    # the tuned row is the one left out; the row that recorded no tuning is learned
    assert len(data) == len(rows) - 1 and list(data.actual["latency"]) == list(base.actual["latency"][1:])
    # a contended row whose only clean twin ran tuned is its config's only learnable row: learned
    twins = [tuned[0], dict(rows[0], contended=True), *rows[1:]]
    kept = training.training_data(twins, specs)
    assert kept.skipped == {allocator_skip("MALLOC_MMAP_MAX_=0", "defaults"): 1} and kept.contended_kept == 1
    assert len(kept) == len(rows) and kept.models == base.models  # (its speed scaling may differ: one more reading)
