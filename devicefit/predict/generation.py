"""Generation figures predicted for any model and device: TTFT, TPOT, decode tokens/s and the
KV cache, as the analytic estimators (gpu_poor, llm-analysis) split them, calibrated on the
generation rows measured.

- **TTFT**: the prefill is one forward pass over the prompt, so it is answered by the forward-pass
  predictor at the prompt's length (its chain link named: trained, calibrated roofline or static),
  scaled by the prefill's time over that pass's on the device's per-operator roofline
  (`ttft_answer`): the prefill computes the last position's logits only, and an encoder-decoder's
  decoder runs its start token where the forward pass runs it over the prompt's length. Plus
  generate()'s own per-step cost (the host line's `step_ms`, below: `generate_step`), which a
  bare forward pass does not pay and which is most of the gap on a host-bound GPU.
- **TPOT**: a decode step has two costs.
  - *Device*: it reads every weight once (of a mixture of experts, the experts its tokens are
    routed to, which generate() on a GPU copies per token: `devicefit.predict.moe_decode`; of an
    untied embedding table, only the rows it gathers) and the KV cache so far, and computes about
    2 x active parameters (less the gathered tables) x batch FLOPs: memory-bandwidth bound
    wherever the batch is small. Its
    roofline (`decode_roofline`, bytes at the mean context of the request) times a ratio
    fitted per device, backend, precision and batch size (the nearest measured batch
    where this one is not): on the AMD EPYC, batch 1 ran at 2.3x the roofline, batch 4 at 5.7x
    (its GEMMs of 4 rows reach a fraction of the probed peak). A mixture's experts multiply
    fewer rows than the batch (`moe_decode.expert_rows`: 1.46 at batch 4 of a top-2 of 8 on a
    CPU, one a pair under batched_mm), so their part of the roofline takes the ratio of the
    batch nearest those rows (a 4-layer Mixtral on the EPYC, held out: 65% -> 32%).
  - *Host*: generate()'s eager loop dispatches every kernel of the step from Python
    (`models.op_profile.decode_step_ops` counts them on meta) plus a fixed per-step cost. On an
    H200 that is the whole story for small models: gpt2 takes 4.7 ms a token for 235 kernels
    against a 0.1 ms bandwidth roofline, qwen2.5-0.5b 12.6 ms for 929.
  On an asynchronous kind (`DeviceKind.asynchronous`: CUDA, ROCm, MPS) the host queues kernels
  while the device runs them, so a step takes the longer of the two; on a CPU the same cores do
  both, so they add. The host line (ms per step, us per kernel) is fitted per device (a kind
  on one host) and backend, the device ratio per device|backend|precision|batch, together, by
  least squares on log TPOT;
  a weak prior holds a ratio the rows cannot see (every row host-bound) at
  1 / `decode_efficiency_prior` (50% of the roofline on a CPU, 95% on a GPU). Where nothing was
  measured on the kind: the device roofline at that prior and the host line measured on the H200's host (STATIC_DISPATCH; the
  EPYC's CPU fit had about the same cost per kernel, 11.8 us), combined as the kind combines
  them (`static_rule`, labelled).
- **KV cache**: from the config (benchmark_runners.generation.kv_cache), exact arithmetic.

The calibration (`devicefit.predict.decode_calibration`) is validated leave-one-model-out: each measured model's
TPOT predicted from a fit to the other models' rows alone, MAPE in the artifact. LightGBM is
then trained on that held-out error (`devicefit.predict.tpot_residual`, nested validation) and
corrects the line's answers where it lowered the held-out MAPE (source `trained_predictor`).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from benchmark_runners import registry
from benchmark_runners.generation import DEFAULT_NEW_TOKENS, KVCache, kv_cache, request_shape
from devicefit.predict import tpot_residual
from devicefit.predict.features import roofline_ms
from devicefit.predict.hardware_specs import DeviceSpec, host_of, kind_of
from devicefit.predict.moe_decode import batched_experts_bytes, decode_expert_part, decode_weight_bytes, experts_text
from models.analysis import active_parameter_count, gathered_embedding_params, parameter_breakdown, parameter_count
from models.catalog import ModelSpec
from models.op_profile import decode_step_ops

STATIC_DECODE_EFFICIENCY = 0.5  # no generation row on the kind: half the bandwidth roofline, labelled
# ...on an asynchronous kind (a GPU), 95% of it: its decode kernels stream the weights (GEMV-class
# reads, batched_mm's copies) at the probed copy bandwidth, which counts bytes as they do, where a
# CPU's eager decode ran at 2.3-5.7x its roofline (the EPYC). The H200's profile of Mixtral's
# experts in generate(): 33.8 GB a step at 4.06 TB/s against the probe's 4.23 (0.96; batch 4);
# benchmarks/datasets/h200-cuda/README.md. The H100, which had no part in choosing the figure,
# decodes the same model device-bound at 1.07x (batch 8) and 0.97x (16) of its roofline at its
# probe's 2.99 TB/s (benchmarks/datasets/h100-cuda/README.md). It was 0.8 before the H100's rows.
STATIC_DECODE_EFFICIENCY_ASYNCHRONOUS = 0.95


def decode_efficiency_prior(asynchronous: bool) -> float:
    """The share of the bandwidth roofline a decode step is assumed to reach where no row shows
    it: the prior the fit pulls device ratios towards, and the static rule's."""
    return STATIC_DECODE_EFFICIENCY_ASYNCHRONOUS if asynchronous else STATIC_DECODE_EFFICIENCY
