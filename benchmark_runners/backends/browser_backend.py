"""The browser backend: onnxruntime-web in headless Chromium, behind the same contract as torch
and OpenVINO (`backends/base.py`). Kinds: `wasm` (the wasm execution provider: WebAssembly SIMD
with threads, on the CPU), `webgpu` (the WebGPU execution provider, on the adapter the browser
gives: a GPU, or SwiftShader's software Vulkan where there is none, labelled as such) and `webnn`
(the WebNN execution provider, where the browser can create a WebNN context).

The model is the torch backend's own module exported to ONNX (benchmark_runners/browser/export.py);
the page (browser/web/page.js), onnxruntime-web (pinned by package-lock.json) and the model are
served from 127.0.0.1. Each timed iteration is one `session.run` timed by performance.now()
inside the page, output read back included, so the round trip to Python is never in a sample;
the harness's policy decides from those samples when to stop, as for every backend.

On load, the page runs the batch-1 example inputs once and its output is compared with torch's
fp32 output for them (max |difference| over max |torch|); beyond the precision's tolerance the
row fails (output_mismatch). The browser version, flags, execution provider and its options, the
WebGPU adapter and the timer's resolution are in every row's backend_config.
"""
from __future__ import annotations

import base64
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmark_runners.backends.base import Backend, OutputMismatch, PreparedModel, TimedStep
from benchmark_runners.hardware.cpu_budget import restricted_threads
from benchmark_runners.paths import worker_scratch
from benchmark_runners.records import BenchmarkConfig
from models.catalog import ModelSpec

# Max |browser - torch| over max |torch| on the example inputs: fp32 differs by reassociation and
# fused kernels only; int8 (dynamic quantization of weights and activations) by ~1/127 per step;
# fp16 by its 11-bit significand (2^-11 per rounding), as the OpenVINO backend's fp16 tolerance.
TOLERANCE = {"fp32": 1e-3, "fp16": 2e-2, "int8": 1.5e-1}
LOAD_TIMEOUT_S = 300.0
# One session.run in the page. Software WebGPU is that slow: whisper-tiny at batch 4 on
# SwiftShader took 477 s for its first run and 515 s for the next on the 2-core AMD EPYC
# (benchmarks/datasets/epyc-2c/). A config's own --timeout (default 600 s) still governs first.
RUN_TIMEOUT_S = 900.0
# Beyond the page's own timeout (a promise that never settles fails there), the watchdog kills a
# browser whose page does not answer at all (a page stuck in a loop) this much later.
WATCHDOG_GRACE_S = 30.0
PROVIDERS = {"wasm": "wasm", "webgpu": "webgpu", "webnn": "webnn"}
NUMPY_TO_ORT = {"float32": "float32", "int64": "int64", "int32": "int32", "bool": "bool", "uint8": "uint8", "int8": "int8"}
ORT_TO_NUMPY = {"float32": "float32", "float16": "float16", "int64": "int64", "int32": "int32", "uint8": "uint8", "int8": "int8"}
_browsers: dict[bool, Any] = {}  # software_webgpu -> the open Browser of this worker process


def _browser(software_webgpu: bool):
    """This worker's browser (one per WebGPU adapter choice), started again after a failure."""
    from benchmark_runners.browser.chromium import Browser

    current = _browsers.get(software_webgpu)
    if current is None or not current.alive:
        if current is not None:
            current.close()
        _browsers[software_webgpu] = current = Browser(software_webgpu=software_webgpu)
    return current


class PageClock:
    """The IterationClock of a browser step: the sample is the page's performance.now()
    interval around session.run, handed over by the step; begin/end time nothing here."""

    def __init__(self) -> None:
        self.elapsed_ns = 0

    def begin(self) -> None:
        self.elapsed_ns = 0

    def mark(self, phase: str) -> None:
        pass

    def record(self, milliseconds: float) -> None:
        self.elapsed_ns = int(round(milliseconds * 1e6))

    def end(self) -> tuple[int, dict[str, int]]:
        return self.elapsed_ns, {}


