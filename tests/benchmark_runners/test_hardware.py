import json
from datetime import datetime, timedelta, timezone

import pytest

from benchmark_runners import registry
from benchmark_runners.hardware import detect_hardware
from benchmark_runners.hardware.inventory import device_fingerprint
from benchmark_runners.hardware.platforms import detect_platforms
from benchmark_runners.hardware.probe import probe_device


def test_every_kind_reports_availability_and_a_reason_when_absent():
    platforms = detect_platforms()
    assert set(platforms) == set(registry.kind_names())
    for kind, info in platforms.items():
        assert isinstance(info.available, bool)
        if not info.available:
            assert info.reason, f"{kind} unavailable without a reason"
        else:
            assert info.devices, f"{kind} available without devices"


def test_cpu_details_are_real():
    import psutil

    cpu = detect_platforms()["cpu"].devices[0]
    assert cpu["logical_cores"] == psutil.cpu_count()
    assert cpu["physical_cores"] >= 1
    assert cpu["memory_total_bytes"] == psutil.virtual_memory().total
    assert isinstance(cpu["isa_flags"], list)


def test_the_browser_kinds_are_asked_of_the_browser_or_say_what_is_missing():
    """wasm, webgpu and webnn come from headless Chromium's own answers (benchmark_runners/browser):
    available with the browser's device, or unavailable with the browser's reason, or with what
    is not installed (Chromium, Playwright, onnxruntime-web) and how to install it."""
    platforms = detect_platforms()
    for kind in ("wasm", "webnn", "webgpu"):
        info = platforms[kind]
        if info.available:
            assert info.backend == "browser" and info.devices and "Chromium" in info.devices[0]["name"]
        else:
            assert info.reason.startswith("Chromium ") or any(w in info.reason for w in ("no Chromium", "playwright", "onnxruntime-web")), info.reason


def test_probe_measures_positive_figures(monkeypatch):
    from benchmark_runners import contention

    # a copy reading beside other processes is left out; this test is about the figures, on a busy machine too
    monkeypatch.setattr(contention, "is_contended", lambda share: False)
    result = probe_device("cpu", budget_s=0.2)
    assert result.matmul_gflops_best > 1
    assert result.memory_bandwidth_gbs_best > 0.5
    assert result.matmul_gflops_best >= result.matmul_gflops_median
    assert result.duration_s > 0  # how long it takes is `devicefit detect --refresh`'s to print ("took"), not a timed test's
    # the small work: a cache-resident copy and a tiny kernel, each timed over a run of calls
    assert result.cache_copy_bytes == 256 * 2**10 and result.cache_copy_gbs_best > 0.5
    assert 0 < result.tiny_kernel_us_median < 1000
    # half-precision matmuls measured where torch runs them (a CPU does, slowly or not), never assumed
    assert result.half_matmul_n in (256, 1024)  # the fp32 matmul's size where its calls fit the budget
    assert result.matmul_gflops_bf16_best is None or result.matmul_gflops_bf16_best > 0
    assert result.matmul_gflops_fp16_best is None or result.matmul_gflops_fp16_best > 0
    # the speed-reference kernel read around it, so training can put its peaks at the run's typical speed
    assert result.speed_reference["before_gflops"] > 0 and result.speed_reference["after_gflops"] > 0
    assert result.speed_reference["copy_gbs"] > 0  # the copy kernel training moves the bandwidth by
    # the host CPU's probe times each backend's own GEMM at the models' shapes (torch's at least)
    suite = result.backend_gemm
    assert suite["dtype"] == "fp32" and set(suite["gflops_median"]["torch"]) == set(suite["shapes"])
    assert all(rate > 0 for rates in suite["gflops_median"].values() for rate in rates.values())