# No generation row on the device nor its kind: the host line fitted on the H200 host's rows
# (benchmarks/datasets/h200-cuda, 2026-11-26; 20 rows of 5 models), named in the answer.
STATIC_DISPATCH = {"step_ms": 1.57, "us_per_kernel": 12.9}
HALF = ("fp16", "bf16")
log = logging.getLogger("devicefit.predict")



@dataclass(frozen=True)
class DecodeRoofline:
    bytes_per_step: float  # weights read at the precision (moe_decode.decode_weight_bytes) + the KV cache at the mean context
    flops_per_step: float  # 2 x decode_parameters x batch
    ms: float
    kernels: int | None  # launched per step by generate()'s eager loop (models.op_profile.decode_step_ops); None: not traceable
    cache_bytes: float = 0.0  # the KV cache's part of bytes_per_step
    # a mixture's routed experts: their part of `ms` (by bytes: a decode step is bandwidth-bound
    # wherever a mixture is worth modelling; compute-bound, the split is approximate), and the
    # rows each of their products multiplies (moe_decode.expert_rows), whose device ratio costs
    # that part. Dense: 0, and the batch (decode_roofline passes it)
    expert_ms: float = 0.0
    expert_rows: float = 1.0


def residual_request(spec: ModelSpec, roof: DecodeRoofline, batch: int, precision: str, asynchronous: bool) -> tpot_residual.Request:
    """The request as the TPOT residual's trees see it (`devicefit.predict.tpot_residual`)."""
    active = active_parameter_count(spec)
    return tpot_residual.Request(roof.ms, roof.kernels or 0, batch, decode_parameters(spec), roof.cache_bytes,
                                 roof.bytes_per_step, bool(spec.config.get("is_encoder_decoder")),
                                 active / max(parameter_count(spec), 1), asynchronous, precision in HALF)


def cache_for(spec: ModelSpec, batch: int, precision: str, prompt: int | None, new: int | None) -> KVCache:
    shape = request_shape(spec, prompt, new)
    encoder = spec.config.get("max_source_positions") if shape.prompt_tokens is None else None
    return kv_cache(spec.config, batch, shape.prompt_tokens or 0, shape.new_tokens, 2 if precision in HALF else 4, encoder)


def decoder_share(spec: ModelSpec) -> float:
    """The share of an encoder-decoder's parameters a decode step uses: all but the encoder's,
    which ran once in the prefill (T5, Whisper). 1 for a decoder-only model."""
    if not spec.config.get("is_encoder_decoder"):
        return 1.0
    counts = parameter_breakdown(spec)  # shared (tied) tensors once
    return 1 - counts.encoder / max(counts.total, 1)


def decode_parameters(spec: ModelSpec) -> float:
    """Parameters a decode step multiplies by, per sequence: the decoder's active ones less the
    embedding tables it only gathers a row from (models.analysis.gathered_embedding_params)."""
    return max(active_parameter_count(spec) * decoder_share(spec) - gathered_embedding_params(spec), 0.0)


