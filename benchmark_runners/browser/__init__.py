"""The browser platforms (wasm, WebGPU, WebNN) measured for real: onnxruntime-web in headless
Chromium, driven through Playwright. `chromium` launches the browser, `server` serves the page
and the model from 127.0.0.1, `export` makes the ONNX file from the torch module, `detection`
reports what the browser can do; the Backend is benchmark_runners/backends/browser_backend.py."""
