// The measuring side of devicefit's browser backend (benchmark_runners/browser). Python drives
// this page through Playwright: it loads a model into an onnxruntime-web session on one execution
// provider, fetches the inputs devicefit built (binary files from the same local server), and
// times each session.run with performance.now() inside the page, so no round trip to Python is
// ever inside a sample. The harness's warm-up and CI-stopping policy decides, in Python, how many
// runs to ask for; every sample is this page's own clock.
"use strict";

const devicefit = (() => {
  let session = null;
  let feeds = null;
  let lastOutput = null;

  const TYPED = {
    float32: Float32Array, int64: BigInt64Array, int32: Int32Array, uint8: Uint8Array, int8: Int8Array,
    float16: Uint16Array, bool: Uint8Array,
  };

  function withTimeout(promise, ms, what) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
    });
    return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
  }

  function timerResolutionMs() {
    // The smallest step performance.now() takes here (5 us when cross-origin isolated, 100 us otherwise).
    let smallest = Infinity;
    for (let i = 0; i < 20; i++) {
      const a = performance.now();
      let b = performance.now();
      while (b === a) b = performance.now();
      smallest = Math.min(smallest, b - a);
    }
    return smallest;
  }

  async function detectWebGPU() {
    if (!("gpu" in navigator)) return { available: false, reason: "navigator.gpu is absent: this browser exposes no WebGPU" };
    let adapter;
    try {
      adapter = await navigator.gpu.requestAdapter();
    } catch (e) {
      return { available: false, reason: `navigator.gpu.requestAdapter() failed: ${e}` };
    }
    if (!adapter) return { available: false, reason: "navigator.gpu.requestAdapter() returned no adapter" };
    const info = adapter.info || {};
    const limits = {};
    for (const key of ["maxBufferSize", "maxStorageBufferBindingSize", "maxComputeWorkgroupSizeX", "maxComputeInvocationsPerWorkgroup",
                       "maxComputeWorkgroupStorageSize"]) {
      if (adapter.limits && key in adapter.limits) limits[key] = adapter.limits[key];
    }
    return {
      available: true, reason: null,
      adapter: { vendor: info.vendor || "", architecture: info.architecture || "", device: info.device || "", description: info.description || "",
                 isFallbackAdapter: Boolean(info.isFallbackAdapter || adapter.isFallbackAdapter) },
      features: [...adapter.features].sort(), limits,
    };
  }

  async function detectWebNN() {
    if (!("ml" in navigator)) return { available: false, reason: "navigator.ml is absent: this browser exposes no WebNN", devices: {} };
    const devices = {};
    for (const deviceType of ["cpu", "gpu", "npu"]) {
      try {
        await navigator.ml.createContext({ deviceType });
        devices[deviceType] = { available: true, reason: null };
      } catch (e) {
        devices[deviceType] = { available: false, reason: `navigator.ml.createContext({deviceType: "${deviceType}"}) failed: ${e}` };
      }
    }
    const any = Object.values(devices).some((d) => d.available);
    const reasons = [...new Set(Object.values(devices).map((d) => d.reason).filter(Boolean))];
    return { available: any, reason: any ? null : reasons.join("; "), devices };
  }

  async function detect() {
    return {
      userAgent: navigator.userAgent, hardwareConcurrency: navigator.hardwareConcurrency, crossOriginIsolated: self.crossOriginIsolated,
      timerResolutionMs: timerResolutionMs(), ortVersion: ort.env.versions ? ort.env.versions.web : null,
      webgpu: await detectWebGPU(), webnn: await detectWebNN(),
    };
  }

  async function load(modelUrl, provider, options, timeoutMs) {
    session = null; feeds = null; lastOutput = null;
    if (options.numThreads) ort.env.wasm.numThreads = options.numThreads;
    ort.env.logLevel = "error";
    const start = performance.now();
    const ep = provider === "webnn" ? { name: "webnn", deviceType: options.deviceType || "cpu" } : provider;
    session = await withTimeout(ort.InferenceSession.create(modelUrl, { executionProviders: [ep], graphOptimizationLevel: "all" }),
                                timeoutMs, "creating the onnxruntime-web session");
    return { loadMs: performance.now() - start, inputNames: session.inputNames, outputNames: session.outputNames,
             numThreads: ort.env.wasm.numThreads, ortVersion: ort.env.versions ? ort.env.versions.web : null };
  }

  async function setInputs(inputs) {
    feeds = {};
    for (const input of inputs) {
      if (!session.inputNames.includes(input.name)) continue;  // an input the exported graph does not use
      const response = await fetch(input.url);
      if (!response.ok) throw new Error(`input ${input.name}: ${response.status} from ${input.url}`);
      const data = new TYPED[input.dtype](await response.arrayBuffer());
      feeds[input.name] = new ort.Tensor(input.dtype, data, input.dims);
    }
    const missing = session.inputNames.filter((n) => !(n in feeds));
    if (missing.length) throw new Error(`the model needs inputs devicefit did not build: ${missing.join(", ")}`);
    return Object.keys(feeds);
  }

  async function runOnce(timeoutMs) {
    // One timed run: the output is read back (as a deployed page would read it) inside the sample.
    const start = performance.now();
    const outputs = await withTimeout(session.run(feeds), timeoutMs, "session.run");
    const first = outputs[session.outputNames[0]];
    const data = first.location === "cpu" ? first.data : await first.getData();
    const elapsed = performance.now() - start;
    lastOutput = { dims: first.dims, type: first.type, data };
    return elapsed;
  }

  function output() {
    // The last run's first output as base64 of its bytes (little-endian, as typed arrays are here).
    if (!lastOutput) throw new Error("no run has produced an output yet");
    const bytes = new Uint8Array(lastOutput.data.buffer, lastOutput.data.byteOffset, lastOutput.data.byteLength);
    let binary = "";
    for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    return { dims: lastOutput.dims, type: lastOutput.type, base64: btoa(binary) };
  }

  async function release() {
    if (session) await session.release();
    session = null; feeds = null; lastOutput = null;
  }

  return { detect, load, setInputs, runOnce, output, release };
})();
window.devicefit = devicefit;
