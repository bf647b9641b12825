"""Generation figures predicted for any model and device: TTFT, TPOT, decode tokens/s and the
KV cache, as the analytic estimators (gpu_poor, llm-analysis) split them, calibrated on the
generation rows measured.

- **TTFT**: the prefill is one forward pass over the prompt, so it is answered by the forward-pass
  predictor at the prompt's length (its chain link named: trained, calibrated roofline or static).
  For an encoder-decoder that forward pass also runs the decoder over as many positions, where
  a real prefill runs its start token only: an overestimate, which the detail says.
- **TPOT**: a decode step reads every weight once and the KV cache so far, and computes about
  2 x active parameters x batch FLOPs: memory-bandwidth bound wherever the batch is small. Its
  roofline (`decode_roofline`, bytes at the mean context of the request) times the decode
  efficiency measured on this device kind, backend, precision and batch size (the median of
  measured TPOT over roofline across its generation rows: `roofline_calibrated`, with how many
  rows and models; the nearest measured batch where this one is not), or an assumed
  STATIC_DECODE_EFFICIENCY where none was measured (`static_rule`). Per batch size, because
  small-batch decode is not bandwidth-bound alone: on the Xeon, batch 4 ran at 2.9x the
  roofline for gpt2, qwen2.5-0.5b and t5-small alike, batch 1 at 1.3-2.1x (its GEMMs of 4 rows
  reach a fraction of the probed peak).
- **KV cache**: from the config (benchmark_runners.generation.kv_cache), exact arithmetic.

The calibration is validated leave-one-model-out (`calibrate_generation`): each measured model's
TPOT predicted from the other models' rows alone, MAPE in the artifact.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from benchmark_runners.generation import DEFAULT_NEW_TOKENS, KVCache, kv_cache, request_shape
from devicefit.predict.features import roofline_ms
from devicefit.predict.hardware_specs import DeviceSpec, row_device
from models.analysis import active_parameter_count, weight_bytes
from models.catalog import ModelSpec

STATIC_DECODE_EFFICIENCY = 0.5  # no generation row on the kind: half the bandwidth roofline, labelled
HALF = ("fp16", "bf16")


@dataclass(frozen=True)
class DecodeRoofline:
    bytes_per_step: float  # weights at the precision + the KV cache at the request's mean context
    flops_per_step: float  # 2 x active parameters x batch
    ms: float


def cache_for(spec: ModelSpec, batch: int, precision: str, prompt: int | None, new: int | None) -> KVCache:
    shape = request_shape(spec, prompt, new)
    encoder = spec.config.get("max_source_positions") if shape.prompt_tokens is None else None
    return kv_cache(spec.config, batch, shape.prompt_tokens or 0, shape.new_tokens, 2 if precision in HALF else 4, encoder)


_decoder_shares: dict[tuple, float] = {}


def decoder_share(spec: ModelSpec) -> float:
    """The share of an encoder-decoder's parameters a decode step uses: all but the encoder's,
    which ran once in the prefill (T5, Whisper). 1 for a decoder-only model."""
    if not spec.config.get("is_encoder_decoder"):
        return 1.0
    key = (spec.name, spec.source, str(spec.path))
    if key not in _decoder_shares:
        from models.loading import meta_model

        params = dict(meta_model(spec).named_parameters())  # shared (tied) tensors once
        encoder = sum(p.numel() for name, p in params.items() if ".encoder." in f".{name}" or name.startswith("encoder."))
        _decoder_shares[key] = 1 - encoder / sum(p.numel() for p in params.values())
    return _decoder_shares[key]


def decode_roofline(spec: ModelSpec, batch: int, precision: str, prompt: int | None, new: int | None,
                    device: DeviceSpec) -> DecodeRoofline:
    """The lower bound on one decode step: reading the weights it uses (an encoder-decoder's
    decoder only) and, on average over the request, half the self-attention cache grown during
    decode plus the prompt's (or cross-attention's)."""
    cache = cache_for(spec, batch, precision, prompt, new)
    new_positions = request_shape(spec, prompt, new).new_tokens - 1
    per_position = cache.self_bytes / cache.self_positions if cache.self_positions else 0.0
    mean_cache = cache.total_bytes - per_position * new_positions / 2
    share = decoder_share(spec)
    moved = float(weight_bytes(spec, precision)) * share + mean_cache
    flops = 2.0 * active_parameter_count(spec) * share * batch
    return DecodeRoofline(moved, flops, roofline_ms(flops, moved, device))


def _key(kind: str, backend: str, precision: str, batch: int) -> str:
    return "|".join((kind, backend, precision, f"b{batch}"))


def nearest_calibration(calibration: dict[str, Any], kind: str, backend: str, precision: str,
                        batch: int) -> tuple[int, dict[str, Any]] | None:
    """The decode efficiency measured at this batch size, else at the nearest one measured
    (log distance) on the same kind, backend and precision: (its batch, its entry)."""
    prefix = "|".join((kind, backend, precision, "b"))
    measured = {int(k[len(prefix):]): v for k, v in (calibration.get("decode_efficiency") or {}).items() if k.startswith(prefix)}
    if not measured:
        return None
    nearest = min(measured, key=lambda b: (abs(math.log(b / batch)), b))
    return nearest, measured[nearest]


def _ratios(rows: list[dict[str, Any]], specs: dict[str, DeviceSpec], specs_of_models: dict[str, ModelSpec]):
    """(key, model, log(measured TPOT / roofline)) per usable generation row."""
    out = []
    for r in rows:
        spec = specs_of_models.get(r.get("model"))
        device = specs.get(row_device(r)) or specs.get(r.get("device_kind"))
        if (r.get("mode") != "generation" or r.get("status") != "ok" or not r.get("tpot_p50_ms") or spec is None
                or device is None):
            continue
        roof = decode_roofline(spec, r["batch_size"], r["precision"], r.get("prompt_tokens"), r.get("new_tokens"), device)
        out.append((_key(r["device_kind"], r["backend"], r["precision"], r["batch_size"]), r["model"],
                    math.log(r["tpot_p50_ms"] / roof.ms)))
    return out


def calibrate_generation(rows: list[dict[str, Any]], specs: dict[str, DeviceSpec]) -> dict[str, Any]:
    """Decode efficiency per kind|backend|precision from the measured generation rows, and its
    leave-one-model-out validation: each model's TPOT predicted from the other models' rows."""
    from models.resolve import resolve_model

    models: dict[str, ModelSpec] = {}
    for name in {r.get("model") for r in rows if r.get("mode") == "generation" and r.get("status") == "ok"}:
        try:
            models[name] = resolve_model(name)
        except Exception:  # a local model directory gone since: its rows cannot be recomputed
            continue
    ratios = _ratios(rows, specs, models)
    calibration = {}
    for key in sorted({k for k, _, _ in ratios}):
        logs = [x for k, _, x in ratios if k == key]
        calibration[key] = {"log_ratio": statistics.median(logs), "n": len(logs),
                            "spread": statistics.median(abs(x - statistics.median(logs)) for x in logs),
                            "models": sorted({m for k, m, _ in ratios if k == key})}
    errors = []
    for held in sorted({m for _, m, _ in ratios}):
        for key, model, x in ratios:
            others = [y for k, m, y in ratios if k == key and m != held]
            if model == held and others:
                errors.append(abs(math.exp(statistics.median(others) - x) - 1))  # |predicted - measured| / measured
    validation = {"tpot_mape": statistics.mean(errors) if errors else None, "rows": len(errors),
                  "models": sorted({m for _, m, _ in ratios}), "method": "leave one model out"}
    return {"decode_efficiency": calibration, "validation": validation}


def predict_generation(spec: ModelSpec, kind: str, backend: str, device: DeviceSpec | None, batch: int, precision: str,
                       prompt: int | None, new: int | None, ttft: dict[str, Any], calibration: dict[str, Any]) -> dict[str, Any]:
    """One kind's generation answer. `ttft` is the forward-pass prediction at the prompt's length
    (latency, source, detail); `calibration` is the artifact's `generation` section."""
    shape = request_shape(spec, prompt, new)
    cache = cache_for(spec, batch, precision, prompt, new)
    out: dict[str, Any] = {"prompt_tokens": shape.prompt_tokens, "new_tokens": shape.new_tokens or DEFAULT_NEW_TOKENS,
                           "kv_cache_mb": cache.total_bytes / 2**20, "kv_cache": cache.to_json(),
                           "kv_cache_source": "config arithmetic (benchmark_runners.generation.kv_cache)",
                           "ttft_ms": ttft.get("latency"), "ttft_source": ttft.get("source"), "ttft_detail": ttft.get("detail")}
    if spec.config.get("is_encoder_decoder") and out["ttft_ms"] is not None:
        out["ttft_detail"] = (f"{out['ttft_detail']}; the forward pass at the prompt's length also runs the decoder over as many "
                              "positions, where a prefill runs its start token: an overestimate for an encoder-decoder")
    if device is None:
        return {**out, "tpot_ms": None, "decode_tokens_per_s": None, "tpot_source": "unavailable",
                "tpot_detail": f"no measurement and no published spec for {kind}: no bandwidth to bound a decode step"}
    roof = decode_roofline(spec, batch, precision, prompt, new, device)
    found = nearest_calibration(calibration, kind, backend, precision, batch)
    if found:
        at, cal = found
        tpot, source = roof.ms * math.exp(cal["log_ratio"]), "roofline_calibrated"
        detail = (f"decode roofline on {device.name} ({device.source}): {roof.bytes_per_step / 1e9:.2f} GB read per step at "
                  f"{device.bandwidth_gbs:.0f} GB/s, x the decode efficiency measured on {cal['n']} generation rows of "
                  f"{kind}/{backend}/{precision} at batch {at} ({', '.join(cal['models'])})"
                  + ("" if at == batch else f"; batch {batch} itself is not measured"))
    else:
        tpot, source = roof.ms / STATIC_DECODE_EFFICIENCY, "static_rule"
        detail = (f"nothing measured in the generation scenario on {kind}/{backend}/{precision}: decode roofline on {device.name} "
                  f"({device.source}), {roof.bytes_per_step / 1e9:.2f} GB read per step, at an assumed "
                  f"{STATIC_DECODE_EFFICIENCY:.0%} of its bandwidth")
    out.update(tpot_ms=tpot, tpot_source=source, tpot_detail=detail,
               decode_tokens_per_s=batch * 1e3 / tpot, decode_roofline_ms=roof.ms)
    if out["ttft_ms"] is not None:
        out["request_ms"] = out["ttft_ms"] + (out["new_tokens"] - 1) * tpot
    return out