def test_the_gemm_suite_times_each_backend_that_has_a_host_gemm_and_names_one_that_failed(monkeypatch):
    from benchmark_runners import registry
    from benchmark_runners.hardware.gemm_suite import host_gemm_suite, shape_key

    class Fixed:  # 2 ms a call at every shape
        def host_gemm_seconds(self, m, k, n, budget_s):
            return [0.003, 0.002, 0.002]

    class Broken:
        def host_gemm_seconds(self, m, k, n, budget_s):
            raise RuntimeError("no CPU plugin here")

    class Without:
        def host_gemm_seconds(self, m, k, n, budget_s):
            return None

    class Partway:  # a GEMM at the first shape only: recorded at every shape or not at all
        def host_gemm_seconds(self, m, k, n, budget_s):
            return [0.002] * 3 if m == 128 else None

    class Impossible:  # a clock that read nothing: 1e14 GFLOP/s is no measurement
        def host_gemm_seconds(self, m, k, n, budget_s):
            return [1e-12] * 3

    class Shaped:  # a plugin registered by shape, without the hook
        pass

    class Chatty:
        def host_gemm_seconds(self, m, k, n, budget_s):
            raise RuntimeError("first line\n" + "more " * 500)

    backends = {"fixed": Fixed(), "broken": Broken(), "without": Without(), "partway": Partway(), "impossible": Impossible(),
                "shaped": Shaped(), "chatty": Chatty()}
    monkeypatch.setattr(registry, "backends", lambda: backends)
    suite = host_gemm_suite(0.01, shapes=((128, 768, 768), (50, 768, 3072)))
    # the median call, in GFLOP/s: 2 * m * k * n flops in 2 ms
    fixed = {shape_key(128, 768, 768): round(2 * 128 * 768 * 768 / 0.002 / 1e9, 2),
             shape_key(50, 768, 3072): round(2 * 50 * 768 * 3072 / 0.002 / 1e9, 2)}
    assert suite["gflops_median"] == {"fixed": fixed}
    assert suite["median_over_shapes"] == {"fixed": round(sorted(fixed.values())[0] / 2 + sorted(fixed.values())[1] / 2, 2)}
    assert suite["errors"]["broken"] == "RuntimeError: no CPU plugin here"  # said, and the probe goes on
    assert "no measurement" in suite["errors"]["impossible"]
    assert suite["errors"]["chatty"] == "RuntimeError: first line"  # its first line, not pages of it
    assert set(suite["errors"]) == {"broken", "impossible", "chatty"}  # none for a backend without a host GEMM


def test_openvino_times_its_own_gemm_on_the_host_cpu():
    from benchmark_runners import registry

    pytest.importorskip("openvino", reason="the openvino package is not installed: its CPU plugin has no GEMM to time here")
    times = registry.backend("openvino").host_gemm_seconds(50, 768, 768, 0.01)
    assert len(times) >= 5 and all(t > 0 for t in times)  # timed calls after an untimed one, as many as the budget allows


def test_half_matmuls_are_measured_at_the_fp32_size_only_where_the_calls_fit_the_budget():
    from benchmark_runners.hardware.probe import HALF_CALLS_PER_BUDGET, half_matmul_size

    # a 256-size call of 1 ms projects to 64 ms at 1024: four of them fit half a second
    assert half_matmul_size(256, 1024, 0.001, 0.5) == 1024
    # a CPU without a bf16 kernel (a 256-size call of 20 ms: 1.3 s at 1024) stays at the small size
    assert half_matmul_size(256, 1024, 0.020, 0.5) == 256
    # the boundary: exactly HALF_CALLS_PER_BUDGET projected calls fit
    call = 0.5 / HALF_CALLS_PER_BUDGET / 64
    assert half_matmul_size(256, 1024, call, 0.5) == 1024
    assert half_matmul_size(256, 1024, call * 1.01, 0.5) == 256
    # nothing measured at the small size, or no larger size to go to
    assert half_matmul_size(256, 1024, None, 0.5) == 256
    assert half_matmul_size(8192, 8192, 0.001, 0.5) == 8192