def decode_roofline(spec: ModelSpec, batch: int, precision: str, prompt: int | None, new: int | None,
                    device: DeviceSpec) -> DecodeRoofline:
    """The device's lower bound on one decode step: reading the weights it uses (an
    encoder-decoder's decoder only; of a mixture of experts, the experts its tokens are routed
    to, as `moe_decode.decode_weight_bytes` counts them) and, on average over the request, half the
    self-attention cache grown during decode plus the prompt's (or cross-attention's)."""
    cache = cache_for(spec, batch, precision, prompt, new)
    new_positions = request_shape(spec, prompt, new).new_tokens - 1
    per_position = cache.self_bytes / cache.self_positions if cache.self_positions else 0.0
    mean_cache = cache.total_bytes - per_position * new_positions / 2
    moved = decode_weight_bytes(spec, batch, precision, device.kind, decoder_share(spec)) + mean_cache
    flops = 2.0 * decode_parameters(spec) * batch
    ms = roofline_ms(flops, moved, device)
    experts, rows = decode_expert_part(spec, batch, precision, device.kind)
    return DecodeRoofline(moved, flops, ms, decode_kernels(spec), mean_cache, ms * experts / moved if moved else 0.0, rows)


def decode_kernels(spec: ModelSpec) -> int | None:
    """The decode step's kernel count, or None where the meta trace cannot run a cached step
    (a model whose cache generate() keeps in another form): then there is no host term, and the
    detail says so, rather than no answer."""
    try:
        return decode_step_ops(spec)
    except Exception as exc:  # a trace through arbitrary model code: any failure means "not counted"
        log.info("decode step of %s not traced: %s", spec.name, exc)
        return None


def is_asynchronous(kind: str) -> bool:
    known = registry.kinds().get(kind)
    return bool(known and known.asynchronous)


def step_ms(device_ms: float, kernels: int, dispatch: dict[str, Any] | None, asynchronous: bool) -> tuple[float, float]:
    """(the step's time, the host's share of it) from the device's time and the host line."""
    host = (dispatch["step_ms"] + kernels * dispatch["us_per_kernel"] / 1e3) if dispatch and kernels is not None else 0.0
    return (max(device_ms, host) if asynchronous else device_ms + host), host


def calibrated_device(calibration: dict[str, Any], device: str, backend: str) -> str | None:
    """The device whose generation rows answer for `device`: itself where it was measured in the
    generation scenario, else the device of the same kind with the most rows (a host line and
    ratios are one machine's: another CPU's are the best there is, and the detail names it).
    Artifacts from before the per-device fit keyed the kind alone ("cpu|torch")."""
    groups = {g.rsplit("|", 1)[0]: line for g, line in (calibration.get("dispatch") or {}).items() if g.endswith(f"|{backend}")}
    groups.update({k.split("|")[0]: None for k in (calibration.get("decode_efficiency") or {})
                   if k.split("|")[1] == backend and k.split("|")[0] not in groups})
    if device in groups:
        return device
    same_kind = [g for g in groups if kind_of(g) == kind_of(device)]
    # this machine's own device first (its unconstrained CPU for cpu@host+t1), then the most rows
    return max(same_kind, key=lambda g: (host_of(g) == host_of(device), (groups[g] or {}).get("n", 0), g)) if same_kind else None


def nearest_batch(measured, rows: float) -> int:
    """Of the batch sizes measured, the nearest to `rows` rows a product (log distance; the
    smaller on a tie)."""
    return min(measured, key=lambda b: (abs(math.log(b / rows)), b))


def nearest_calibration(calibration: dict[str, Any], device: str, backend: str, precision: str,
                        batch: float) -> tuple[int, dict[str, Any]] | None:
    """The device ratio measured at this batch size (or rows a product: a mixture's experts'),
    else at the nearest one measured on the same device, backend and precision: (its batch,
    its entry)."""
    prefix = "|".join((device, backend, precision, "b"))
    measured = {int(k[len(prefix):]): v for k, v in (calibration.get("decode_efficiency") or {}).items() if k.startswith(prefix)}
    if not measured:
        return None
    nearest = nearest_batch(measured, batch)
    return nearest, measured[nearest]


def decode_device_ms(roof_ms: float, expert_ms: float, ratio: float, expert_ratio: float) -> float:
    """A decode step's device time: the dense part of its roofline at the batch's ratio, a
    mixture's experts' part at the ratio of the rows their products multiply."""
    return (roof_ms - expert_ms) * ratio + expert_ms * expert_ratio


