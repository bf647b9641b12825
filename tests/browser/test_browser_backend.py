"""The browser backend for real: onnxruntime-web in headless Chromium (Debian's chromium, driven
through Playwright), tiny catalog models. Skipped, with the reason, where Chromium, Playwright
or the npm install of onnxruntime-web is missing (`make install-browser` installs them)."""
from __future__ import annotations

import socket
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from benchmark_runners.browser.chromium import unavailable_reason

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no browser here: {REASON}")



@pytest.fixture(scope="module")
def measurer(tmp_path_factory):
    """A worker's ConfigMeasurer, with its own data directory (detection and the ONNX cache)."""
    import os

    from benchmark_runners.hardware import detect_hardware
    from benchmark_runners.measure import ConfigMeasurer

    data = tmp_path_factory.mktemp("browser-data")
    previous = os.environ.get("DEVICEFIT_DATA_DIR")
    os.environ["DEVICEFIT_DATA_DIR"] = str(data)
    inventory = detect_hardware(refresh=True, probe=False)
    devices = {kind: {"name": (info.devices[0]["name"] if info.devices else kind), "fingerprint": None}
               for kind, info in inventory.platforms.items()}
    measurer = ConfigMeasurer("test-browser", {}, devices)
    yield measurer
    from benchmark_runners.backends import browser_backend

    browsers = list(browser_backend._browsers.values())
    try:
        measurer.shutdown()  # as a worker does before it exits: the browsers go, with their temporary files
        assert not browser_backend._browsers
        assert not any(browser.alive or browser.temp_dir.exists() for browser in browsers)
    finally:
        if previous is None:
            os.environ.pop("DEVICEFIT_DATA_DIR", None)
        else:
            os.environ["DEVICEFIT_DATA_DIR"] = previous


def config(model: str, device: str, batch: int = 1, precision: str = "fp32"):
    from benchmark_runners.harness import TimingPolicy
    from benchmark_runners.records import BenchmarkConfig

    return BenchmarkConfig(model=model, device=device, backend="browser", precision=precision, batch_size=batch,
                           # short, but waiting for the six samples a CI of the median needs however slow
                           # the machine: at 40x the cap, a VM running whisper-tiny at 5.2 s a call stopped at four
                           policy=TimingPolicy(max_time_s=0.5, warmup_max_time_s=0.5, cap_overrun=1000.0))


def assert_ok_browser_row(row, device: str) -> None:
    assert row.status == "ok", row.error
    assert row.backend == "browser" and row.device == device and row.iterations >= 1 and len(row.samples_ms) == row.iterations
    assert all(s > 0 for s in row.samples_ms) and row.p50_ms > 0 and row.ci_rel_half_width is not None
    config_ = row.backend_config
    assert config_["browser"].startswith("Chromium ") and config_["execution_provider"] == device
    assert config_["onnxruntime_web"] == "1.30.0" and "performance.now()" in config_["timer"]
    assert config_["output_agreement"]["within_tolerance"] and config_["output_agreement"]["relative_max_abs_diff"] <= 1e-3
    # a peak where the kernel lets the browser's peak marks be reset (Linux, same user or root)
    assert row.memory_method in ("browser_peak_uss_bound", "browser_uss_after_timing") and row.peak_rss_bytes > 0
    if Path("/proc/self/clear_refs").exists():
        assert row.memory_method == "browser_peak_uss_bound"
    assert row.output_check["problem"] is None
    assert row.minor_faults_per_iteration is None  # the model ran in the browser's processes, not the worker's


# Text and image from the catalog; audio and image-text as the tiny local models (a Whisper and a
# CLIP of 2 layers): the catalog's whisper-tiny and clip-vit-base-patch32 are 230 and 600 MB of
# fp32 ONNX, a minute of export and most of the suite's disk, and run in the slow test below.
@pytest.mark.parametrize("model", ["bert-tiny", "mobilenet-v2", "audio_features", "image_text"])
def test_every_modality_runs_through_wasm_agreeing_with_torch(measurer, tiny_models, model):
    row = measurer.run(config(str(tiny_models.get(model, model)), "wasm", batch=2 if model == "bert-tiny" else 1))  # one file, every batch
    assert_ok_browser_row(row, "wasm")
    assert row.backend_config["wasm_threads"] >= 1


