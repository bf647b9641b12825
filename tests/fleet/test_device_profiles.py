"""Measuring under a constraint profile: a config says its profile, a worker runs under it (an ISA
cap in a fresh interpreter with the caps in its environment), the row names its device, and the
store and the predictors keep it apart from the same hardware unconstrained."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmark_runners.hardware import detect_hardware
from benchmark_runners.harness import TimingPolicy
from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
from benchmark_runners.sweep import run_sweep
from devicefit import store
from devicefit.predict.hardware_specs import measured_device_specs, row_device
from devicefit.profiles import Selection, partition_configs
from devicefit.results_io import results_document

DATASET = Path(__file__).resolve().parents[2] / "benchmarks" / "datasets" / "xeon-spr-2c-calibrated"
FAST = TimingPolicy(max_time_s=0.3, warmup_max_time_s=0.2, min_iterations=3)


def test_a_profile_is_part_of_the_config_and_of_its_key_only_when_set():
    plain = BenchmarkConfig(model="bert-tiny")
    # The key of a config without a cap is what it was before caps existed: the quick profile's
    # configs have the keys of the rows the Xeon stored before, so old and new rows still compare.
    recorded = json.loads((DATASET / "partition__cpu__bert-tiny.json").read_text())["results"]
    configs = partition_configs("bert-tiny", "cpu", Selection(), ["amx_bf16"])
    assert {c.key() for c in configs} == {r["config_key"] for r in recorded}
    capped, one = replace(plain, isa="avx2"), replace(plain, threads=1)
    assert len({plain.key(), capped.key(), one.key()}) == 3
    assert (plain.profile, capped.profile, one.profile, replace(one, isa="avx2").profile) == ("", "avx2", "t1", "t1-avx2")
    assert BenchmarkResult.for_config(capped, "r", "t", "skipped").device_profile == "avx2"
    assert BenchmarkResult.for_config(plain, "r", "t", "skipped").device_profile is None
    with pytest.raises(ValueError, match="unknown ISA cap 'sse9'"):
        BenchmarkConfig(model="bert-tiny", isa="sse9")
    with pytest.raises(ValueError, match="applies to torch on the CPU"):
        BenchmarkConfig(model="bert-tiny", device="openvino:CPU", backend="openvino", isa="avx2")


def test_a_cap_the_cpu_lacks_is_skipped_with_the_reason():
    inventory = detect_hardware(probe=False)
    cpu = inventory.platforms["cpu"].devices[0]
    saved = cpu["isa_flags"]
    cpu["isa_flags"] = [f for f in saved if not f.startswith("avx512")]
    try:
        [row] = run_sweep([BenchmarkConfig(model="bert-tiny", isa="avx512", policy=FAST)], inventory=inventory)
    finally:
        cpu["isa_flags"] = saved
    assert row.status == "skipped" and row.reason_code == "device_unavailable"
    assert "this CPU has no avx512" in row.error and row.device_profile == "avx512"


def test_a_capped_worker_runs_under_the_cap_and_its_row_says_so():
    """A real worker: started fresh with the caps in its environment (a forked one would keep
    the fork server's kernels), and ATen's own report of the capability it chose is in the row."""
    inventory = detect_hardware(probe=False)
    if "avx2" not in (inventory.platforms["cpu"].devices[0].get("isa_flags") or []):
        pytest.skip("this CPU has no AVX2 to cap at")
    [capped, plain] = run_sweep([BenchmarkConfig(model="bert-tiny", isa="avx2", policy=FAST),
                                 BenchmarkConfig(model="bert-tiny", policy=FAST)], inventory=inventory)
    assert capped.status == "ok", capped.error
    assert capped.device_profile == "avx2" and plain.device_profile is None
    assert capped.environment["onednn_max_cpu_isa"] == "AVX2" and capped.environment["mkl_enable_instructions"] == "AVX2"
    assert capped.environment["torch_cpu_capability"] == "AVX2"
    assert plain.environment["onednn_max_cpu_isa"] is None


def _row(config: BenchmarkConfig, p50: float, fingerprint: str = "cpu-abc") -> BenchmarkResult:
    from benchmark_runners.stats import summarize

    samples = [p50 * f for f in (0.99, 1.0, 1.0, 1.01, 1.0, 1.0)]
    stats = summarize(samples).to_json()
    stats.pop("count")
    return BenchmarkResult.for_config(config, "run-1", "2026-11-25T10:00:00+00:00", "ok", samples_ms=samples, **stats,
                                      iterations=6, throughput_samples_per_s=1e3 / p50, peak_rss_bytes=10**8,
                                      hardware_fingerprint=fingerprint, device_name="Xeon", ci_target=0.02, stop_reason="converged",
                                      input={"modality": "text", "dims": {"seq_length": 128}, "shapes": {}})


def test_profiled_rows_are_another_device_in_the_store_and_the_aggregates(tmp_path):
    hardware = {"hostname": "vm", "platforms": {"cpu": {"available": True, "devices": [{"name": "Xeon", "fingerprint": "cpu-abc"}]}}}
    plain = BenchmarkConfig(model="bert-tiny")
    rows = [_row(plain, 5.0), _row(replace(plain, threads=1), 9.0)]
    database = tmp_path / "devicefit.duckdb"
    store.init_db(database)
    with store.opened(database) as con:
        store.replace_source(con, "partition:cpu|bert-tiny", "partition", results_document("run-1", rows, hardware))
        stored = con.execute("SELECT device_profile, device_id, p50_ms FROM measurements ORDER BY p50_ms").fetchall()
        assert stored == [(None, "cpu-abc", 5.0), ("t1", "cpu-abc+t1", 9.0)]
        # The rows' devices are registered devices now, the profiled one with its profile.
        fleet = {d["id"]: d for d in store.devices(con)}
        assert set(fleet) == {"cpu-abc", "cpu-abc+t1"}
        assert fleet["cpu-abc+t1"]["profile"] == {"threads": 1, "isa": None} and fleet["cpu-abc+t1"]["hostname"] == "vm"
        assert fleet["cpu-abc"]["host_fingerprint"] == "cpu-abc" and fleet["cpu-abc"]["details"] == {"name": "Xeon"}
        frame = store.refresh_aggregates(con)
    by_host = {r["host"]: r for r in frame.to_dicts()}
    assert set(by_host) == {"cpu-abc", "cpu-abc+t1"}  # two devices, not one config measured twice
    assert by_host["cpu-abc+t1"]["p50_ms"] == 9.0 and by_host["cpu-abc+t1"]["device_id"] == "cpu-abc+t1"
    assert by_host["cpu-abc+t1"]["speedup_vs_cpu_fp32"] == 1.0  # against its own profile's fp32, not the other device


def test_migration_13_gives_rows_stored_before_their_device(tmp_path):
    database = tmp_path / "old.duckdb"
    import duckdb

    with duckdb.connect(str(database)) as con:
        for version in range(1, 13):
            for step in store.MIGRATIONS[version]:
                step(con) if callable(step) else con.execute(step)
            con.execute("INSERT INTO schema_version VALUES (?, now())", [version])
        con.execute("INSERT INTO measurements (source_key, run_id, config_key, status, model, backend, device, device_kind, "
                    "precision, mode, batch_size, hardware_fingerprint) VALUES "
                    "('s', 'r', 'k', 'ok', 'm', 'torch', 'cpu', 'cpu', 'fp32', 'inference', 1, 'cpu-abc')")
        assert store.migrate(con) == list(range(13, store.SCHEMA_VERSION + 1))
        assert con.execute("SELECT device_id, device_profile FROM measurements").fetchall() == [("cpu-abc", None)]
        # ...and its device is registered (migration 14), without reloading its source.
        assert con.execute("SELECT id, kind FROM devices").fetchall() == [("cpu-abc", "cpu")]


def test_the_predictors_give_a_profiled_device_its_own_key_and_its_own_probe():
    probe = {"matmul_gflops_best": 300.0, "memory_bandwidth_gbs_best": 25.0}
    one = {"matmul_gflops_best": 170.0, "memory_bandwidth_gbs_best": 14.0}
    base = {"device_kind": "cpu", "host_fingerprint": "cpu-abc", "hardware_fingerprint": "cpu-abc", "device_name": "Xeon"}
    plain, t1, avx2 = (dict(base, device_id="cpu-abc"), dict(base, device_id="cpu-abc+t1", device_profile="t1"),
                       dict(base, device_id="cpu-abc+avx2", device_profile="avx2"))
    assert (row_device(plain), row_device(t1)) == ("cpu@cpu-abc", "cpu@cpu-abc+t1")
    hardware = [("cpu-abc", "cpu", "Xeon", json.dumps(probe)), ("cpu-abc+t1", "cpu", "Xeon (t1)", json.dumps(one))]
    specs = measured_device_specs([plain, t1, avx2], hardware)
    assert specs["cpu@cpu-abc"].peak_gflops == 300.0 and specs["cpu@cpu-abc+t1"].peak_gflops == 170.0
    # Not registered (no probe under its cap): the unconstrained peaks would misdescribe it.
    assert "cpu@cpu-abc+avx2" not in specs


def test_a_probe_taken_in_a_slow_minute_is_put_at_the_speed_its_rows_ran_at():
    """Run 10 on the AMD EPYC VM: the probe read 105 GFLOP/s in a slow minute, the kernel around
    the run's configs a median of 184. The compute peaks (fp32 and half) follow the kernel's
    typical rate over its reading at the probe, OpenVINO's and the browser's specs (the host
    CPU's probe) too; bandwidth does not; a profiled device's probe follows its own rows; a
    probe within 1.25x of the typical speed, one without a reading, or a device with too few
    readings, is left as measured."""
    def reading(rate):
        return {"speed_reference": {"before_gflops": rate, "after_gflops": rate}}

    probe = {"matmul_gflops_best": 105.0, "memory_bandwidth_gbs_best": 20.0, "matmul_gflops_bf16_best": 40.0, **reading(100.0)}
    one = {"matmul_gflops_best": 80.0, "memory_bandwidth_gbs_best": 12.0, **reading(75.0)}
    base = {"host_fingerprint": "cpu-abc", "hardware_fingerprint": "cpu-abc", "device_id": "cpu-abc"}
    rows = ([dict(base, device_kind="cpu", **reading(r)) for r in (180.0, 184.0, 190.0)]
            + [dict(base, device_kind="openvino", device_name="CPU", **reading(r)) for r in (170.0, 200.0)]
            + [dict(base, device_kind="wasm"), dict(base, device_kind="cpu", device_id="cpu-abc+t1", device_profile="t1", **reading(99.0))]
            + [dict(base, device_kind="cpu", device_id="cpu-abc+t1", device_profile="t1", **reading(r)) for r in (99.0, 100.0, 110.0, 101.0)])
    hardware = [("cpu-abc", "cpu", "EPYC", json.dumps(probe)), ("cpu-abc+t1", "cpu", "EPYC (t1)", json.dumps(one))]
    specs = measured_device_specs(rows, hardware)
    factor = 184.0 / 100.0  # the median of the host's five readings (torch's and OpenVINO's) over the probe's
    for device in ("cpu@cpu-abc", "openvino@cpu-abc", "wasm@cpu-abc"):
        assert specs[device].peak_gflops == pytest.approx(105.0 * factor), device
        assert specs[device].bandwidth_gbs == 20.0 and "x1.84: the speed reference read 100 GFLOP/s at the probe, 184 typical" in specs[device].source
    assert specs["cpu@cpu-abc"].bf16_gflops == pytest.approx(40.0 * factor)
    assert specs["cpu@cpu-abc+t1"].peak_gflops == pytest.approx(80.0 * 100.0 / 75.0)
    # at most PROBE_MAX_FACTOR either way: a reading that far off says more about itself than the probe
    slow = {**probe, **reading(20.0)}
    assert measured_device_specs(rows, [("cpu-abc", "cpu", "EPYC", json.dumps(slow))])["cpu@cpu-abc"].peak_gflops == 210.0
    # the faster of the two readings is the probe's (one read a dip the best of its repetitions did not see):
    # within PROBE_DEAD_BAND of the typical speed, the probe stays as measured
    dip = {**probe, "speed_reference": {"before_gflops": 40.0, "after_gflops": 160.0}}
    assert measured_device_specs(rows, [("cpu-abc", "cpu", "EPYC", json.dumps(dip))])["cpu@cpu-abc"].peak_gflops == 105.0
    fast = {**probe, "speed_reference": {"before_gflops": 40.0, "after_gflops": 140.0}}  # 184 / 140: moved
    moved = measured_device_specs(rows, [("cpu-abc", "cpu", "EPYC", json.dumps(fast))])["cpu@cpu-abc"]
    assert moved.peak_gflops == pytest.approx(105.0 * 184 / 140) and "read 140 GFLOP/s at the probe" in moved.source
    busy = {**probe, "contended": True}  # beside another process the readings are the scheduler's slices: as measured
    assert measured_device_specs(rows, [("cpu-abc", "cpu", "EPYC", json.dumps(busy))])["cpu@cpu-abc"].peak_gflops == 105.0
    bare = {k: v for k, v in probe.items() if k != "speed_reference"}
    assert measured_device_specs(rows, [("cpu-abc", "cpu", "EPYC", json.dumps(bare))])["cpu@cpu-abc"].peak_gflops == 105.0
    assert measured_device_specs(rows[:4], hardware)["cpu@cpu-abc"].peak_gflops == 105.0  # four readings: no typical rate


def test_the_compute_peaks_are_the_probes_median_matmul_where_it_recorded_one():
    """The rows and the speed reference are medians of their calls; the probe's best is its
    fastest repetition (0.92-1.24x the rows' typical speed over the EPYC's runs 31-39 and the
    Xeon's run 40). The fp32 peak is the median, the half-precision rates (recorded as best only) are taken
    at the same share, the bandwidth stays the copy's best; a probe without a median, with one
    not below its best or damaged, or taken beside another process, keeps its best; a
    slow-minute factor applies on top."""
    def reading(rate):
        return {"speed_reference": {"before_gflops": rate, "after_gflops": rate}}

    probe = {"matmul_gflops_best": 200.0, "matmul_gflops_median": 180.0, "memory_bandwidth_gbs_best": 25.0,
             "memory_bandwidth_gbs_median": 20.0, "matmul_gflops_bf16_best": 1000.0, **reading(180.0)}
    base = {"host_fingerprint": "cpu-abc", "hardware_fingerprint": "cpu-abc", "device_id": "cpu-abc", "device_kind": "cpu"}
    rows = [dict(base, **reading(r)) for r in (178.0, 180.0, 184.0, 185.0, 190.0)]

    def spec(p):
        return measured_device_specs(rows, [("cpu-abc", "cpu", "Xeon", json.dumps(p))])["cpu@cpu-abc"]

    median = spec(probe)
    assert median.peak_gflops == pytest.approx(180.0) and median.bf16_gflops == pytest.approx(900.0)
    assert median.bandwidth_gbs == 25.0 and "the matmul's median" in median.source
    assert spec({k: v for k, v in probe.items() if k != "matmul_gflops_median"}).peak_gflops == 200.0
    assert spec({**probe, "matmul_gflops_median": 230.0}).peak_gflops == 200.0  # not below the best: a damaged figure
    for damaged in (float("nan"), 0.0, -5.0, float("inf"), True, "180"):
        assert spec({**probe, "matmul_gflops_median": damaged}).peak_gflops == 200.0, damaged
    same = spec({**probe, "matmul_gflops_median": 200.0})
    assert same.peak_gflops == 200.0 and same.source == "measured_probe"
    # beside another process the median lands in the scheduler's slices; the best does not
    assert spec({**probe, "contended": True}).peak_gflops == 200.0
    slow = spec({**probe, **reading(100.0)})  # a slow minute at the probe: 184 / 100 on top of the median
    assert slow.peak_gflops == pytest.approx(180.0 * 1.84) and slow.bf16_gflops == pytest.approx(900.0 * 1.84)


def test_a_probe_taken_in_the_bandwidth_state_the_run_did_not_mostly_see_is_put_at_its_workers_typical_copy_rate():
    """The Zen 4 EPYC VM's copy bandwidth sits at about 34 or 53 GB/s for tens of seconds at a
    time; its probe read 32 GB/s before one make run and 55 before the next. The bandwidth
    follows the copy kernel's typical rate in the device's workers over its reading at the
    probe, with the compute factor's dead band, clamp and contention rule; the compute peaks
    stay with the compute kernel."""
    def reading(rate, copy=None):
        return {"speed_reference": {"before_gflops": rate, "after_gflops": rate, **({"copy_gbs": copy} if copy else {})}}

    probe = {"matmul_gflops_best": 180.0, "memory_bandwidth_gbs_best": 33.0, **reading(180.0, 34.0)}
    base = {"host_fingerprint": "cpu-abc", "hardware_fingerprint": "cpu-abc", "device_id": "cpu-abc", "device_kind": "cpu"}
    rows = [dict(base, run_id=f"w{i}", **reading(180.0, c)) for i, c in enumerate((52.0, 53.0, 55.0, 35.0, 54.0, 51.0))]
    rows += [dict(base, run_id="w9", **reading(180.0))]

    def spec(p, rs=rows):
        return measured_device_specs(rs, [("cpu-abc", "cpu", "EPYC", json.dumps(p))])["cpu@cpu-abc"]

    moved = spec(probe)
    assert moved.bandwidth_gbs == pytest.approx(33.0 * 52.5 / 34.0)  # the median of six workers' readings over the probe's
    assert moved.peak_gflops == 180.0 and "bandwidth x1.54: the copy reference read 34.0 GB/s at the probe, 52.5 typical" in moved.source
    assert spec({**probe, **reading(180.0, 50.0)}).bandwidth_gbs == 33.0  # within the dead band: as measured
    assert spec({**probe, **reading(180.0, 10.0)}).bandwidth_gbs == pytest.approx(66.0)  # at most 2x
    assert spec({**probe, "contended": True}).bandwidth_gbs == 33.0
    assert spec({**probe, **reading(180.0)}).bandwidth_gbs == 33.0  # an older probe without a copy reading
    assert spec(probe, rows[:4]).bandwidth_gbs == 33.0  # four copy readings: no typical rate
    # one worker's reading, which each of its six configs carries, is one reading, not six: no typical rate
    one_worker = [dict(base, run_id="w0", **reading(180.0, 53.0)) for _ in range(6)]
    assert spec(probe, one_worker).bandwidth_gbs == 33.0
    broken = [dict(base, run_id=f"w{c}", **reading(180.0, c)) for c in (52.0, 53.0, 55.0, 54.0)] + [dict(base, speed_reference={
        "before_gflops": 180.0, "after_gflops": 180.0, "copy_gbs": bad}) for bad in (-1, float("nan"), True, "fast")]
    assert spec(probe, broken).bandwidth_gbs == 33.0  # a reading that is not a rate is not one of the five


def test_registered_profiled_devices_bring_their_probe_to_training(tmp_path):
    database = tmp_path / "devicefit.duckdb"
    store.init_db(database)
    with store.opened(database) as con:
        store.register_device(con, {"id": "cpu-abc+t1", "kind": "cpu", "name": "Xeon", "hostname": "vm", "host_fingerprint": "cpu-abc",
                                    "hardware_fingerprint": "cpu-abc", "profile": {"threads": 1, "isa": None}, "details": {},
                                    "probe": {"matmul_gflops_best": 170.0, "memory_bandwidth_gbs_best": 14.0}})
        store.register_device(con, {"id": "cpu-abc", "kind": "cpu", "name": "Xeon", "hostname": "vm", "host_fingerprint": "cpu-abc",
                                    "hardware_fingerprint": "cpu-abc", "profile": {}, "details": {}, "probe": None})
        rows = store.hardware_rows(con)
    assert [(fp, name) for fp, _kind, name, _probe in rows] == [("cpu-abc+t1", "Xeon (t1)")]


@pytest.mark.parametrize("slug", ["t0", "sse9", "t1-t2", "../../etc", "T1", "avx2-avx2"])
def test_a_landing_row_with_a_profile_that_is_not_one_is_refused_by_name(slug):
    from devicefit.landing_schema import LandingFileError, validated_rows
    from devicefit.results_io import FORMAT

    row = _row(BenchmarkConfig(model="bert-tiny", threads=1), 5.0).to_json()
    assert validated_rows({"format": FORMAT, "results": [row]}, "rows")
    with pytest.raises(LandingFileError, match="device_profile"):
        validated_rows({"format": FORMAT, "results": [{**row, "device_profile": slug}]}, "rows")


def test_the_held_out_device_bar_looks_at_cpu_devices_only():
    from devicefit.predict.validation_report import HELD_OUT_DEVICE_BAR, ErrorMetrics, TargetValidation, held_out_cpu_devices

    m = lambda mape: ErrorMetrics(n=10, mape=mape, median_ape=mape, within_10pct=0.5)  # noqa: E731
    v = TargetValidation(leave_one_model_out=m(0.1), per_family={}, per_hardware={}, interval_log_half_width=None,
                         interval_coverage=None, bar_mape=0.15, leave_one_hardware_out=m(0.2),
                         leave_one_hardware_out_per_device={"cpu@h+t1": m(0.12), "openvino@h": m(0.9), "cpu@h": m(0.3)})
    assert list(held_out_cpu_devices(v)) == ["cpu@h", "cpu@h+t1"]
    assert HELD_OUT_DEVICE_BAR == 0.20


def test_the_profiles_dataset_registers_its_devices_with_their_own_probes(tmp_path):
    """Loading another machine's profiled landing files (benchmarks/datasets/xeon-spr-2c-profiles)
    registers each profile as a device with the probe taken under it, and only that one."""
    from devicefit.landing import load_landing_files

    raw = tmp_path / "raw"
    raw.mkdir()
    for f in (DATASET.parent / "xeon-spr-2c-profiles").glob("*.json"):
        (raw / f.name).write_bytes(f.read_bytes())
    report = load_landing_files(tmp_path / "devicefit.duckdb", raw)
    assert report.rows_loaded == 224 and not report.quarantined
    with store.opened(tmp_path / "devicefit.duckdb", read_only=True) as con:
        fleet = {d["id"]: d for d in store.devices(con)}
        profiles = dict(con.execute("SELECT device_profile, count(*) FROM measurements GROUP BY 1").fetchall())
    assert profiles == {"t1": 132, "avx2": 92}
    assert fleet["cpu-e1d9c1f8fde0+t1"]["probe"]["matmul_gflops_best"] == 165.13
    assert fleet["cpu-e1d9c1f8fde0+avx2"]["profile"] == {"threads": None, "isa": "avx2"}
    assert set(fleet) == {"cpu-e1d9c1f8fde0+t1", "cpu-e1d9c1f8fde0+avx2"}  # devices with rows; none unconstrained here


def test_a_profiled_row_never_answers_for_the_kind(tmp_path):
    """The API's measured figure for "cpu" is the CPU as it is: a 1-thread row of the same config,
    even a more recent one, is another device's."""
    from devicefit.benchmark_snapshot import MeasuredLookup, build_snapshot

    hardware = {"hostname": "vm", "platforms": {"cpu": {"available": True, "devices": [{"name": "Xeon", "fingerprint": "cpu-abc"}]}}}
    plain = BenchmarkConfig(model="bert-tiny")
    database = tmp_path / "devicefit.duckdb"
    store.init_db(database)
    with store.opened(database) as con:
        store.replace_source(con, "s1", "partition", results_document("run-1", [_row(plain, 5.0)], hardware))
        later = _row(replace(plain, threads=1), 9.0)
        later.run_id, later.timestamp = "run-2", "2026-11-25T11:00:00+00:00"
        store.replace_source(con, "s2", "partition", results_document("run-2", [later], hardware))
        lookup = MeasuredLookup(build_snapshot(store.refresh_aggregates(con).to_dicts(), database))
    [row] = [r for r in lookup.rows if not r["device_profile"]]
    assert lookup.measured("bert-tiny", "cpu", "fp32", "inference", 1, row["input_dims"])["p50_ms"] == 5.0


@pytest.mark.parametrize("field,value", [("device_profile", ""), ("device_profile", "t01"), ("device_profile", "avx2-t1"),
                                         ("device_profile", "t\u0661"), ("hardware_fingerprint", "cpu-abc+t1")])
def test_one_profile_has_one_spelling_and_a_fingerprint_cannot_forge_one(field, value):
    from devicefit.landing_schema import LandingFileError, validated_rows
    from devicefit.results_io import FORMAT

    row = _row(BenchmarkConfig(model="bert-tiny", threads=1), 5.0).to_json()
    with pytest.raises(LandingFileError, match=field):
        validated_rows({"format": FORMAT, "results": [{**row, field: value}]}, "rows")


def test_bad_and_disturbed_probes_do_not_replace_good_ones(tmp_path):
    """A document whose probe lacks its figures is refused by name; one whose probe was disturbed
    does not replace the undisturbed probe the store holds (the hardware table and the devices)."""
    from devicefit.landing_schema import LandingFileError

    good = {"fingerprint": "cpu-abc", "matmul_gflops_best": 370.0, "memory_bandwidth_gbs_best": 27.0, "contended": False}
    base = {"hostname": "vm", "platforms": {"cpu": {"available": True, "devices": [{"name": "Xeon", "fingerprint": "cpu-abc"}]}}}
    database = tmp_path / "devicefit.duckdb"
    store.init_db(database)
    plain = BenchmarkConfig(model="bert-tiny")
    with store.opened(database) as con:
        store.replace_source(con, "s1", "partition", results_document("run-1", [_row(plain, 5.0)], {**base, "probes": {"cpu": good}}))
        with pytest.raises(LandingFileError, match="matmul_gflops_best"):
            store.replace_source(con, "s2", "partition", results_document(
                "run-2", [_row(plain, 5.0)], {**base, "probes": {"cpu": {**good, "matmul_gflops_best": "fast"}}}))
        later = _row(plain, 5.0)
        later.run_id = "run-3"
        store.replace_source(con, "s3", "partition", results_document(
            "run-3", [later], {**base, "probes": {"cpu": {**good, "matmul_gflops_best": 140.0, "contended": True}}}))
        [(probe,)] = con.execute("SELECT probe FROM hardware").fetchall()
        [device] = store.devices(con)
    assert json.loads(probe)["matmul_gflops_best"] == 370.0 and device["probe"]["matmul_gflops_best"] == 370.0


def test_an_older_probe_ingested_later_does_not_replace_a_newer_one(tmp_path):
    """Files ingested out of order (a dataset directory is read by name): the probe taken later,
    here the one that measured the bf16 matmul, stays, in the hardware table and the device's."""
    newer = {"fingerprint": "cpu-abc", "matmul_gflops_best": 370.0, "memory_bandwidth_gbs_best": 27.0,
             "matmul_gflops_bf16_best": 900.0}
    older = {"fingerprint": "cpu-abc", "matmul_gflops_best": 360.0, "memory_bandwidth_gbs_best": 26.0}
    base = {"hostname": "vm", "platforms": {"cpu": {"available": True, "devices": [{"name": "Xeon", "fingerprint": "cpu-abc"}]}}}
    database = tmp_path / "devicefit.duckdb"
    store.init_db(database)
    rows = [_row(BenchmarkConfig(model="bert-tiny"), 5.0) for _ in range(3)]
    for i, r in enumerate(rows):
        r.run_id = f"run-{i}"
    with store.opened(database) as con:
        store.replace_source(con, "s1", "partition", results_document(
            "run-0", [rows[0]], {**base, "detected_at": "2026-11-26T10:41:00+00:00", "probes": {"cpu": newer}}))
        store.replace_source(con, "s2", "partition", results_document(
            "run-1", [rows[1]], {**base, "detected_at": "2026-11-26T01:27:00+00:00", "probes": {"cpu": older}}))
        [(probe,)] = con.execute("SELECT probe FROM hardware").fetchall()
        [device] = store.devices(con)
        assert json.loads(probe)["matmul_gflops_bf16_best"] == 900.0 and device["probe"]["matmul_gflops_bf16_best"] == 900.0
        later = {**older, "matmul_gflops_best": 380.0}  # a probe taken after both replaces them
        store.replace_source(con, "s3", "partition", results_document(
            "run-2", [rows[2]], {**base, "detected_at": "2026-11-27T09:00:00+00:00", "probes": {"cpu": later}}))
        [(probe,)] = con.execute("SELECT probe FROM hardware").fetchall()
        [device] = store.devices(con)
    assert json.loads(probe)["matmul_gflops_best"] == 380.0 and device["probe"]["matmul_gflops_best"] == 380.0
    assert device["probe"]["detected_at"] == "2026-11-27T09:00:00+00:00"


def test_the_kept_probe_does_not_depend_on_the_order_documents_come_in():
    """Each pair, in both orders, keeps the same probe: an undisturbed one over a disturbed one
    whatever their times, then the later one (a naive time read as UTC), and a stamped one over
    one without a time."""
    from devicefit.store.devices import kept_probe

    early, late = "2026-11-26T01:00:00+00:00", "2026-11-26T10:00:00"  # the second naive: UTC
    good_early = {"matmul_gflops_best": 1.0, "detected_at": early}
    good_late = {"matmul_gflops_best": 2.0, "detected_at": late}
    busy_late = {"matmul_gflops_best": 3.0, "detected_at": late, "contended": True}
    unstamped = {"matmul_gflops_best": 4.0}
    for a, b, winner in [(good_early, good_late, good_late), (good_early, busy_late, good_early),
                         (unstamped, good_early, good_early), (good_late, None, good_late)]:
        assert kept_probe(a, b) is winner and kept_probe(b, a) is winner, (a, b)


def test_a_setting_on_another_backend_is_not_a_profile_and_an_infinite_cap_still_measures():
    from benchmark_runners.harness import noise_floor_start

    assert BenchmarkConfig(model="bert-tiny", device="openvino:CPU", backend="openvino", threads=1).profile == ""
    policy = TimingPolicy(max_time_s=float("inf"))
    assert noise_floor_start([2_000_000_000] * 10, policy) == policy.noise_floor_min_iterations


def test_the_run_summary_sets_each_config_beside_its_own_fp32(tmp_path):
    """On the Xeon's stored rows: a text model's 128- and 512-token configs are two rows of the
    summary, each beside its own fp32 p50 (it once showed the 512-token fp32 for both), and a
    profiled device's rows say their profile."""
    import io

    from rich.console import Console

    from devicefit.cli.common import best_precision_table
    from devicefit.landing import load_landing_files

    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("xeon-spr-2c-calibrated", "xeon-spr-2c-profiles"):
        for f in (DATASET.parent / name).glob("partition__cpu__all-MiniLM-L6-v2.json" if "calibrated" in name else "*t1__all-MiniLM*"):
            (raw / f.name).write_bytes(f.read_bytes())
    load_landing_files(tmp_path / "devicefit.duckdb", raw)
    with store.opened(tmp_path / "devicefit.duckdb") as con:
        every = store.refresh_aggregates(con).to_dicts()
    fp32 = {(r["host"], r["batch_size"], r["seq_length"]): r["p50_ms"] for r in every if r["precision"] == "fp32" and r["mode"] == "inference"}
    out = io.StringIO()
    Console(file=out, width=250).print(best_precision_table(every))
    lines = [ln for ln in out.getvalue().splitlines() if "all-MiniLM" in ln and " inference " in ln]
    for host, batch, seq in fp32:
        profile = host.split("+", 1)[1] if "+" in host else None
        hardware = f"cpu ({profile})" if profile else "cpu"
        [line] = [ln for ln in lines if ln.split("│")[2].strip() == hardware and ln.split("│")[4].strip() == str(batch)
                  and ln.split("│")[5].strip() == str(seq)]
        assert line.split("│")[8].strip() == f"{fp32[(host, batch, seq)]:.2f}"
    assert any("cpu (t1)" in ln for ln in lines) and any(" 512 " in ln for ln in lines)


def test_more_threads_than_the_host_has_are_refused_not_a_crashed_worker():
    """`benchmark --threads 100000` reached torch.set_num_threads in the worker, whose OpenMP
    thread creation failed: a `failed` row "worker process killed by SIGSEGV". More threads than
    logical cores is no constraint (`devices register` refuses it): the sweep skips such a config
    before any worker starts and the CLI refuses the option (found by a fault hunt, 2026-11-29)."""
    from typer.testing import CliRunner

    from devicefit.cli import app

    inventory = detect_hardware(probe=False)
    cores = inventory.platforms["cpu"].devices[0]["logical_cores"]
    [row] = run_sweep([BenchmarkConfig(model="bert-tiny", threads=100_000, policy=FAST)], inventory=inventory)
    assert row.status == "skipped" and row.reason_code == "device_unavailable"
    assert f"100000 threads on a host with {cores} logical cores" in row.error
    out = CliRunner().invoke(app, ["benchmark", "--model", "bert-tiny", "--threads", str(cores + 1)])
    assert out.exit_code == 2 and f"--threads: {cores + 1} threads on a host with {cores} logical cores" in out.output, out.output
