"""What the browser says it can do: one headless Chromium start per process (two where no GPU
adapter answers, the second on SwiftShader), read by the wasm, webgpu and webnn detectors."""
from __future__ import annotations

import functools
from typing import Any

from benchmark_runners.hardware.platforms import PlatformInfo

DETECT_TIMEOUT_S = 60.0


@functools.lru_cache(maxsize=1)
def browser_capabilities() -> dict[str, Any]:
    """{"available": bool, "reason", "browser", "executable", "flags", "page": the page's detect()}.
    WebGPU is asked first with the GPU adapters; where none answers, again on SwiftShader, with
    `webgpu.software_fallback` and the first answer's reason kept."""
    from benchmark_runners.browser.chromium import Browser, unavailable_reason

    reason = unavailable_reason()
    if reason:
        return {"available": False, "reason": reason}
    try:
        browser = Browser()
        try:
            page = browser.call("detect", timeout_s=DETECT_TIMEOUT_S)
            out = {"available": True, "reason": None, "browser": browser.version, "executable": browser.executable,
                   "flags": browser.flags, "page": page}
        finally:
            browser.close()
        if not page["webgpu"]["available"]:
            software = Browser(software_webgpu=True)
            try:
                fallback = software.call("detect", timeout_s=DETECT_TIMEOUT_S)["webgpu"]
            finally:
                software.close()
            fallback.update(software_fallback=True, hardware_reason=page["webgpu"]["reason"], flags=software.flags)
            page["webgpu"] = fallback
        return out
    except Exception as exc:  # noqa: BLE001 - a browser that will not start is a reason, not a crash
        return {"available": False, "reason": f"headless Chromium did not start or answer: {type(exc).__name__}: {str(exc).splitlines()[0]}"}


def is_software_adapter(webgpu: dict[str, Any]) -> bool:
    adapter = webgpu.get("adapter") or {}
    return bool(webgpu.get("software_fallback") or adapter.get("isFallbackAdapter")
                or adapter.get("architecture", "").lower() in ("swiftshader", "llvmpipe", "lavapipe", "warp"))


def _host_cpu() -> str:
    """The CPU the browser's wasm (and a software WebGPU adapter) runs on, by name: part of the
    device's name, so two hosts' wasm devices are two devices."""
    from benchmark_runners.hardware.platforms import detect_cpu

    devices = detect_cpu().devices
    return devices[0].get("name", "the host CPU") if devices else "the host CPU"


def _browser_devices(caps: dict[str, Any]) -> dict[str, Any]:
    page = caps["page"]
    return {"browser": caps["browser"], "onnxruntime_web": page.get("ortVersion"), "cross_origin_isolated": page.get("crossOriginIsolated"),
            "timer_resolution_ms": page.get("timerResolutionMs"), "hardware_concurrency": page.get("hardwareConcurrency")}


def detect_wasm() -> PlatformInfo:
    caps = browser_capabilities()
    if not caps["available"]:
        return PlatformInfo("wasm", False, caps["reason"])
    details = _browser_devices(caps)
    name = (f"WebAssembly SIMD in Chromium {caps['browser']} (onnxruntime-web {details['onnxruntime_web']}) on {_host_cpu()}, "
            f"{details['hardware_concurrency']} threads")
    return PlatformInfo("wasm", True, None, "browser", [{"index": 0, "name": name, **details}], {"executable": caps["executable"]})


def detect_webgpu() -> PlatformInfo:
    caps = browser_capabilities()
    if not caps["available"]:
        return PlatformInfo("webgpu", False, caps["reason"])
    webgpu = caps["page"]["webgpu"]
    if not webgpu["available"]:
        return PlatformInfo("webgpu", False, f"Chromium {caps['browser']}: {webgpu['reason']}", details={"executable": caps["executable"]})
    adapter = webgpu["adapter"]
    software = is_software_adapter(webgpu)
    label = " ".join(filter(None, [adapter.get("vendor"), adapter.get("architecture"), adapter.get("description")])) or "unnamed adapter"
    name = f"WebGPU {label} in Chromium {caps['browser']}" + (f" (software Vulkan on {_host_cpu()}, no GPU)" if software else "")
    device = {"index": 0, "name": name, "adapter": adapter, "software": software, "features": webgpu["features"], "limits": webgpu["limits"],
              **_browser_devices(caps)}
    details = {"executable": caps["executable"], "software_fallback": bool(webgpu.get("software_fallback")),
               **({"hardware_reason": webgpu["hardware_reason"]} if webgpu.get("hardware_reason") else {})}
    return PlatformInfo("webgpu", True, None, "browser", [device], details)


def detect_webnn() -> PlatformInfo:
    caps = browser_capabilities()
    if not caps["available"]:
        return PlatformInfo("webnn", False, caps["reason"])
    webnn = caps["page"]["webnn"]
    if not webnn["available"]:
        return PlatformInfo("webnn", False, f"Chromium {caps['browser']}: {_webnn_reason(webnn)}", details={"devices": webnn.get("devices", {})})
    devices = [{"index": i, "name": f"WebNN {t} in Chromium {caps['browser']}", "device_type": t, **_browser_devices(caps)}
               for i, (t, d) in enumerate(webnn["devices"].items()) if d["available"]]
    return PlatformInfo("webnn", True, None, "browser", devices, {"devices": webnn["devices"]})


def _webnn_reason(webnn: dict[str, Any]) -> str:
    """The browser's own words, once per distinct error: "navigator.ml.createContext() failed for
    cpu, gpu, npu: NotSupportedError: ... WebNN is not supported on this platform."."""
    devices = webnn.get("devices") or {}
    if not devices:
        return webnn["reason"]
    by_error: dict[str, list[str]] = {}
    for device_type, answer in devices.items():
        error = (answer.get("reason") or "").split(" failed: ", 1)[-1]
        by_error.setdefault(error, []).append(device_type)
    return "; ".join(f"navigator.ml.createContext() failed for {', '.join(types)}: {error}" for error, types in by_error.items())