class BrowserBackend(Backend):
    name = "browser"
    kinds = {"wasm": "wasm", "webgpu": "webgpu", "webnn": "webnn"}
    device_pattern = r"wasm|webgpu|webnn"
    device_help = "wasm, webgpu or webnn (onnxruntime-web in headless Chromium)"
    precisions = ("fp32", "fp16", "int8")
    modes = ("inference",)
    packages = ("playwright", "onnx", "onnxruntime")
    input_device = "cpu"

    def mode_reason(self, mode: str) -> str:
        return f"onnxruntime-web runs inference only: the browser backend does not run {mode}"

    def loaded_key(self, config: BenchmarkConfig) -> tuple:
        # One exported file serves every batch size (its batch axis is dynamic); other shapes are fixed in it.
        return (config.model, config.backend, config.device, config.precision, config.mode, config.seq_length, config.image_size,
                config.audio_seconds, config.threads)

    def device_reason(self, spec: ModelSpec, config: BenchmarkConfig) -> str | None:
        from benchmark_runners.browser.export import conversion_unavailable, too_large_for_one_file
        from benchmark_runners.hardware import detect_hardware

        platform = detect_hardware(probe=False).platforms.get(config.device)
        if platform is None or not platform.available:
            return f"{config.device} is not available here: {platform.reason if platform else 'not detected'}"
        if config.precision == "fp16":
            if config.device == "wasm":
                return "onnxruntime-web's wasm execution provider has no fp16 kernels"
            features = (platform.devices[0].get("features") or []) if platform.devices else []
            if config.device == "webgpu" and "shader-f16" not in features:
                adapter = (platform.devices[0].get("adapter") or {}).get("architecture") or "this"
                return f"the WebGPU adapter ({adapter}) lacks the shader-f16 feature fp16 kernels need"
        # WebNN's fp16 support is per operator and per context: a context that lacks it fails the
        # session's creation in the page, and the row with the browser's own error.
        from models.analysis import parameter_count

        return too_large_for_one_file(spec.name, 4 * parameter_count(spec)) or conversion_unavailable(config.precision)

    def prepare(self, spec: ModelSpec, config: BenchmarkConfig) -> PreparedModel:
        import numpy as np

        from benchmark_runners.browser.detection import is_software_adapter
        from benchmark_runners.browser.export import export
        from benchmark_runners.hardware import detect_hardware

        started = time.perf_counter()
        exported = export(spec, config)
        platform = detect_hardware(probe=False).platforms[config.device]
        device = platform.devices[0] if platform.devices else {}
        software = config.device == "webgpu" and is_software_adapter({"adapter": device.get("adapter"), "software_fallback":
                                                                      platform.details.get("software_fallback")})
        browser = _browser(software)
        url = browser.server.publish(exported.onnx)
        # 0: onnxruntime-web's default, from navigator.hardwareConcurrency, which counts the
        # host's CPUs, not a cgroup quota's: where the budget restricts, its threads (hardware/cpu_budget.py).
        options: dict[str, Any] = {"numThreads": config.threads or restricted_threads() or 0}
        if config.device == "webnn":
            options["deviceType"] = device.get("device_type", "cpu")
        loaded = browser.call("load", url, PROVIDERS[config.device], options, LOAD_TIMEOUT_S * 1e3, timeout_s=LOAD_TIMEOUT_S + WATCHDOG_GRACE_S)
        scratch = Path(tempfile.mkdtemp(prefix="devicefit-browser-", dir=worker_scratch()))  # a killed worker's goes with it
        state = {"browser": browser, "scratch": scratch, "urls": [url]}
        backend_config = {
            "browser": f"Chromium {browser.version}", "executable": browser.executable, "flags": browser.flags,
            "execution_provider": PROVIDERS[config.device], "provider_options": options, "onnxruntime_web": loaded.get("ortVersion"),
            "wasm_threads": loaded.get("numThreads"), "timer": "performance.now() in the page (cross-origin isolated)",
            "timer_resolution_ms": device.get("timer_resolution_ms"), "export": exported.recipe, "export_source": exported.source,
            "export_seconds": round(exported.seconds, 3), "adaptations": exported.adaptations, "page_load_ms": round(loaded["loadMs"], 3),
            **({"adapter": device.get("adapter"), "software_adapter": software} if config.device == "webgpu" else {}),
        }
        prepared = PreparedModel(handle=loaded, device=config.device, precision=config.precision, mode=config.mode, recipe=exported.recipe,
                                 load_time_s=0.0, backend_config=backend_config, state=state, weights_recipe=exported.weights_recipe,
                                 denormal_policy="the browser's: WebAssembly keeps IEEE denormals; WebGPU's shaders may flush them")
        try:
            self._set_inputs(prepared, exported.example)
            browser.call("runOnce", RUN_TIMEOUT_S * 1e3, timeout_s=RUN_TIMEOUT_S + WATCHDOG_GRACE_S)
            agreement = _agreement(self._page_output(prepared), np.load(exported.reference), config.precision, exported.torch_own_deviation)
        except Exception:
            self.release(prepared)
            raise
        backend_config["output_agreement"] = agreement
        if not agreement["within_tolerance"]:
            self.release(prepared)
            raise OutputMismatch(f"{config.device} output differs from torch fp32 by {agreement['relative_max_abs_diff']:.3g} of its scale "
                                 f"(tolerance {agreement['tolerance']:g}) on the batch-1 example inputs")
        # A page pays the session's creation (what a deployed page pays), not devicefit's export.
        prepared.load_time_s = loaded["loadMs"] / 1e3
        backend_config["prepare_seconds"] = round(time.perf_counter() - started, 3)
        return prepared

    @staticmethod
    def _set_inputs(prepared: PreparedModel, inputs: dict[str, Any]) -> None:
        """Hand the inputs to the page as binary files (a whisper batch is megabytes: not JSON)."""
        import numpy as np

        state = prepared.state
        described = []
        for name, value in inputs.items():
            array = np.ascontiguousarray(value.numpy() if hasattr(value, "numpy") else value)
            dtype = NUMPY_TO_ORT.get(str(array.dtype))
            if dtype is None:
                raise TypeError(f"input {name} has dtype {array.dtype}, which the page cannot pass to onnxruntime-web")
            path = state["scratch"] / f"{name}-{len(state['urls'])}.bin"
            path.write_bytes(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
            url = state["browser"].server.publish(path, ".bin")
            state["urls"].append(url)
            described.append({"name": name, "dtype": dtype, "dims": list(array.shape), "url": url})
        state["browser"].call("setInputs", described, timeout_s=RUN_TIMEOUT_S)

    @staticmethod
    def _page_output(prepared: PreparedModel):
        import numpy as np

        answer = prepared.state["browser"].call("output", timeout_s=RUN_TIMEOUT_S)
        dtype = np.dtype(ORT_TO_NUMPY.get(answer["type"], "float32")).newbyteorder("<")
        return np.frombuffer(base64.b64decode(answer["base64"]), dtype=dtype).reshape(answer["dims"])

    def make_step(self, prepared: PreparedModel, inputs: dict[str, Any]) -> TimedStep:
        self._set_inputs(prepared, inputs)
        browser, clock = prepared.state["browser"], PageClock()

        def step(_clock) -> None:
            clock.record(browser.call("runOnce", RUN_TIMEOUT_S * 1e3, timeout_s=RUN_TIMEOUT_S + WATCHDOG_GRACE_S))

        return TimedStep(step, last_output=lambda: self._page_output(prepared), clock=clock)

    def output(self, prepared: PreparedModel, inputs: dict[str, Any]) -> Any:
        return self._page_output(prepared)

    def helper_pids(self, prepared: PreparedModel) -> list[int]:
        return prepared.state["browser"].helper_pids()

    def measurement_context(self, prepared: PreparedModel):
        """Reset the kernel's peak-RSS mark (VmHWM) of every browser process before warm-up and
        timing, so that after them each process's mark is its peak over the measured work:
        a peak without a sampler taking a core from the page (benchmark_runners.memory)."""
        from benchmark_runners.memory import reset_process_hwm

        processes = prepared.state["browser"].processes()
        prepared.state["hwm_reset"] = bool(processes) and all(reset_process_hwm(proc.pid) for proc in processes)
        return super().measurement_context(prepared)

    def memory_after_timing(self, prepared: PreparedModel) -> tuple[int, str] | None:
        """The browser's memory over the timed work: the page's session, its tensors and, for
        WebGPU, the GPU process's buffers, in the browser's processes, not this one.

        Each process counts its unique memory (USS, no shared library pages counted twice) after
        timing, plus how far its resident set rose above where it ended (kernel VmHWM since the
        reset, less the RSS after timing): its peak unique memory where its shared pages did not
        change. Summed over processes it bounds the simultaneous peak from above (each process's
        peak is counted, whenever it came). Where the mark could not be reset, the USS after
        timing alone, named as such (not a peak)."""
        from benchmark_runners.memory import process_hwm_bytes

        peak_marks = prepared.state.get("hwm_reset", False)
        total = 0
        for process in prepared.state["browser"].processes():
            try:
                info = process.memory_full_info()
            except Exception:  # noqa: BLE001 - a process that ended meanwhile
                continue
            total += info.uss
            if peak_marks:
                hwm = process_hwm_bytes(process.pid)
                if hwm is None:
                    peak_marks = False
                else:
                    total += max(hwm - info.rss, 0)
        if not total:
            return None
        return total, ("browser_peak_uss_bound" if peak_marks else "browser_uss_after_timing")

    def shutdown(self) -> None:
        """Close this worker's browsers: Chromium's processes and their temporary files."""
        for browser in list(_browsers.values()):
            browser.close()
        _browsers.clear()

    @staticmethod
    def release(prepared: PreparedModel) -> None:
        """Free the page's session and the published input files."""
        state = prepared.state or {}
        browser = state.get("browser")
        if browser is not None and browser.alive:
            try:
                browser.call("release", timeout_s=30)
            except Exception:  # noqa: BLE001 - a dead page has nothing left to free
                pass
            for url in state.get("urls", []):
                browser.server.withdraw(url)
        if state.get("scratch"):
            shutil.rmtree(state["scratch"], ignore_errors=True)


def _agreement(output, reference, precision: str, torch_own: float | None = None) -> dict[str, Any]:
    """How far the page's output is from torch fp32's. The tolerance is the precision's, or for
    fp16 TORCH_REFERENCE_MARGIN times torch's own fp16 deviation where that is larger, as the
    OpenVINO backend judges its reduced precisions: a model whose fp16 moves torch's own output
    further than the fixed tolerance is not failed for the same move in the browser."""
    import numpy as np

    from benchmark_runners.output_check import agreement_tolerance

    output = np.asarray(output, dtype=np.float32)
    reference = np.asarray(reference, dtype=np.float32)
    if output.shape != reference.shape:
        raise OutputMismatch(f"the browser's output has shape {list(output.shape)}, torch's {list(reference.shape)}")
    scale = float(np.abs(reference).max()) or 1.0
    diff = float(np.abs(output - reference).max()) / scale
    tolerance, basis = agreement_tolerance(TOLERANCE[precision], precision, torch_own)
    return {"reference": "torch fp32 on the batch-1 example inputs", "relative_max_abs_diff": diff, "tolerance": tolerance,
            "tolerance_basis": basis, "within_tolerance": bool(diff <= tolerance)}