def test_half_matmuls_share_one_size_and_keep_a_missing_kernel_missing(monkeypatch):
    from benchmark_runners.hardware import probe

    calls = []

    def fake(dtype, n, device, sync, budget_s):
        calls.append((str(dtype), n))
        if "float16" == str(dtype).split(".")[-1]:
            return None  # no fp16 kernel on this device
        return 400.0 if n == 1024 else 300.0

    monkeypatch.setattr(probe, "_half_matmul_gflops", fake)
    sizes = {"half_matmul_n": 1024, "half_matmul_small_n": 256}
    n, half = probe._half_matmuls(sizes, "cpu", lambda: None, 0.5)
    assert n == 1024 and half == {"bf16": 400.0, "fp16": None}
    assert ("torch.float16", 1024) not in calls  # a dtype with no kernel is not tried again at the large size

    # a kernel that ran at the small size and fails at the large one: both stay at the small size
    monkeypatch.setattr(probe, "_half_matmul_gflops", lambda dtype, n, *a: None if n == 1024 and "float16" == str(dtype).split(".")[-1]
                        else 400.0 if n == 1024 else 300.0)
    assert probe._half_matmuls(sizes, "cpu", lambda: None, 0.5) == (256, {"bf16": 300.0, "fp16": 300.0})

    # the slowest dtype decides: one too slow for the large size keeps both at the small one
    monkeypatch.setattr(probe, "_half_matmul_gflops", lambda dtype, n, *a: 400.0 if "bfloat16" in str(dtype) else 1.0)
    n, half = probe._half_matmuls(sizes, "cpu", lambda: None, 0.5)
    assert n == 256 and half == {"bf16": 400.0, "fp16": 1.0}


def test_fingerprint_is_stable_and_ignores_volatile_fields():
    dev = {"name": "X", "logical_cores": 2, "memory_total_bytes": 24 * 2**30, "memory_available_bytes": 1}
    moved = dict(dev, memory_available_bytes=999, memory_total_bytes=24 * 2**30 + 5 * 2**20)
    assert device_fingerprint("cpu", dev) == device_fingerprint("cpu", moved)
    assert device_fingerprint("cpu", dev) != device_fingerprint("cpu", dict(dev, name="Y"))


def test_a_device_on_the_host_cpu_is_named_with_its_host():
    """OpenVINO's CPU plugin is "CPU" on every machine, so its own fingerprint was one id on the
    AMD EPYC and on the Xeon (openvino-4ebbcabb1705 in both machines' landing files): what runs on
    the host's CPU (that plugin, wasm, WebGPU on a software adapter) is qualified by the CPU's
    fingerprint; a device of its own (OpenVINO's GPU, a CUDA card, WebGPU on a GPU) is not; and
    qualifying twice changes nothing. Detection here names its OpenVINO CPU device so."""
    from benchmark_runners.hardware.inventory import qualify_host_runtimes

    def machine(cpu: str) -> dict:
        return {"cpu": [{"name": "X", "fingerprint": cpu}],
                "openvino": [{"name": "CPU", "fingerprint": "openvino-4ebbcabb1705"}, {"name": "GPU.0", "fingerprint": "openvino-111111111111"}],
                "wasm": [{"name": "wasm", "fingerprint": "wasm-222222222222"}],
                "webgpu": [{"name": "swiftshader", "software": True, "fingerprint": "webgpu-333333333333"},
                           {"name": "a GPU", "software": False, "fingerprint": "webgpu-444444444444"}],
                "cuda": [{"name": "H100", "fingerprint": "cuda-555555555555"}]}

    epyc, xeon = machine("cpu-b203dd7cc145"), machine("cpu-e1d9c1f8fde0")
    assert qualify_host_runtimes(epyc) == {"openvino-4ebbcabb1705": "openvino-4ebbcabb1705-b203dd7cc145",
                                           "wasm-222222222222": "wasm-222222222222-b203dd7cc145",
                                           "webgpu-333333333333": "webgpu-333333333333-b203dd7cc145"}
    qualify_host_runtimes(xeon)
    assert epyc["openvino"][0]["fingerprint"] != xeon["openvino"][0]["fingerprint"] == "openvino-4ebbcabb1705-e1d9c1f8fde0"
    assert [d["fingerprint"] for d in (*epyc["openvino"][1:], epyc["webgpu"][1], *epyc["cuda"], *epyc["cpu"])] == [
        "openvino-111111111111", "webgpu-444444444444", "cuda-555555555555", "cpu-b203dd7cc145"]
    assert qualify_host_runtimes(epyc) == {}
    detected = detect_hardware(probe=False)
    cpu = detected.platforms["cpu"].devices[0]["fingerprint"]
    for dev in detected.platforms["openvino"].devices if detected.platforms["openvino"].available else []:
        assert dev["fingerprint"].endswith("-" + cpu.split("-", 1)[1]) == (dev["name"] == "CPU"), dev