def ttft_answer(forward, factor: tuple[float, str] | None) -> dict[str, Any]:
    """TTFT from the forward-pass prediction at the prompt's length (`forward`, a Prediction),
    scaled by the prefill's time over that pass (`factor`, PerformancePredictor.prefill_factor):
    the prefill computes the last position's logits only, and an encoder-decoder's decoder runs
    its start token where the forward pass runs it over the prompt's length. Unscaled, and saying
    so, where no factor exists."""
    if forward.latency_ms is None:
        return {"latency": None, "source": forward.source, "detail": forward.detail}
    if factor is None:
        return {"latency": forward.latency_ms, "source": forward.source,
                "detail": f"{forward.detail}; the forward pass at the prompt's length, not scaled to the prefill (no roofline to scale by)"}
    ratio, basis = factor
    return {"latency": forward.latency_ms * ratio, "source": forward.source, "prefill_scaled": True,
            "detail": f"the forward pass at the prompt's length ({forward.latency_ms:.3g} ms: {forward.detail}) x {ratio:.2f}, the "
                      f"prefill's time over that pass's by {basis} (the prefill computes the last position's logits only, and an "
                      "encoder-decoder's decoder runs its start token)"}


def generate_step(line: dict[str, Any] | None, fitted: str | None, backend: str) -> tuple[float, str]:
    """generate()'s own cost in the step that produces the first token, which a bare forward pass
    (what TTFT is scaled from) does not pay: preparing the step's inputs and cache, the logits
    processors, picking the token. It is the host line's fixed per-step cost (`step_ms`, fitted
    on the TPOT rows): on an H200 it is 1.6 ms against a 4 ms gpt2 forward pass, on a CPU's
    prefill a rounding error. Where no line was fitted for the backend, the H200 host's
    (STATIC_DISPATCH), named. Returns (ms, the words for the detail)."""
    if line:
        return line["step_ms"], (f"generate()'s own per-step cost ({line['step_ms']:.2f} ms, the host line fitted on {line['n']} "
                                 f"generation rows of {fitted}/{backend}), which a bare forward pass does not pay")
    return STATIC_DISPATCH["step_ms"], (f"generate()'s own per-step cost ({STATIC_DISPATCH['step_ms']} ms, the line fitted on an "
                                        "H200 host's generation rows, not this machine's), which a bare forward pass does not pay")


