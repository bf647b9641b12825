"""No vendor telemetry in a devicefit process.

OpenVINO's converter (`ov.convert_model`, imported by `import openvino`) and NNCF report usage
to Google Analytics through the `openvino_telemetry` package unless a consent file in the user's
home says no. On Linux each event forks the calling process (`multiprocessing.Process`, to
time out a hanging `urlopen`) and waits up to 3 s for it: inside a worker that is a copy of a
process holding the model, using the CPU beside the next measurement. A bare `import openvino`
already writes ~/intel/openvino_ga_cid and ~/intel/stats. Nobody asked devicefit for any of it.

Both libraries fall back to their own no-op stubs when the package cannot be imported, so
importing `benchmark_runners` (every devicefit process that can import openvino: the CLI, the
Dagster steps, the API, the workers) marks it unimportable first. Nothing in the user's home is
written or changed. The export venv's python (backends/openvino_genai.py) gets the same line."""
from __future__ import annotations

import sys

# Prepended to scripts run by another python (the OpenVINO GenAI export venv).
BLOCK_LINE = "import sys; sys.modules['openvino_telemetry'] = None  # no vendor telemetry (devicefit)\n"


def block_vendor_telemetry() -> bool:
    """Make `import openvino_telemetry` fail in this process, so OpenVINO's converter and NNCF
    use their no-op telemetry stubs. False when it was imported already (openvino was imported
    first): then the stubs are not in place, and the caller may say so."""
    if "openvino_telemetry" in sys.modules and sys.modules["openvino_telemetry"] is not None:
        return False
    sys.modules["openvino_telemetry"] = None  # type: ignore[assignment] - the documented way to make an import fail
    return True