def test_inventory_is_cached_until_refresh(tmp_path):
    path = tmp_path / "hardware.json"
    first = detect_hardware(refresh=True, cache_path=path)
    if any(p.get("contended") for p in first.probes.values()):
        assert not first.from_cache and json.loads(path.read_text())["probes"] == {}  # a probe taken beside other work is never cached
        pytest.skip("the probe ran beside other work (contended), so nothing was cached to read back")
    assert not first.from_cache and path.is_file()
    assert "cpu" in first.probes
    second = detect_hardware(cache_path=path)
    assert second.from_cache
    assert second.fingerprint("cpu") == first.fingerprint("cpu")
    assert second.probes == json.loads(path.read_text())["probes"]
    third = detect_hardware(refresh=True, cache_path=path)
    assert not third.from_cache
    assert third.fingerprint("cpu") == first.fingerprint("cpu")


def test_a_probe_older_than_its_maximum_age_is_taken_again(tmp_path, monkeypatch):
    """A cached probe lived until the next reboot, so a nightly sweep scored rows against the
    boot-time probe for as long as the host stayed up; one older than the maximum age is taken
    again by what measures, and kept as the new cache; predictions take the cache they were given."""
    from benchmark_runners.hardware import inventory as module

    probed = []

    class Probe:  # the probe's own figures are tested above; here only whether it runs
        def __init__(self, device):
            probed.append(device)

        def to_json(self):
            return {"device": "cpu", "matmul_gflops_best": 100.0 + len(probed), "contended": False}

    monkeypatch.setattr(module, "probe_device", Probe)
    monkeypatch.setattr(module.registry, "probed_kinds", lambda: ["cpu"])  # a GPU host probes its cards too
    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(tmp_path / "locks"))  # a measurement elsewhere on the host would skip the probe
    path = tmp_path / "hardware.json"
    detect_hardware(refresh=True, cache_path=path)
    assert probed == ["cpu"]

    def stamp(value):
        data = json.loads(path.read_text())
        data["detected_at"] = value
        path.write_text(json.dumps(data))

    measuring = dict(cache_path=path, max_probe_age_s=module.PROBE_MAX_AGE_S)  # as the measurements asset asks
    now = datetime.now(timezone.utc)
    stamp((now - timedelta(hours=11)).isoformat())
    assert detect_hardware(**measuring).from_cache and probed == ["cpu"]  # younger than 12 h: kept
    stamp((now - timedelta(hours=13)).isoformat())
    assert detect_hardware(cache_path=path, probe=False).from_cache  # a question of which devices exist: any age
    assert detect_hardware(cache_path=path).from_cache  # no maximum asked (predictions): any age
    assert detect_hardware(cache_path=path, max_probe_age_s=24 * 3600).from_cache and probed == ["cpu"]
    again = detect_hardware(**measuring)
    assert not again.from_cache and probed == ["cpu", "cpu"]
    assert json.loads(path.read_text())["probes"]["cpu"]["matmul_gflops_best"] == 102.0  # the new probe is the cache
    assert module.probe_age_s(detect_hardware(**measuring)) < 60
    for unreadable in ("", "yesterday", (now + timedelta(hours=1)).isoformat()):  # no stamp, garbled, from the future
        stamp(unreadable)
        assert not detect_hardware(**measuring).from_cache, unreadable
    assert len(probed) == 5


def test_corrupt_cache_is_re_detected(tmp_path):
    path = tmp_path / "hardware.json"
    path.write_text("{broken")
    inventory = detect_hardware(cache_path=path)
    assert not inventory.from_cache and inventory.platforms["cpu"].available
    cache = json.loads(path.read_text())  # replaced: by the platforms alone where the probe ran beside other work
    assert cache["platforms"]["cpu"]["available"] is True
    if any(p.get("contended") for p in inventory.probes.values()):
        assert cache["probes"] == {}  # a probe taken beside other work is never cached: taken again next time


def test_a_cache_nested_past_the_json_decoder_is_re_detected(tmp_path):
    """json.loads raises RecursionError, not ValueError, for such a file: every command that
    detects hardware (the API's start-up included) ended in that traceback."""
    path = tmp_path / "hardware.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    inventory = detect_hardware(cache_path=path, probe=False)
    assert not inventory.from_cache and inventory.platforms["cpu"].available


