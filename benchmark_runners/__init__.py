"""Measurement: hardware detection, the timing harness, backends, input builders, memory
tracking and the isolated worker process. No Dagster import; depends only on `models`.

The package turns OpenVINO's and NNCF's usage telemetry off in the process that imports it
(benchmark_runners/vendor_telemetry.py): `import openvino` alone writes ~/intel/, and each
conversion forks the process to send an event."""
from benchmark_runners.vendor_telemetry import block_vendor_telemetry

block_vendor_telemetry()
