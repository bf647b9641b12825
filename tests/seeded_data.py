"""A fresh data directory that already holds this session's hardware detection (no tests).

A `devicefit run` on an empty data directory detects the hardware and probes it before anything
else: a headless Chromium start for the browser kinds, OpenVINO's and torch's imports, the
matmul and copy probe. That was about 11 of the 22 s of a one-config `devicefit run` on the
2-core AMD EPYC, paid again by every test that starts one in its own tmp_path. The detection is
the same machine's, this boot's, so a test whose subject is not detection starts from a copy of
the session's `hardware.json` (devicefit's own cache: the run reads it as it would a user's
earlier run's). Where the session's probe was disturbed, the cache it keeps lists the devices
without a probe (inventory._keep_platforms), and the run probes again; where detection itself
fails here, the directory is left empty and the run detects, as before."""
from __future__ import annotations

import shutil
from pathlib import Path

SESSION: dict[str, Path] = {}  # "data": the session's data directory (tests/conftest.py sets it); "detected": once tried


def seeded_data_dir(path: Path) -> Path:
    """Create `path` with a copy of the session's detected hardware (detected now if the session
    has not yet); returns `path`."""
    from benchmark_runners.hardware import detect_hardware

    path.mkdir(parents=True, exist_ok=True)
    session = SESSION.get("data")
    if session is None:
        return path
    cache = session / "hardware.json"
    if not SESSION.get("detected"):  # once: a probe that was not kept is not retaken for every test
        SESSION["detected"] = session
        try:
            detect_hardware(cache_path=cache)
        except Exception:  # noqa: BLE001 - a head start only: the run detects and reports it itself
            pass
    if cache.exists():
        shutil.copyfile(cache, path / "hardware.json")
    return path