def predict_generation(spec: ModelSpec, kind: str, backend: str, device: DeviceSpec | None, batch: int, precision: str,
                       prompt: int | None, new: int | None, ttft: dict[str, Any], calibration: dict[str, Any],
                       device_id: str | None = None) -> dict[str, Any]:
    """One kind's generation answer. `ttft` is the forward-pass prediction at the prompt's length
    (latency, source, detail); `calibration` is the artifact's `generation` section; `device_id`
    the measured device the kind is answered for (`PerformancePredictor.device_of`)."""
    shape = request_shape(spec, prompt, new)
    cache = cache_for(spec, batch, precision, prompt, new)
    out: dict[str, Any] = {"prompt_tokens": shape.prompt_tokens, "new_tokens": shape.new_tokens or DEFAULT_NEW_TOKENS,
                           "kv_cache_mb": cache.total_bytes / 2**20, "kv_cache": cache.to_json(),
                           "decode_transient_mb": batched_experts_bytes(spec, batch, precision, kind) / 2**20,
                           "kv_cache_source": "config arithmetic (benchmark_runners.generation.kv_cache)",
                           "ttft_ms": ttft.get("latency"), "ttft_source": ttft.get("source"), "ttft_detail": ttft.get("detail")}
    if spec.config.get("is_encoder_decoder") and out["ttft_ms"] is not None and not ttft.get("prefill_scaled"):
        out["ttft_detail"] = (f"{out['ttft_detail']}; the forward pass at the prompt's length also runs the decoder over as many "
                              "positions, where a prefill runs its start token: an overestimate for an encoder-decoder")
    fitted = calibrated_device(calibration, device_id or kind, backend)
    line = (calibration.get("dispatch") or {}).get(f"{fitted}|{backend}") if fitted else None
    if out["ttft_ms"] is not None:
        step, step_text = generate_step(line, fitted, backend)
        out.update(ttft_ms=out["ttft_ms"] + step, ttft_generate_step_ms=step, ttft_detail=f"{out['ttft_detail']}; + {step_text}")
    if device is None:
        return {**out, "tpot_ms": None, "decode_tokens_per_s": None, "tpot_source": "unavailable",
                "tpot_detail": f"no measurement and no published spec for {kind}: no bandwidth to bound a decode step"}
    roof = decode_roofline(spec, batch, precision, prompt, new, device)
    found = nearest_calibration(calibration, fitted, backend, precision, batch) if fitted else None
    elsewhere = "" if fitted in (device_id or kind, kind) else \
        f"; the fit is {fitted}'s: {device_id or 'this ' + kind} has no generation rows of its own"
    asynchronous = line["asynchronous"] if line else is_asynchronous(kind)
    roof_text = (f"decode roofline on {device.name} ({device.source}): {roof.bytes_per_step / 1e9:.2f} GB read per step at "
                 f"{device.bandwidth_gbs:.0f} GB/s = {roof.ms:.3f} ms{experts_text(spec, batch, kind)}")
    if found or line:
        if found:
            at, cal = found
            ratio = math.exp(cal["log_ratio"])
            ratio_text = (f"x {ratio:.2f}, the device ratio fitted on {cal['n']} generation rows of {fitted}/{backend}/{precision} "
                          f"at batch {at} ({', '.join(cal['models'])})" + ("" if at == batch else f"; batch {batch} itself is not measured")
                          + ("" if cal.get("device_bound_rows", 1) else "; none of them device-bound, so the ratio is the prior's"))
        else:
            prior = decode_efficiency_prior(asynchronous)
            ratio = 1 / prior
            ratio_text = f"x {ratio:.2f} (an assumed {prior:.0%} of it: {precision} not measured on {fitted}/{backend})"
        expert_ratio = ratio
        if found and roof.expert_ms:
            at_rows, expert_cal = nearest_calibration(calibration, fitted, backend, precision, roof.expert_rows)
            expert_ratio = math.exp(expert_cal["log_ratio"])
            ratio_text += (f"; its experts' {roof.expert_ms:.3f} ms x {expert_ratio:.2f} instead, the ratio at batch {at_rows}: each "
                           f"expert's product multiplies {roof.expert_rows:.2f} rows, not {batch}")
        device_ms = decode_device_ms(roof.ms, roof.expert_ms, ratio, expert_ratio)
        tpot, host = step_ms(device_ms, roof.kernels, line, asynchronous)
        if line and roof.kernels is None:
            host_text = "; the host's dispatch is not counted: the decode step could not be traced on meta"
        else:
            host_text = (f"; host: {roof.kernels} kernels x {line['us_per_kernel']:.1f} us + {line['step_ms']:.2f} ms per step = "
                         f"{host:.2f} ms, fitted on {line['n']} generation rows of {fitted}/{backend} ({', '.join(line['models'])}); "
                         + ("the longer of the two, the host queueing while the device runs: "
                            + ("host" if host > device_ms else "device") + "-bound" if asynchronous else "the two add, on the same cores")
                         ) if line else ""
        source, detail = "roofline_calibrated", f"{roof_text} {ratio_text} = {device_ms:.3f} ms{host_text}{elsewhere}"
        # the trees learned the error of a fitted ratio and a counted step: not of a prior or an uncounted host
        trees = tpot_residual.correction(calibration.get("tpot_residual"), residual_request(spec, roof, batch, precision, asynchronous)) \
            if found and roof.kernels is not None else None
        if trees:
            detail = f"{detail}; that line's {tpot:.3f} ms {trees[1]}"
            tpot, source = tpot * trees[0], "trained_predictor"
    else:
        prior = decode_efficiency_prior(asynchronous)
        device_ms = roof.ms / prior
        (tpot, host), source = step_ms(device_ms, roof.kernels, STATIC_DISPATCH, asynchronous), "static_rule"
        host_text = ("the host's dispatch is not counted: the decode step could not be traced on meta" if roof.kernels is None else
                     f"host: {roof.kernels} kernels x {STATIC_DISPATCH['us_per_kernel']} us + {STATIC_DISPATCH['step_ms']} ms per step "
                     f"= {host:.2f} ms, the line fitted on an H200 host's generation rows (not this machine's), "
                     + ("the longer of the two" if asynchronous else "added"))
        detail = (f"nothing measured in the generation scenario on {kind}/{backend}/{precision}: {roof_text}, at an assumed "
                  f"{prior:.0%} of its bandwidth = {device_ms:.3f} ms; {host_text}")
    out.update(tpot_ms=tpot, tpot_source=source, tpot_detail=detail,
               decode_tokens_per_s=batch * 1e3 / tpot, decode_roofline_ms=roof.ms, decode_kernels=roof.kernels)
    if out["ttft_ms"] is not None:
        out["request_ms"] = out["ttft_ms"] + (out["new_tokens"] - 1) * tpot
    return out