def test_fingerprint_of_an_absent_device_names_the_reason(tmp_path):
    inventory = detect_hardware(cache_path=tmp_path / "h.json")
    if inventory.platforms["mps"].available:
        pytest.skip("this machine has MPS")
    with pytest.raises(ValueError, match="no mps device here"):
        inventory.fingerprint("mps")


def test_a_device_another_process_measures_on_is_not_probed_beside_it(tmp_path, monkeypatch):
    """A second `devicefit benchmark` (or `devicefit detect`) whose cached probe was stale ran
    seconds of matmul and copies on the CPU while the first held its device lock and measured,
    disturbing its rows (the lock kept only the sweeps apart). A locked device's earlier probe is
    used for this run, or none; nothing is cached, so the next free run probes (found by a fault
    hunt, 2026-11-29)."""
    import subprocess
    import sys

    from benchmark_runners.hardware import inventory as module

    probed = []

    class Probe:
        def __init__(self, device):
            probed.append(device)

        def to_json(self):
            return {"device": "cpu", "matmul_gflops_best": 100.0 + len(probed), "contended": False}

    monkeypatch.setattr(module, "probe_device", Probe)
    monkeypatch.setattr(module.registry, "probed_kinds", lambda: ["cpu"])  # a GPU host probes its cards too
    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(tmp_path / "locks"))
    path = tmp_path / "hardware.json"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom benchmark_runners.device_lock import hold_devices\n"
                               "with hold_devices(['cpu']):\n    print('held', flush=True)\n    time.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        busy = detect_hardware(refresh=True, cache_path=path)
        assert probed == [] and "another process is measuring on cpu" in busy.probes["cpu"]["error"]
        assert json.loads(path.read_text())["probes"] == {}  # which devices exist is kept; no probe is
        holder.kill()
        holder.wait()
        detect_hardware(refresh=True, cache_path=path)  # free: probed and cached
        assert probed == ["cpu"] and json.loads(path.read_text())["probes"]["cpu"]["matmul_gflops_best"] == 101.0
        holder = subprocess.Popen(holder.args, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        again = detect_hardware(refresh=True, cache_path=path)  # locked again: the earlier probe, not a new one
        assert probed == ["cpu"] and again.probes["cpu"]["matmul_gflops_best"] == 101.0
        assert "not probed: another process is measuring on cpu" in again.probes["cpu"]["reused"]
    finally:
        holder.kill()
        holder.wait()


def test_a_cache_that_cannot_be_written_costs_the_next_run_a_detection_not_this_one(tmp_path, monkeypatch):
    """With a directory where data/hardware.json belongs (or a full disk, a read-only data
    directory) `devicefit detect` and `devicefit benchmark` failed after detecting and probing:
    "Is a directory: data/.hardware-x1y2.json", the temporary file left behind (found by a fault
    hunt, 2026-11-29)."""
    from benchmark_runners.hardware import inventory as module

    class Probe:
        def __init__(self, device):
            pass

        def to_json(self):
            return {"device": "cpu", "matmul_gflops_best": 100.0, "contended": False}

    monkeypatch.setattr(module, "probe_device", Probe)
    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(tmp_path / "locks"))
    path = tmp_path / "data" / "hardware.json"
    path.mkdir(parents=True)
    inventory = detect_hardware(refresh=True, cache_path=path)
    assert inventory.platforms["cpu"].available and inventory.probes["cpu"]["matmul_gflops_best"] == 100.0
    assert sorted(p.name for p in path.parent.iterdir()) == ["hardware.json"]