@pytest.mark.slow
@pytest.mark.parametrize("model", ["whisper-tiny", "clip-vit-base-patch32"])
def test_the_catalogs_audio_and_image_text_models_run_through_wasm_at_full_size(measurer, model):
    row = measurer.run(config(model, "wasm"))
    assert_ok_browser_row(row, "wasm")


def test_a_restricted_cpu_budget_sets_the_wasm_threads(measurer, monkeypatch):
    """onnxruntime-web's default threads come from navigator.hardwareConcurrency, the host's CPUs:
    where the budget restricts (hardware/cpu_budget.py), the page is asked for its threads."""
    from benchmark_runners.backends import browser_backend

    monkeypatch.setattr(browser_backend, "restricted_threads", lambda: 1)
    measurer.close()  # a fresh load: the provider options are set when the session is made
    row = measurer.run(config("bert-tiny", "wasm", batch=3))
    assert_ok_browser_row(row, "wasm")
    assert row.backend_config["provider_options"]["numThreads"] == 1 and row.backend_config["wasm_threads"] == 1


def test_closing_the_measurer_gives_back_the_page_session_and_its_scratch_files(measurer):
    """A worker exits without the interpreter's teardown: what it loaded last is given back by
    close(), or each run leaves its input files in /tmp (it did, two directories a run)."""
    row = measurer.run(config("bert-tiny", "wasm"))
    assert row.status == "ok", row.error
    scratch = measurer._loaded.state["scratch"]
    assert scratch.is_dir() and any(scratch.iterdir())
    measurer.close()
    assert not scratch.exists() and measurer._loaded is None
    measurer.close()  # twice is harmless


def test_int8_is_a_quantized_onnx_model_that_still_agrees_with_torch(measurer):
    row = measurer.run(config("bert-tiny", "wasm", precision="int8"))
    assert row.status == "ok", row.error
    assert "quantize_dynamic" in row.precision_recipe and row.backend_config["output_agreement"]["within_tolerance"]


def test_fp16_on_wasm_is_skipped_with_the_reason(measurer):
    row = measurer.run(config("bert-tiny", "wasm", precision="fp16"))
    assert row.status == "skipped" and "no fp16 kernels" in row.error


def test_webgpu_measures_bert_tiny_and_records_its_adapter(measurer):
    from benchmark_runners.hardware import detect_hardware

    webgpu = detect_hardware(probe=False).platforms["webgpu"]
    if not webgpu.available:
        pytest.skip(f"WebGPU is not available in this browser: {webgpu.reason}")
    row = measurer.run(config("bert-tiny", "webgpu"))
    assert_ok_browser_row(row, "webgpu")
    adapter = row.backend_config["adapter"]
    assert adapter == webgpu.devices[0]["adapter"]
    if adapter["architecture"] == "swiftshader":  # no GPU here: software Vulkan, said so
        assert row.backend_config["software_adapter"] is True and "--use-webgpu-adapter=swiftshader" in row.backend_config["flags"]
        assert "software Vulkan" in webgpu.devices[0]["name"]


def test_webnn_detection_gives_the_browsers_own_reason_and_its_rows_are_skipped_with_it(measurer):
    from benchmark_runners.hardware import detect_hardware

    webnn = detect_hardware(probe=False).platforms["webnn"]
    if webnn.available:
        pytest.skip("this browser creates WebNN contexts: nothing to check about its refusal")
    assert webnn.reason.startswith("Chromium ") and "createContext" in webnn.reason
    row = measurer.run(config("bert-tiny", "webnn"))
    assert row.status == "skipped" and webnn.reason in row.error


