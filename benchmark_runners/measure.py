"""Measuring one config inside the worker: resolve, check support, load (reusing a loaded
model across batch sizes), build inputs, run the harness, turn samples into a result row."""
from __future__ import annotations

import logging
import traceback
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from benchmark_runners import contention, registry, speed_reference
from benchmark_runners.backends.base import Backend, InvalidOutput, OutputMismatch, PreparedModel, TimedStep
from benchmark_runners.call_budget import REASON_CODE as CALL_BUDGET_CODE
from benchmark_runners.call_budget import over_call_budget
from benchmark_runners.environment import process_environment
from benchmark_runners.generation import (
    cache_element_bytes,
    generation_figures,
    generation_reason,
    kv_cache,
    memory_breakdown,
    request_shape,
)
from benchmark_runners.harness import Measurement, measure
from benchmark_runners.memory import PeakRSS, device_memory_peaks, device_memory_reset, release_free_heap
from benchmark_runners.output_check import check_output
from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
from benchmark_runners.stats import summarize
from benchmark_runners.timers import clock_for
from models.analysis import expert_copy_bytes, flops_per_sample, parameter_count, weight_bytes
from models.classifier import classify_spec
from models.inputs import input_signature
from models.loading import weights_kind
from models.resolve import resolve_model
from models.tensors import make_inputs

log = logging.getLogger("devicefit.measure")

