"""A plugin that adds one device kind and one backend, the way a third party would: this module
plus `DEVICEFIT_PLUGINS=tests.plugins.fake_backend`. Nothing else in devicefit is edited.

"fakeaccel" is not a real accelerator: its one device is this host's CPU, and the backend times
torch's eager forward pass there (a real measurement, labelled with the kind it was asked for),
so the test sees a row travel the whole path from sweep to result."""
from __future__ import annotations

import time
from typing import Any

from benchmark_runners import registry
from benchmark_runners.backends.base import Backend, PreparedModel, TimedStep
from benchmark_runners.hardware.platforms import PlatformInfo

KIND = "fakeaccel"


def detect_fakeaccel() -> PlatformInfo:
    return PlatformInfo(KIND, True, None, "fake", [{"index": 0, "name": "fake accelerator (this host's CPU)"}],
                        {"plugin": __name__})


class FakeBackend(Backend):
    name = "fake"
    kinds = {KIND: f"{KIND}:0"}
    device_pattern = rf"{KIND}:\d+"
    device_help = f"{KIND}:N"
    precisions = ("fp32",)
    modes = ("inference",)

    def device_reason(self, spec, config) -> str | None:
        return None

    def prepare(self, spec, config) -> PreparedModel:
        import torch

        from models.loading import build_model

        started = time.perf_counter()
        model = build_model(spec, torch.float32).eval()
        return PreparedModel(handle=model, device=config.device, precision="fp32", mode="inference",
                             recipe="fp32 on the host CPU (test plugin)", load_time_s=time.perf_counter() - started,
                             backend_config={"plugin": __name__})

    def make_step(self, prepared: PreparedModel, inputs: dict[str, Any]) -> TimedStep:
        import torch

        model = prepared.handle

        def step(clock) -> None:
            with torch.inference_mode():
                model(**inputs)

        return TimedStep(step)

    def output(self, prepared: PreparedModel, inputs: dict[str, Any]) -> Any:
        import torch

        with torch.inference_mode():
            return prepared.handle(**inputs)[0]

    input_device = "cpu"


registry.register_kind(registry.DeviceKind(KIND, f"{__name__}:detect_fakeaccel", "a test plugin's accelerator",
                                           device_format=KIND + ":{index}", host_memory=True, native_precisions=("fp32",)))
registry.register_backend(FakeBackend())