@pytest.mark.parametrize("fault,expected", [
    ("() => { throw new Error('boom from the page'); }", "boom from the page"),
    ("() => { while (true) {} }", "did not answer within 5 s; the browser was killed"),
])
def test_a_page_that_throws_or_hangs_is_a_failed_row_and_the_next_config_runs(measurer, monkeypatch, fault, expected):
    from benchmark_runners.backends import browser_backend

    monkeypatch.setattr(browser_backend, "RUN_TIMEOUT_S", 3.0)
    monkeypatch.setattr(browser_backend, "WATCHDOG_GRACE_S", 2.0)
    original = browser_backend.BrowserBackend.make_step
    browsers = []

    def faulty_make_step(self, prepared, inputs):
        step = original(self, prepared, inputs)
        browser = prepared.state["browser"]
        # Chromium keeps its temporary files (its singleton socket's directory) in the browser's own
        browsers.append((browser, sorted(p.name for p in browser.temp_dir.iterdir())))
        browser.evaluate(f"() => {{ devicefit.runOnce = {fault}; }}")
        return step

    system_temp = Path(tempfile.gettempdir())
    before = set(system_temp.glob("org.chromium.Chromium.*"))
    monkeypatch.setattr(browser_backend.BrowserBackend, "make_step", faulty_make_step)
    failed = measurer.run(config("bert-tiny", "wasm", batch=3))
    assert failed.status == "failed" and expected in failed.error, failed.error
    # The failed browser was closed (killed, where it hung) and left no temporary files behind:
    # Chromium's went to its own directory, removed with it.
    (browser, files), *_ = browsers
    assert any(name.startswith("org.chromium.Chromium.") for name in files), files
    assert not browser.alive and not browser.temp_dir.exists()
    assert set(system_temp.glob("org.chromium.Chromium.*")) <= before
    monkeypatch.setattr(browser_backend.BrowserBackend, "make_step", original)
    assert_ok_browser_row(measurer.run(config("bert-tiny", "wasm", batch=1)), "wasm")


def test_in_a_sweeps_worker_the_browsers_temporary_files_are_in_the_workers_scratch_directory(monkeypatch, tmp_path):
    """The sweep removes a worker's scratch directory after reaping it, also when it had to kill
    the worker at a config's timeout (benchmark_runners.paths.WORKER_SCRATCH_ENV)."""
    import shutil

    from benchmark_runners.browser.chromium import SOCKET_PATH_MAX, Browser
    from benchmark_runners.paths import WORKER_SCRATCH_ENV

    short = Path(tempfile.mkdtemp(prefix="devicefit-worker-"))  # as the sweep makes it
    deep = tmp_path / ("devicefit-worker-" + "d" * SOCKET_PATH_MAX)  # too deep for Chromium's singleton socket
    deep.mkdir()
    try:
        for scratch, inside in ((short, True), (deep, False)):
            monkeypatch.setenv(WORKER_SCRATCH_ENV, str(scratch))
            browser = Browser()  # where the socket's path would be too long, in the system's temp dir
            try:
                assert (browser.temp_dir.parent == scratch) is inside and any(browser.temp_dir.iterdir())
            finally:
                browser.close()
            assert not browser.temp_dir.exists()
        assert not any(deep.iterdir())
    finally:
        shutil.rmtree(short, ignore_errors=True)


BROWSER_IN_A_WORKER = """
import json, os, sys, tempfile
from benchmark_runners.browser.chromium import Browser
browser = Browser()
print(json.dumps([os.environ.get("TMPDIR"), tempfile.gettempdir()]), flush=True)
sys.stdin.read()
"""