NS_PER_MS = 1e6


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def describe_exception(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" (at {frame[0].filename.rsplit('/', 1)[-1]}:{frame[0].lineno})" if frame else ""
    return f"{type(exc).__name__}: {exc}{where}"


class ConfigMeasurer:
    """Holds at most one loaded model at a time; configs sharing (model, precision, mode)
    reuse it, so a batch-size sweep pays the load once."""

    def __init__(self, run_id: str, host_environment: dict[str, Any], devices: dict[str, dict[str, Any]]):
        self.run_id = run_id
        # What the host is, plus what this (measuring) process really runs with.
        self.environment = {**host_environment, **process_environment()}
        self.devices = devices  # device -> {"name", "fingerprint"}
        self.rss = PeakRSS()
        self._loaded_key: tuple | None = None
        self._loaded: PreparedModel | None = None
        self._loaded_backend: str | None = None
        self._copy_gbs: float | None = None  # the copy kernel's reading, once a process (speed_reference)
        self._copy_taken = False
        self._backends_used: set[str] = set()  # shut down when the worker is done (shutdown)
        self._results: list[BenchmarkResult] = []  # this worker's rows so far (benchmark_runners.call_budget)

    def _release(self) -> None:
        self.close()
        import gc

        gc.collect()

    def close(self) -> None:
        """Give the loaded model back to its backend (a browser page's session and the scratch
        files of its inputs). A worker calls it before it exits without the interpreter's
        teardown, which would otherwise leave what the backend made outside the process."""
        if self._loaded is not None:
            getattr(registry.backend(self._loaded_backend), "release", lambda _p: None)(self._loaded)
        self._loaded = None
        self._loaded_key = None

    def shutdown(self) -> None:
        """close(), and stop what each backend this process used keeps between models (the
        browser and its temporary files): the worker's last call before os._exit."""
        self.close()
        for name in sorted(self._backends_used):
            try:  # an optional hook: a plugin backend registered by its shape may not have it
                getattr(registry.backend(name), "shutdown", lambda: None)()
            except Exception:  # noqa: BLE001 - one backend's failure must not keep the others' processes alive
                log.warning("shutting down the %s backend failed", name, exc_info=True)
        self._backends_used.clear()

    def _prepared(self, backend: Backend, spec, config: BenchmarkConfig) -> PreparedModel:
        key = backend.loaded_key(config)
        if self._loaded_key != key:
            self._release()
            if registry.torch_device_string(config.device).startswith("cuda"):
                import torch

                torch.cuda.empty_cache()
            release_free_heap()
            before = self.rss.current_bytes()
            self._backends_used.add(config.backend)  # before prepare: a failed one may have started its browser
            prepared = backend.prepare(spec, config)
            prepared.memory.update(rss_before_load_bytes=before, rss_after_load_bytes=self.rss.current_bytes())
            self._loaded, self._loaded_key, self._loaded_backend = prepared, key, config.backend
        return self._loaded

    @staticmethod
    def _measure(step: TimedStep, config: BenchmarkConfig, helpers: tuple[int, ...] = ()) -> tuple[Measurement, dict[str, Any]]:
        """The harness's measurement, with the share of the host's CPU that other processes used
        meanwhile (`helpers`, the backend's own processes, are not others); a contended
        measurement is taken again once (benchmark_runners.contention)."""
        attempts = 0
        while True:
            attempts += 1
            before = contention.snapshot(helpers)
            m = measure(step.run, step.clock or clock_for(config.device), config.policy)
            share = contention.share_since(before, helpers)
            contended = contention.is_contended(share)
            if not contended or attempts == 2:
                return m, {"other_cpu_share": share, "contended": contended, "contention_attempts": attempts}

    def remember(self, results: list[BenchmarkResult]) -> None:
        """Rows measured for this worker's group before it started (by a worker that crashed or
        timed out): evidence for the call budget, as this measurer's own rows are."""
        self._results.extend(results)

    def run(self, config: BenchmarkConfig) -> BenchmarkResult:
        """One row for `config`; the rows this measurer produced inform the next config's call budget."""
        result = self._run(config)
        self._results.append(result)
        return result

    def _run(self, config: BenchmarkConfig) -> BenchmarkResult:
        row: dict[str, Any] = {
            "environment": self.environment,
            "device_name": self.devices.get(config.device, {}).get("name"),
            "hardware_fingerprint": self.devices.get(config.device, {}).get("fingerprint"),
        }
        try:
            spec = resolve_model(config.model)
            row.update(model=spec.name, model_path=str(spec.path) if spec.path else None,
                       model_source=spec.source, family=classify_spec(spec).family,
                       architecture=spec.architecture, parameters=parameter_count(spec),
                       weights=weights_kind(spec), weight_bytes=weight_bytes(spec, config.precision))
            seq_length = config.seq_length
            if config.mode == "generation":
                reason = generation_reason(spec)
                if reason:
                    return BenchmarkResult.for_config(config, self.run_id, now_iso(), "skipped", reason, "unsupported", **row)
                shape = request_shape(spec, config.seq_length, config.new_tokens)
                seq_length = shape.signature_seq_length
            sig = input_signature(spec, config.batch_size, seq_length, config.image_size, config.audio_seconds)
            if config.mode == "generation":  # the new tokens are part of the input: rows of other lengths never aggregate together
                sig = replace(sig, dims={**sig.dims, "new_tokens": shape.new_tokens})
            row["input"] = sig.describe()
            row["forward_flops_per_sample"] = flops_per_sample(spec, seq_length, config.image_size, config.audio_seconds)
            backend = registry.backend(config.backend)
            reason = backend.unsupported_reason(spec, config)
            if reason:
                return BenchmarkResult.for_config(config, self.run_id, now_iso(), "skipped", reason, "unsupported", **row)
            reason = over_call_budget(config, self._results)
            if reason:
                return BenchmarkResult.for_config(config, self.run_id, now_iso(), "skipped", reason, CALL_BUDGET_CODE, **row)
            prepared = self._prepared(backend, spec, config)
            inputs = make_inputs(sig, backend.input_device or registry.torch_device_string(config.device), prepared.input_float_dtype,
                                 with_targets=config.mode == "training")
            step = backend.make_step(prepared, inputs)
            # The optional hooks (backends.base.Backend has them; a plugin registered by shape may not).
            helpers = tuple(getattr(backend, "helper_pids", lambda _p: [])(prepared))
            # The machine's speed on a fixed kernel, where the model runs on the host CPU in this
            # process (a browser's own processes would be timed beside it); before the peak's reset.
            referenced = not helpers and registry.runs_on_host_cpu(config.device)
            if referenced and not self._copy_taken:
                self._copy_gbs, self._copy_taken = speed_reference.reference_copy_gbs(config.device), True
            speed_before = speed_reference.reference_gflops(config.device) if referenced else None
            release_free_heap()
            self.rss.reset()
            device_memory_reset(config.device)
            with backend.measurement_context(prepared):
                m, contention = self._measure(step, config, helpers)
            row.update(contention)
            # The peaks are the timed work's: read before the output check allocates its copies.
            row.update(device_memory_peaks(config.device))
            row["peak_rss_bytes"] = self.rss.peak_bytes()
            if referenced:
                row["speed_reference"] = speed_reference.record(speed_before, speed_reference.reference_gflops(config.device),
                                                                self._copy_gbs)
            elsewhere = getattr(backend, "memory_after_timing", lambda _p: None)(prepared)
            if elsewhere is not None:  # the model ran outside this process (a browser): its memory is there
                row["peak_rss_bytes"], row["memory_method"] = elsewhere
            elif m.timed_minor_faults is not None and m.samples_ns and not helpers:  # this process's own work: its faults, per batch
                row["minor_faults_per_iteration"] = m.timed_minor_faults / (len(m.samples_ns) * step.amortize)
            check = check_output(step.last_output() if step.last_output else backend.output(prepared, inputs))
            row["output_check"] = check.to_json()
            if check.problem:
                raise InvalidOutput(f"the model's output is not a real computation's: {check.problem}")
            if config.mode == "generation":
                row.update(self._generation_row(spec, config, prepared, sig, step, m, row))
            if not any(m.samples_ns):  # no duration to divide a batch by
                raise ValueError(f"all {len(m.samples_ns)} timed samples read 0 ns: the clock is coarser than a call")
            if step.amortize != 1:  # a step that runs N batches in flight: a sample is one batch
                m.samples_ns = [ns / step.amortize for ns in m.samples_ns]
                m.warmup_ns = [ns / step.amortize for ns in m.warmup_ns]
                m.first_iteration_ns /= step.amortize
        except Exception as exc:  # includes CUDA OOM and MemoryError: a row, not a crash
            self._release()
            code = ("output_mismatch" if isinstance(exc, OutputMismatch) else "invalid_output" if isinstance(exc, InvalidOutput)
                    else "exception")
            return BenchmarkResult.for_config(config, self.run_id, now_iso(), "failed", describe_exception(exc), code, **row)
        return self._ok_row(config, prepared, sig, m, row)

    @staticmethod
    def _generation_row(spec, config: BenchmarkConfig, prepared: PreparedModel, sig, step: TimedStep,
                        m: Measurement, row: dict[str, Any]) -> dict[str, Any]:
        """TTFT, TPOT, decode rate of the timed requests (the step's token timer saw the cold call
        and the warm-up too: the timed ones are the last), the KV cache from the config, and the
        memory's parts beside the measured peak."""
        shape = request_shape(spec, config.seq_length, config.new_tokens)
        timed = step.token_timings()[-len(m.samples_ns):]
        if step.runtime_figures:
            prepared.backend_config = {**(prepared.backend_config or {}), "runtime_figures": step.runtime_figures(len(m.samples_ns))}
        figures = generation_figures(timed, config.batch_size, shape.prompt_tokens, shape.new_tokens)
        element = cache_element_bytes(prepared.input_float_dtype)
        encoder = sig.dims.get("audio_frames", 0) // 2 or None  # Whisper's encoder halves the mel frames
        cache = kv_cache(spec.config, config.batch_size, shape.prompt_tokens or 0, shape.new_tokens, element, encoder)
        prefill_cache = kv_cache(spec.config, config.batch_size, shape.prompt_tokens or 0, 1, element, encoder)
        on_gpu = row.get("device_allocated_peak_bytes") is not None
        # transformers decodes a mixture of experts with batched_mm on every device but the CPU
        copies = expert_copy_bytes(spec, config.batch_size, config.precision) if on_gpu else 0
        breakdown = memory_breakdown(spec, shape, config.batch_size, element, row.get("weight_bytes"), cache, prefill_cache,
                                     None if on_gpu else prepared.memory.get("rss_before_load_bytes"),
                                     row["device_allocated_peak_bytes"] if on_gpu else row.get("peak_rss_bytes"), int(copies))
        return {**figures, "kv_cache_bytes": cache.total_bytes, "kv_cache": cache.to_json(), "memory_breakdown": breakdown}

    def _ok_row(self, config, prepared: PreparedModel, sig, m, row: dict[str, Any]) -> BenchmarkResult:
        samples_ms = [ns / NS_PER_MS for ns in m.samples_ns]
        stats = summarize(samples_ms).to_json()
        stats.pop("count")
        throughput = config.batch_size * len(samples_ms) / (sum(samples_ms) / 1e3)
        seq = sig.dims.get("seq_length")
        phases = {name: [ns / NS_PER_MS for ns in values] for name, values in m.phase_samples_ns.items()}
        phase_p50 = {name: summarize(values).p50_ms for name, values in phases.items()}
        memory_method = row.pop("memory_method", None) or self.rss.method
        return BenchmarkResult.for_config(
            config, self.run_id, now_iso(), "ok", None,
            **row,
            **stats,
            precision_recipe=prepared.recipe,
            weights_recipe=prepared.weights_recipe,
            denormal_policy=prepared.denormal_policy,
            backend_config=prepared.backend_config,
            samples_ms=samples_ms,
            warmup_ms=[ns / NS_PER_MS for ns in m.warmup_ns],
            warmup_steady=m.warmup_steady,
            iterations=len(samples_ms),
            stop_reason=m.stop_reason,
            ci_target=config.policy.ci_target,
            throughput_samples_per_s=throughput,
            forward_tokens_per_s=(throughput * seq if seq and config.mode == "inference" and sig.modality in ("text", "text_seq2seq")
                                  else None),
            load_time_s=prepared.load_time_s,
            first_inference_ms=m.first_iteration_ns / NS_PER_MS,
            forward_ms=phase_p50.get("forward"),
            backward_ms=phase_p50.get("backward"),
            optimizer_ms=phase_p50.get("optimizer"),
            phase_samples_ms=phases,
            loss_kind=prepared.loss_kind,
            rss_before_load_bytes=prepared.memory.get("rss_before_load_bytes"),
            rss_after_load_bytes=prepared.memory.get("rss_after_load_bytes"),
            memory_method=memory_method,
        )
