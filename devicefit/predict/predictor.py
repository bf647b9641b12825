"""Serving predictions from a trained artifact, with a fallback chain that always says which
link answered (`source`):

1. `trained_predictor` - the LightGBM regressors, only for a hardware kind, family, precision,
   mode and backend the training data contained, and a model within PARAMS_EXTRAPOLATION of the
   parameter range trained on; a kind answers for its device in the artifact's `devices` (this
   machine's, when it measured the kind); a device no row measured (known by its probe) through
   a same-kind device's fit carried by the two probes' peaks, with leave-one-device-out's band;
2. `roofline_calibrated` - the device's roofline times the efficiency measured on that kind
   (same backend, precision and mode);
3. `static_rule` - the roofline at an assumed fraction of peak, for a kind with a spec but no
   measurement; its interval is deliberately wide;
4. no prediction, with the reason, when not even a spec exists (webnn, webgpu, qnn, ...).
Latency and throughput are reconciled in log space, so throughput = batch / latency exactly.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from devicefit.predict.features import ModelPoint, feature_row, memory_reference_bytes, to_matrix
from devicefit.predict.generation import is_asynchronous
from devicefit.predict.hardware_specs import DeviceSpec, host_of, machine_of
from devicefit.predict.host_half_rates import with_probed_half
from devicefit.predict.memory_model import device_memory_kind
from devicefit.predict.training import TARGETS, Baselines, reconcile
from devicefit.predict.validation_report import ValidationReport

STATIC_EFFICIENCY = 0.25  # fraction of roofline speed assumed when nothing was measured on a kind
STATIC_INTERVAL_FACTOR = 4.0  # x/÷ around a static-rule prediction
STATIC_PROCESS_BASELINE = 500 * 2**20  # bytes of a Python process with torch loaded, when none was measured
PARAMS_EXTRAPOLATION = 2.0  # how far beyond the trained parameter range the trained link still answers


@dataclass
class Prediction:
    latency_ms: float | None
    throughput: float | None
    memory_bytes: float | None
    latency_interval: tuple[float, float] | None
    throughput_interval: tuple[float, float] | None
    memory_interval: tuple[float, float] | None
    source: str
    detail: str
    interval_level: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Request:
    point: ModelPoint
    batch_size: int
    precision: str
    mode: str
    kind: str
    backend: str | None = None  # None: the backend that measures this kind (openvino for openvino, torch otherwise)
    # One device of the kind ("cpu@<host>+t1", a measured device's key): answered with that
    # device's own fits; None: the kind's device in the artifact (this machine's).
    device: str | None = None
    # The device's figures where the artifact has none for it (a registered device never
    # measured: its own probe), for the roofline links of the chain.
    spec: DeviceSpec | None = None
    # For such a device that computes on its host's CPU (OpenVINO's CPU plugin): that CPU's own
    # figures, whose probed bf16 matmul carries the host's bf16 speed-up (host_half_rates).
    host_spec: DeviceSpec | None = None

    def __post_init__(self):
        if self.backend is None:
            from benchmark_runners import registry

            measuring = registry.backend_of_kind(self.kind)
            object.__setattr__(self, "backend", measuring.name if measuring else "torch")


class PerformancePredictor:
    def __init__(self, artifact: dict[str, Any]):
        from devicefit.predict.booster_text import check_booster_text, load_booster

        self.artifact = artifact
        # A cold-start artifact (devicefit.predict.cold_start) has no boosters and no validation:
        # its domain is empty, so every request takes the fallback chain.
        self.boosters = {t: load_booster(artifact["boosters"][t]) for t in TARGETS if t in artifact["boosters"]}
        residual = (artifact.get("generation") or {}).get("tpot_residual")  # parsed when first asked: checked now
        if isinstance(residual, dict) and residual.get("booster"):
            check_booster_text(residual["booster"])
        self.categories = artifact["categories"]
        self.domain = artifact["domain"]
        self.specs = {k: DeviceSpec(**v) for k, v in artifact["specs"].items()}
        if artifact.get("validation") is None:
            self.level, self.half_width, self.device_half_width, self.machine_half_width = None, {t: None for t in TARGETS}, {}, {}
        else:
            validation = ValidationReport.of(artifact)
            self.level = validation.level
            self.half_width = {t: validation.targets[t].interval_log_half_width for t in TARGETS}
            # per kind, for a device answered through a same-kind device's transferred fit: its
            # error is leave-one-device-out's, and on a machine nothing was measured on leave-one-machine-out's
            self.device_half_width = _bands_per_kind(validation, "leave_one_hardware_out_band_per_kind")
            self.machine_half_width = _bands_per_kind(validation, "leave_one_machine_out_band_per_kind")
        self.baselines = Baselines.from_json(artifact["baseline"])
        self._carried: dict[tuple, Baselines] = {}  # baselines_for's, per unmeasured device (and its host CPU's figures)
        self.devices: dict[str, str] = artifact.get("devices") or {}

    def device_of(self, kind: str) -> str:
        """The device a request for `kind` is answered for (the kind itself when none was measured)."""
        return self.devices.get(kind, kind)

    def measured_devices(self) -> list[str]:
        """The device keys the artifact has fits for ("cpu@<host>", "cpu@<host>+t1", ...)."""
        return sorted(self.baselines.memory)

    def device_for(self, r: Request) -> str:
        """The device key a request is answered for: the one it names, else its kind's device in
        the artifact (a bare kind when the kind was never measured)."""
        return r.device or self.device_of(r.kind)

    def spec_of(self, r: Request) -> DeviceSpec | None:
        """The figures `r`'s device is scored against. A named device answers with its own
        figures only (the artifact's, else the probe the request brings): another device's
        would misdescribe it."""
        if r.device:
            return self.specs.get(r.device) or r.spec
        return self.specs.get(self.device_of(r.kind)) or self.specs.get(r.kind)

    def baselines_for(self, r: Request) -> Baselines:
        """The fits that answer `r`'s device: the artifact's, and for a device no row measured (a
        registered machine known by its probe) a same-kind device's fit carried to it by the two
        probes' peaks (Baselines.with_devices): the path the artifact's leave-one-device-out
        validation measured, where the calibrated roofline alone was never validated there."""
        device, spec = self.device_for(r), self.spec_of(r)
        if spec is None or device in self.artifact.get("calibrated_only", {}) or \
                (f"{device}|{r.backend}" in self.baselines.roofline and device in self.baselines.memory):
            return self.baselines  # a thinly measured device's own rows calibrate link 2 instead
        key = (device, spec, r.host_spec)
        if key not in self._carried:
            # every spec the artifact has, and the request's host CPU's: a host CPU's probe carries its bf16 speed-up (host_half_rates)
            host = {f"cpu@{host_of(device)}": r.host_spec} if r.host_spec and host_of(device) else {}
            self._carried[key] = self.baselines.with_devices({**host, **self.specs, device: spec}, {device})
        return self._carried[key]

    def prefill_factor(self, r: Request, prefill: ModelPoint) -> tuple[float, str] | None:
        """A generation request's prefill time over the forward pass `r` asks for, on `r`'s
        device: the two points timed by the device's fitted per-operator roofline where it has one
        (its per-kernel costs included, so a host-bound GPU keeps a factor near 1), else by the
        plain roofline on its spec; None where neither exists. With its basis, in words."""
        device, baselines = self.device_for(r), self.baselines_for(r)
        prefill_ms = baselines.latency_ms(prefill, r.batch_size, r.precision, "inference", device, r.backend)
        forward_ms = baselines.latency_ms(r.point, r.batch_size, r.precision, "inference", device, r.backend)
        if prefill_ms and forward_ms:
            return prefill_ms / forward_ms, f"the {baselines.roofline[f'{device}|{r.backend}'].basis(device, r.precision)}"
        spec = self.spec_of(r)
        if spec is None:
            return None
        rows = [feature_row(p, r.batch_size, r.precision, "inference", r.backend, spec) for p in (prefill, r.point)]
        return math.exp(rows[0]["log_roofline_ms"] - rows[1]["log_roofline_ms"]), f"the roofline on {spec.name}"

    def prefill_memory_factor(self, r: Request, prefill: ModelPoint) -> tuple[float, str] | None:
        """A generation request's prefill peak memory over the forward pass's `r` asks for, by
        the device's fitted memory model (`memory_model`: weights plus the traced live
        activations at each point). The prefill holds the last position's logits only, where a
        forward pass holds every position's (qwen2.5-0.5b: 152k x 4 bytes a position). None
        where the device has no memory fit. With its basis, in words."""
        device, baselines = self.device_for(r), self.baselines_for(r)
        prefill_bytes = baselines.memory_bytes(prefill, r.batch_size, r.precision, "inference", device)
        forward_bytes = baselines.memory_bytes(r.point, r.batch_size, r.precision, "inference", device)
        if prefill_bytes and forward_bytes:
            return prefill_bytes / forward_bytes, self._memory_basis(device)
        return None

    @classmethod
    def load(cls, path: Path) -> "PerformancePredictor":
        return cls(json.loads(Path(path).read_text()))

    def version(self) -> str:
        return self.artifact.get("version", self.artifact["trained_at"])

    def _outside_domain(self, r: Request) -> str | None:
        """Why the trained link may not answer `r` (None: it may). Beside the categories and the
        device's fits, the model's size: the boosters correct the roofline by residuals learnt on
        models of the trained size range, and their intervals were validated there; a model
        PARAMS_EXTRAPOLATION times beyond it (a 7B model against a 0.15B largest) is answered by
        the roofline links, which say so."""
        device, baselines = self.device_for(r), self.baselines_for(r)
        roofline = baselines.roofline.get(f"{device}|{r.backend}")
        memory = baselines.memory.get(device)
        if not (r.kind in self.domain["device_kind"] and r.point.family in self.domain["family"]
                and all(v in self.categories[c] for c, v in (("precision", r.precision), ("mode", r.mode), ("backend", r.backend)))
                and roofline is not None and roofline.covers(r.precision, r.mode)
                and memory is not None and memory.covers(r.precision, r.mode)):
            return f"nothing trained on {r.kind}/{r.point.family}/{r.backend}/{r.precision}/{r.mode}"
        low, high = self.domain.get("params") or (0, math.inf)
        if not low / PARAMS_EXTRAPOLATION <= r.point.params <= high * PARAMS_EXTRAPOLATION:
            return (f"{r.point.name} has {r.point.params / 1e9:.3g}B parameters, outside the {low / 1e9:.3g}-{high / 1e9:.3g}B "
                    f"trained on (x{PARAMS_EXTRAPOLATION:g} either side)")
        return None

    def predict(self, requests: list[Request]) -> list[Prediction]:
        # A run the backend never makes (int8 training, torch int8 on a GPU) is no prediction, even
        # where the trained link's categories each cover it: it predicted 31.8 ms for int8 training.
        out: list[Prediction | None] = [_refused(r, self.level) for r in requests]
        outside = [self._outside_domain(r) if self.boosters and self.spec_of(r) is not None else "no trained predictor"
                   for r in requests]
        trained = [i for i, why in enumerate(outside) if why is None and out[i] is None]
        if trained:
            self._predict_trained([requests[i] for i in trained], trained, out)
        for i, r in enumerate(requests):
            if out[i] is None:
                out[i] = self._fallback(r, outside[i])
        return out  # type: ignore[return-value]

    def _predict_trained(self, requests: list[Request], index: list[int], out: list) -> None:
        feats = [feature_row(r.point, r.batch_size, r.precision, r.mode, r.backend, self.spec_of(r)) for r in requests]
        X = to_matrix(feats, self.categories)
        raw = {t: self.boosters[t].predict(X) for t in TARGETS}
        for j, r in enumerate(requests):
            device, baselines = self.device_for(r), self.baselines_for(r)
            base = baselines.latency_ms(r.point, r.batch_size, r.precision, r.mode, device, r.backend)
            lat = base * math.exp(raw["latency"][j])
            tp = r.batch_size * 1e3 / base * math.exp(raw["throughput"][j])
            lat, tp = (float(x) for x in reconcile(lat, tp, r.batch_size))
            mem = baselines.memory_bytes(r.point, r.batch_size, r.precision, r.mode, device) * math.exp(raw["memory"][j])
            fit = baselines.roofline[f"{device}|{r.backend}"]
            q, level, band = self._band(r, fit.transferred_from is not None)
            mem, mem_interval, floored = _at_least_resident(mem, _interval(mem, q["memory"]), r)
            out[index[j]] = Prediction(lat, tp, mem, _interval(lat, q["latency"]), _interval(tp, q["throughput"]),
                                       mem_interval, "trained_predictor",
                                       f"{fit.basis(device, r.precision)} x LightGBM residual, trained on {self.artifact['rows']} "
                                       f"measurements of {len(self.artifact['models'])} models" + band + floored,
                                       level)

    def _memory_basis(self, device: str) -> str:
        if device in self.baselines.memory:
            return f"the memory model fitted on {device}"
        return (f"the memory model of the best-measured device of {device}'s kind, its process term moved by what the two "
                "machines hold before a model loads where another kind measured on both says (a process's memory does not "
                "follow the CPU's speed)")

    def _band(self, r: Request, transferred: bool) -> tuple[dict[str, float | None], float | None, str]:
        """The half-widths, level and wording of a trained answer's intervals. A device no row
        measured gets leave-one-device-out's (held-out models on measured devices understate its
        error 2-4x), the band of its own kind. Where no device of the kind was held out to validate one, it gets the
        wider of the held-out-model band and the spread of the kind's measured efficiencies (the
        band the calibrated roofline gave such a device before), with no level: not validated.
        A device on a machine none of whose devices was measured gets leave-one-machine-out's band
        where the artifact has one: leave-one-device-out kept the held-out device's siblings."""
        if not transferred:
            return self.half_width, self.level, ""
        device = self.device_for(r)
        band = self.machine_half_width.get(r.kind)
        if band and band["latency"] is not None and not any(machine_of(d) == machine_of(device) for d in self.baselines.memory):
            return band, self.level, (f"; intervals from leave-one-machine-out on {r.kind} (each measured machine's {r.kind} device "
                                      "predicted from the other machines' rows alone)")
        band = self.device_half_width.get(r.kind)
        if band and band["latency"] is not None:
            return band, self.level, f"; intervals from leave-one-device-out on {r.kind} (each measured {r.kind} device predicted from the others)"
        cal = self.artifact["efficiency"].get("|".join((r.kind, r.backend, r.precision, r.mode))) or {}
        spreads = {"latency": cal.get("latency_spread"), "throughput": cal.get("latency_spread"), "memory": cal.get("memory_spread")}
        widths = {t: max((w for w in (self.half_width[t], spreads[t]) if w is not None), default=None) for t in TARGETS}
        return widths, None, "; intervals not validated for a device no row measured (no other device of its kind was held out)"

    def _with_fitted_baselines(self, answer: Prediction, r: Request) -> Prediction:
        """An out-of-domain answer with the device's own fitted physical terms put in where they
        extrapolate better than one efficiency ratio: peak memory from the device's memory model
        (weights + traced activations; held out above the trained sizes: 15% against 26% on the
        H200, 2% against 5% on the AMD EPYC), and on an asynchronous kind the time from the
        per-operator roofline, its per-kernel cost included. There small models run at the host's
        dispatch pace, so their measured/roofline ratio is launch overhead, not efficiency: carried
        to 2.5-7.6B models on an H200 it said 185-2,100 ms for prefills measured at 13-36 ms, where
        the fitted operators say 17-59 ms (benchmarks/generation_extrapolation.py). On a CPU the
        ratio held better (TTFT 17% against 25% on the EPYC, 4 rows) and stays, except in a half
        precision none of the device's rows were in: there the ratio is other CPUs' efficiency in
        it (an AMX Xeon's bf16 for a Zen 4 EPYC: 29% off, all too fast) or an assumed one, and the
        device's own fit with its probe's speed-up answers (host_half_rates.with_probed_half: 11.6%). Memory keeps the
        replaced answer's band; the fitted time gets a x/÷STATIC_INTERVAL_FACTOR band and no
        interval level (not validated)."""
        device, baselines = self.device_for(r), self.baselines_for(r)
        memory = baselines.memory_bytes(r.point, r.batch_size, r.precision, r.mode, device)
        fit = baselines.roofline.get(f"{device}|{r.backend}")
        latency, why = None, ""
        if is_asynchronous(r.kind):
            latency = baselines.latency_ms(r.point, r.batch_size, r.precision, r.mode, device, r.backend)
            why = "not one efficiency ratio: small models there run at the host's dispatch pace"
        elif fit is not None and (probed := with_probed_half(fit, device, r.precision, r.mode)) is not None:
            # the ratio is other devices' efficiency in this precision, or an assumed one (host_half_rates.with_probed_half)
            fit, latency = probed, probed.time_ms(r.point, r.batch_size, r.precision, r.mode)
            why = (f"not the efficiency measured on other devices' rows in {r.precision}" if answer.source == "roofline_calibrated"
                   else "not an assumed share of peak")
        if not memory and not latency:
            return answer
        spread = math.log(STATIC_INTERVAL_FACTOR)
        used = []
        if memory:
            # the replaced answer's own band, moved to the new centre (a x/÷4 band where it had none)
            old = answer.memory_interval
            width = math.log(old[1] / answer.memory_bytes) if old and answer.memory_bytes else spread
            mem, mem_interval, floored = _at_least_resident(memory, _interval(memory, width), r)
            answer = replace(answer, memory_bytes=mem, memory_interval=mem_interval)
            used.append(f"memory by {self._memory_basis(device)} (weights + traced activations){floored}")
        if latency:
            answer = replace(answer, latency_ms=latency, throughput=r.batch_size * 1e3 / latency,
                             latency_interval=_interval(latency, spread),
                             throughput_interval=_interval(r.batch_size * 1e3 / latency, spread), interval_level=None)
            used.append(f"time by the {fit.basis(device, r.precision)} (operator rates and a per-kernel cost, a "
                        f"x/÷{STATIC_INTERVAL_FACTOR:g} band, not a validated interval), {why}")
        return replace(answer, source="roofline_calibrated", detail=f"{answer.detail}; instead, " + "; ".join(used))

    def _fallback(self, r: Request, outside: str | None = None) -> Prediction:
        if r.mode == "generation":  # a request of prompt + new tokens is not a forward pass: no roofline of one stands in
            return Prediction(None, None, None, None, None, None, "unavailable",
                              f"{r.kind}/{r.precision}/generation: this chain predicts forward passes; the generation scenario "
                              "is answered per device by predict --mode generation (TTFT, TPOT, KV cache)", self.level)
        refused = _refused(r, self.level)
        if refused:  # OpenVINO does not train: no roofline stands in for a run that cannot happen
            return refused
        spec = self.spec_of(r)
        if spec is None:
            probe = (self.artifact.get("unprobed") or {}).get(r.kind)
            return Prediction(None, None, None, None, None, None, "unavailable",
                              f"no measurement and no published spec for {r.device or r.kind}"
                              f"{f' (its probe: {probe})' if probe else ''}: nothing to predict from", self.level)
        f = feature_row(r.point, r.batch_size, r.precision, r.mode, r.backend, spec)
        roof = math.exp(f["log_roofline_ms"])
        unmeasured_baseline = 0.0 if device_memory_kind(r.kind) else STATIC_PROCESS_BASELINE  # a card's allocator holds tensors only
        mem_ref = memory_reference_bytes(r.point, r.precision, r.mode, self.artifact["process_baseline"].get(r.kind, unmeasured_baseline),
                                         r.batch_size)
        cal = self.artifact["efficiency"].get("|".join((r.kind, r.backend, r.precision, r.mode)))
        if cal:
            lat = roof * math.exp(cal["latency"])
            mem, mem_interval, floored = _at_least_resident(mem_ref * math.exp(cal["memory"]), _interval(mem_ref * math.exp(cal["memory"]),
                                                                                                      cal["memory_spread"]), r)
            return self._with_fitted_baselines(Prediction(
                lat, r.batch_size * 1e3 / lat, mem, _interval(lat, cal["latency_spread"]),
                _interval(r.batch_size * 1e3 / lat, cal["latency_spread"]), mem_interval, "roofline_calibrated",
                f"outside the trained domain ({outside or 'not trained'}): roofline on {spec.name} ({spec.source}) x efficiency measured "
                f"on {cal['n']} rows of {r.kind}/{r.backend}/{r.precision}/{r.mode}" + floored, self.level), r)
        lat = roof / STATIC_EFFICIENCY
        spread = math.log(STATIC_INTERVAL_FACTOR)
        mem, mem_interval, _ = _at_least_resident(mem_ref, _interval(mem_ref, spread), r)
        return self._with_fitted_baselines(Prediction(lat, r.batch_size * 1e3 / lat, mem, _interval(lat, spread), _interval(r.batch_size * 1e3 / lat, spread),
                          mem_interval, "static_rule",
                          f"{'cold start, no trained predictor yet, for' if self.artifact.get('cold_start') else 'nothing measured on'} "
                          f"{r.kind}/{r.precision}/{r.mode}: roofline on {spec.name} ({spec.source}) at an "
                          f"assumed {STATIC_EFFICIENCY:.0%} of peak; memory = process baseline + weights", None), r)