def test_a_disturbed_probe_keeps_which_devices_exist_but_no_probe(tmp_path, monkeypatch):
    """With no cache and a measuring process's probe taken beside other work, nothing was cached, so every later
    process that asked only which devices exist (a run's steps, the selection map's helper, the
    API) detected them again, each starting Chromium and importing OpenVINO (3.8 s of both cores
    on the 2-vCPU AVX2 EPYC), and every partition probed again on a fresh detection. Now the
    platforms are cached without the probe: they are read back, the probe is taken again on
    them, and a good probe then becomes the cache. A cache that already holds an earlier probe is
    left alone."""
    from benchmark_runners.hardware import inventory as module

    detections, probed = [], []
    real_detect = module.detect_platforms

    def counting_detect():
        detections.append(1)
        return real_detect()

    contended = [True]

    class Probe:
        def __init__(self, device):
            probed.append(device)

        def to_json(self):
            return {"device": "cpu", "matmul_gflops_best": 100.0 + len(probed), "contended": contended[0]}

    monkeypatch.setattr(module, "detect_platforms", counting_detect)
    monkeypatch.setattr(module, "probe_device", Probe)
    monkeypatch.setattr(module.registry, "probed_kinds", lambda: ["cpu"])  # a GPU host probes its cards too
    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(tmp_path / "locks"))
    path = tmp_path / "hardware.json"
    measuring = dict(cache_path=path, max_probe_age_s=module.PROBE_MAX_AGE_S)

    # A detection that never asked for a probe (a script, the API: an environment of its own) keeps nothing.
    assert not detect_hardware(probe=False, cache_path=path).from_cache and not path.exists()
    detections.clear()
    disturbed = detect_hardware(**measuring)
    assert disturbed.probes["cpu"]["contended"] and len(detections) == 1 and probed == ["cpu"]
    assert json.loads(path.read_text())["probes"] == {}
    asked = detect_hardware(probe=False, cache_path=path)  # which devices exist: from the cache, no detection
    assert asked.from_cache and asked.probes == {} and len(detections) == 1
    assert asked.fingerprint("cpu") == disturbed.fingerprint("cpu")

    again = detect_hardware(**measuring)  # still disturbed: probed again, on the cached platforms
    assert probed == ["cpu", "cpu"] and len(detections) == 1 and not again.from_cache
    assert json.loads(path.read_text())["probes"] == {}

    contended[0] = False
    good = detect_hardware(**measuring)  # a calm probe becomes the cache
    assert probed == ["cpu"] * 3 and len(detections) == 1 and good.probes["cpu"]["matmul_gflops_best"] == 103.0
    assert detect_hardware(**measuring).from_cache and probed == ["cpu"] * 3

    contended[0] = True
    detect_hardware(refresh=True, cache_path=path)  # a refresh re-detects; its disturbed probe leaves the earlier one cached
    assert len(detections) == 2 and probed == ["cpu"] * 4
    assert json.loads(path.read_text())["probes"]["cpu"]["matmul_gflops_best"] == 103.0


def test_detect_prints_the_gemm_suite_in_one_line_and_nothing_for_a_probe_without_it():
    from devicefit.cli.measure import gemm_suite_line

    assert gemm_suite_line(None) is None and gemm_suite_line({"median_over_shapes": {}}) is None
    line = gemm_suite_line({"shapes": ["128x768x768", "50x768x3072"], "median_over_shapes": {"torch": 128.24, "openvino": 171.2},
                            "errors": {"browser": "RuntimeError: no host GEMM"}})
    assert line == ("fp32 GEMMs at the models' shapes (median over 2 shapes): torch 128.2, openvino 171.2 GFLOP/s; "
                    "browser: RuntimeError: no host GEMM")


def test_openvino_times_its_gemm_with_the_threads_and_hints_an_fp32_row_gets(monkeypatch):
    openvino = pytest.importorskip("openvino", reason="the openvino package is not installed: its CPU plugin has no GEMM to time here")
    from benchmark_runners import registry
    from benchmark_runners.hardware import cpu_budget

    compiled = []
    real = openvino.Core

    class Recording:
        def compile_model(self, model, device, hints):
            compiled.append((device, dict(hints)))
            return real().compile_model(model, device, hints)

    monkeypatch.setattr(openvino, "Core", Recording)
    monkeypatch.setattr(cpu_budget, "restricted_threads", lambda: 1)  # a CPU budget of one thread
    registry.backend("openvino").host_gemm_seconds(50, 64, 64, 0.001)
    (device, hints), = compiled
    assert device == "CPU" and hints["INFERENCE_NUM_THREADS"] == 1
    assert hints["INFERENCE_PRECISION_HINT"] == "f32" and hints["PERFORMANCE_HINT"] == "LATENCY"
    assert hints["CPU_DENORMALS_OPTIMIZATION"] is False