def test_a_worker_killed_with_its_browser_open_leaves_playwrights_profile_in_its_scratch_directory():
    """Killed at its config's timeout (SIGKILL to its group), a worker's driver cannot remove the
    browser's profile: it is in the worker's scratch directory, which the sweep removes."""
    import json
    import os
    import shutil
    import signal
    import subprocess
    import sys

    from benchmark_runners.paths import WORKER_SCRATCH_ENV

    system_temp = Path(tempfile.gettempdir())
    before = set(system_temp.glob("playwright*"))
    scratch = Path(tempfile.mkdtemp(prefix="devicefit-worker-"))  # as the sweep makes it
    worker = subprocess.Popen([sys.executable, "-c", BROWSER_IN_A_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, WORKER_SCRATCH_ENV: str(scratch)}, start_new_session=True, text=True)
    try:
        line = worker.stdout.readline()
        assert line, worker.stderr.read()[-2000:]
        # the worker's own temporary directory (the device locks' default is under it) did not move
        assert json.loads(line) == [os.environ.get("TMPDIR"), str(system_temp)]
        assert [p for p in scratch.iterdir() if p.name.startswith("playwright_chromiumdev_profile-")]
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    # Playwright starts Chromium in a process group of its own: it outlives the kill, and ends
    # itself once its pipe to the killed driver closes.
    chromium = [p for p in psutil.process_iter() if _has_argument(p, str(scratch))]
    _, alive = psutil.wait_procs(chromium, timeout=30)
    assert not alive, [p.cmdline()[:2] for p in alive]
    shutil.rmtree(scratch)  # as the sweep does after reaping the worker
    assert not scratch.exists() and set(system_temp.glob("playwright*")) <= before


def _has_argument(process, text: str) -> bool:
    try:
        return any(text in part for part in process.cmdline())
    except psutil.Error:
        return False


def test_the_static_server_binds_loopback_only_and_serves_only_the_page_onnxruntime_and_published_files(tmp_path):
    from benchmark_runners.browser.server import StaticServer

    published = tmp_path / "model.onnx"
    published.write_bytes(b"onnx bytes")
    secret = tmp_path / "secret.txt"
    secret.write_text("not served")
    server = StaticServer()
    try:
        host, port = server.address
        assert host == "127.0.0.1"
        url = server.publish(published)

        def get(path_or_url: str) -> tuple[int, bytes, dict]:
            target = path_or_url if path_or_url.startswith("http") else server.origin + path_or_url
            try:
                with urllib.request.urlopen(target, timeout=10) as response:
                    return response.status, response.read(), dict(response.headers)
            except urllib.error.HTTPError as exc:
                return exc.code, b"", {}

        status, body, headers = get("/page.html")
        assert status == 200 and b"ort.all.min.js" in body
        assert headers["Cross-Origin-Opener-Policy"] == "same-origin" and headers["Cross-Origin-Embedder-Policy"] == "require-corp"
        assert get("/ort/ort.all.min.js")[0] == 200 and get(url)[1] == b"onnx bytes"
        for path in ("/package.json", "/node_modules/onnxruntime-web/package.json", "/ort/../package.json", "/ort/%2e%2e/package.json",
                     "/../../../etc/passwd", f"/files/{secret.name}", str(secret), "/files/" + url.rsplit("/", 1)[1] + "x"):
            assert get(path)[0] == 404, path
        server.withdraw(url)
        assert get(url)[0] == 404
        outside = [a for a in {i[4][0] for i in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)} if not a.startswith("127.")]
        for address in outside:  # the machine's other addresses do not reach it
            with pytest.raises(OSError):
                socket.create_connection((address, port), timeout=2).close()
    finally:
        server.close()


def test_every_browser_kind_is_measured_by_the_browser_backend_and_shares_the_cpu_when_software():
    from benchmark_runners import registry
    from devicefit.fleet.partitions import device_tag

    assert {k: registry.backend_of_kind(k).name for k in ("wasm", "webgpu", "webnn")} == dict.fromkeys(("wasm", "webgpu", "webnn"), "browser")
    assert registry.physical_kind("wasm") == "cpu" and registry.physical_kind("webgpu") == "webgpu"
    assert device_tag("webgpu", "cpu-abc", software=True) == device_tag("cpu", "cpu-abc") != device_tag("webgpu", "cpu-abc")
    assert registry.backend("browser").declared_reason("fp32", "training").startswith("onnxruntime-web runs inference only")