def _refused(r: Request, level: float | None) -> Prediction | None:
    """The unavailable answer where the request's backend never serves its precision and mode on
    its kind (Backend.kind_reason) or for its model (Backend.model_reason: torch's dynamic int8 of
    a model that is mostly convolutions), else None."""
    from benchmark_runners import registry

    backend = registry.backends().get(r.backend)
    refused = (backend.kind_reason(r.kind, r.precision, r.mode)
               or backend.model_reason(r.point.name, r.point.linear_flops_fraction, r.precision, r.mode)) if backend is not None else None
    return Prediction(None, None, None, None, None, None, "unavailable", f"{r.kind}/{r.precision}/{r.mode}: {refused}", level) \
        if refused else None


def _bands_per_kind(validation: ValidationReport, field: str) -> dict[str, dict[str, float | None]]:
    """Per device kind, each target's log half-width from one of the report's per-kind bands."""
    return {kind: {t: (getattr(validation.targets[t], field).get(kind) or {}).get("log_half_width") for t in TARGETS}
            for kind in getattr(validation.targets["latency"], field)}


def _at_least_resident(mem: float, interval: tuple[float, float] | None, r: Request) -> tuple[float, tuple[float, float] | None, str]:
    """The memory answer, never below the bytes the model keeps resident: its weights at the
    request's precision (x TRAINING_WEIGHT_COPIES in training: weights, gradients, optimizer
    states). A fit trained on small models extrapolates below that for a 7B one (it said 21 GB
    for Falcon-7B in fp32, whose weights alone are 27.7 GB); the floor is physics, not a fit."""
    from devicefit.predict.features import TRAINING_WEIGHT_COPIES

    resident = r.point.weight_bytes[r.precision] * (TRAINING_WEIGHT_COPIES if r.mode == "training" else 1)
    if mem >= resident and (interval is None or interval[0] >= resident):
        return mem, interval, ""
    raised = None if interval is None else (max(interval[0], resident), max(interval[1], resident))
    if mem >= resident:  # only the interval's lower end reached below the weights
        return mem, raised, ""
    return resident, raised, f"; memory raised to the resident weights' {resident / 2**30:.1f} GiB (the fit extrapolated below them)"


def _interval(value: float, log_half_width: float | None) -> tuple[float, float] | None:
    if log_half_width is None:
        return None
    return value * math.exp(-log_half_width), value * math.exp(log_half_width)
