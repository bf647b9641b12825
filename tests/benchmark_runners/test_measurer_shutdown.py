"""A worker's last call, ConfigMeasurer.shutdown: every backend it used stops what it keeps
between models (the browser), whatever another backend's hook does."""
from __future__ import annotations

import logging

from benchmark_runners import registry
from benchmark_runners.measure import ConfigMeasurer


def test_shutdown_reaches_every_backend_used_even_past_a_missing_or_failing_hook(monkeypatch, caplog):
    stopped = []

    class Keeps:  # a backend with the hook
        def shutdown(self):
            stopped.append("keeps")

    class Fails:
        def shutdown(self):
            raise RuntimeError("its browser would not close")

    class Plugin:  # registered by its shape (registry._CONTRACT): no shutdown at all
        pass

    backends = {"a-fails": Fails(), "b-plugin": Plugin(), "c-keeps": Keeps()}
    monkeypatch.setattr(registry, "backend", backends.__getitem__)
    measurer = ConfigMeasurer("test-shutdown", {}, {})
    measurer._backends_used.update(backends)
    with caplog.at_level(logging.WARNING, logger="devicefit.measure"):
        measurer.shutdown()
    assert stopped == ["keeps"] and not measurer._backends_used
    assert "shutting down the a-fails backend failed" in caplog.text and "its browser would not close" in caplog.text
    measurer.shutdown()  # twice: nothing left to stop
    assert stopped == ["keeps"]
