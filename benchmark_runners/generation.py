"""The generation scenario: what a user of a language model (or Whisper) waits for.

A request is a prompt of P tokens (Whisper: its 30-s audio window) and N new tokens generated
greedily with the KV cache on, every request the same length (min_new_tokens == max_new_tokens
== N, as optimum-benchmark and the LLM-Perf leaderboard run it: P = 256, N = 64 by default).
One harness sample is one request; its confidence interval and stopping rule work on that
per-request latency, as for any other row.

Inside a request the time of every token is taken as it comes (`TokenTimer`, a logits processor
that generate() calls once per new token, after the forward that produced its logits):
- TTFT, time to first token: from the request's start to the first token's logits, so the
  prefill over the whole prompt is in it;
- TPOT, time per output token: the gaps between consecutive tokens (N - 1 per request), each
  one decode step (token selection, cache update, one forward over one new position). Its median
  and p90 are over those per-step gaps, never total / N;
- decode tokens/s: batch x (N - 1) / (request time - TTFT), the tokens decode produced after
  the first one, as optimum-benchmark counts them (the first token is prefill's).

KV-cache memory is computed from the config, beside the measured peak (`kv_cache`).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from benchmark_runners.stats import percentile

DEFAULT_PROMPT_TOKENS = 256
DEFAULT_NEW_TOKENS = 64
MIN_NEW_TOKENS = 2  # one decode step at least, or there is no time per output token
MAX_NEW_TOKENS = 32768  # and as many prompt tokens: beyond any catalog model's positions


def generation_reason(spec) -> str | None:
    """Why `spec` cannot run the generation scenario (None: it can). A model generates when its
    class has a language-model head that generate() drives (decoder-only, encoder-decoder,
    Whisper); an encoder (BERT), a classifier or an embedding model does not."""
    from models.class_facts import class_facts

    facts = class_facts(spec.architecture)  # cached: the class's modeling module is not imported for it
    if not facts.exists:
        from importlib.metadata import version

        raise ValueError(f"transformers {version('transformers')} has no class {spec.architecture} (model {spec.name})")
    if not facts.can_generate:
        return (f"{spec.name} ({spec.architecture}) does not generate text: it has no language-model head that "
                f"generate() drives (the generation scenario is for decoder-only, encoder-decoder and Whisper models)")
    return None


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    return next((cfg[k] for k in keys if cfg.get(k) is not None), None)


def decoder_limit(cfg: dict[str, Any]) -> int | None:
    """The most positions the (decoder's) cache can hold: learned or rotary position limits.
    T5's relative positions have none."""
    return _first(cfg, "max_target_positions", "max_position_embeddings", "n_positions")


@dataclass(frozen=True)
class RequestShape:
    """A generation request's lengths for a model: the prompt (None where it is audio), the new
    tokens, and the sequence length its input signature is built at."""

    prompt_tokens: int | None
    new_tokens: int
    signature_seq_length: int | None


def request_shape(spec, seq_length: int | None, new_tokens: int | None) -> RequestShape:
    """The defaults filled in and checked against the model's position limit: a request whose
    prompt and new tokens together exceed what the decoder can hold is impossible (ValueError)."""
    cfg = spec.config
    new = DEFAULT_NEW_TOKENS if new_tokens is None else new_tokens
    if not isinstance(new, int) or isinstance(new, bool) or not MIN_NEW_TOKENS <= new <= MAX_NEW_TOKENS:
        raise ValueError(f"new tokens must be an integer from {MIN_NEW_TOKENS} (one decode step) to {MAX_NEW_TOKENS}, got {new!r}")
    if seq_length is not None and (not isinstance(seq_length, int) or isinstance(seq_length, bool)
                                   or not 1 <= seq_length <= MAX_NEW_TOKENS):
        raise ValueError(f"the prompt must be an integer from 1 to {MAX_NEW_TOKENS} tokens, got {seq_length!r}")
    limit = decoder_limit(cfg)
    if "num_mel_bins" in cfg:  # Whisper: the prompt is the 30-s audio window; the decoder generates
        if seq_length is not None:
            raise ValueError(f"{spec.name}'s prompt is its 30-s audio window: a prompt length does not apply")
        if limit is not None and new + 1 > limit:
            raise ValueError(f"{spec.name}'s decoder holds at most {limit} positions; {new} new tokens after the start token is impossible")
        return RequestShape(None, new, None)
    prompt = DEFAULT_PROMPT_TOKENS if seq_length is None else seq_length
    if cfg.get("is_encoder_decoder"):
        needed, what = new + 1, f"{new} new tokens after the start token"
    else:
        needed, what = prompt + new, f"a prompt of {prompt} tokens and {new} new tokens"
    if limit is not None and needed > limit:
        raise ValueError(f"{spec.name} holds at most {limit} positions; {what} ({needed}) is impossible")
    return RequestShape(prompt, new, prompt)


@dataclass(frozen=True)
class KVCache:
    """The KV cache at the end of a request, computed from the config. Per decoder layer the
    cache holds a key and a value (2) of kv_heads x head_dim per position and sequence:
    bytes = layers x 2 x kv_heads x head_dim x positions x batch x bytes per element.
    Grouped-query and multi-query attention (Falcon-7B's `multi_query`) hold fewer KV heads than
    query heads. Self-attention holds the positions the decoder has run (prompt + N - 1 for a decoder-only
    model: the last token is never fed back; the start token + N - 1 for an encoder-decoder);
    an encoder-decoder adds its cross-attention cache over the encoder's positions."""

    layers: int
    kv_heads: int
    head_dim: int
    self_positions: int
    cross_positions: int
    batch_size: int
    bytes_per_element: int
    self_bytes: int
    cross_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.self_bytes + self.cross_bytes

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "total_bytes": self.total_bytes}


def kv_cache(cfg: dict[str, Any], batch_size: int, prompt_tokens: int, new_tokens: int,
             bytes_per_element: int, encoder_positions: int | None = None) -> KVCache:
    """The cache's size from a transformers config dict (see KVCache for the arithmetic).

    Hand check, gpt2 (12 layers, 12 heads of 64, no grouped KV) at batch 1, prompt 256, 64 new,
    fp32: 12 x 2 x 12 x 64 x (256 + 63) x 1 x 4 = 23,519,232 bytes (22.4 MiB)."""
    encoder_decoder = bool(cfg.get("is_encoder_decoder"))
    layers = _first(cfg, "num_decoder_layers", "decoder_layers", "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(cfg, "decoder_attention_heads", "num_attention_heads", "n_head", "num_heads")
    hidden = _first(cfg, "d_model", "hidden_size", "n_embd")
    if not layers or not heads or not hidden:
        raise ValueError("the config names no decoder layer count, head count or hidden size: no KV-cache figure")
    if cfg.get("multi_query") and not cfg.get("new_decoder_architecture"):
        kv_heads = 1  # Falcon-7B: one key/value head shared by all query heads
    else:
        kv_heads = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv") or heads
    head_dim = _first(cfg, "head_dim", "d_kv") or hidden // heads
    per_position = layers * 2 * kv_heads * head_dim * batch_size * bytes_per_element
    if encoder_decoder:
        self_positions = new_tokens  # the decoder start token + N - 1 generated ones fed back
        cross_positions = encoder_positions if encoder_positions is not None else prompt_tokens
        cross_per_position = layers * 2 * heads * head_dim * batch_size * bytes_per_element  # cross-attention: no GQA
    else:
        self_positions = prompt_tokens + new_tokens - 1
        cross_positions, cross_per_position = 0, 0
    return KVCache(layers, kv_heads, head_dim, self_positions, cross_positions, batch_size, bytes_per_element,
                   per_position * self_positions, cross_per_position * cross_positions)


def cache_element_bytes(float_dtype: Any) -> int:
    """Bytes per cached element: the activations' float type (fp16/bf16 2, fp32 4; dynamic int8
    keeps fp32 activations, so its cache is fp32 too)."""
    return int(getattr(float_dtype, "itemsize", 4) or 4)


@dataclass
class RequestTiming:
    """One request's token times, nanoseconds from its start."""

    token_ns: list[int] = field(default_factory=list)  # when each new token's logits were ready
    total_ns: int = 0

    @property
    def ttft_ns(self) -> int:
        return self.token_ns[0]

    @property
    def step_ns(self) -> list[int]:
        return [b - a for a, b in zip(self.token_ns, self.token_ns[1:])]

    @property
    def decode_ns(self) -> int:
        return self.total_ns - self.token_ns[0]


class TokenTimer:
    """Times every new token of each request. `begin()` starts a request, generate() calls the
    timer once per new token (it is a logits processor: it returns the scores unchanged), `end()`
    closes the request. `synchronize` is the device's (CUDA, MPS): a token's time is when its
    logits exist, not when the host queued the kernels."""

    def __init__(self, synchronize: Callable[[], None] | None = None):
        self._sync = synchronize
        self.requests: list[RequestTiming] = []
        self._start = 0

    def begin(self) -> None:
        if self._sync:
            self._sync()
        self.requests.append(RequestTiming())
        self._start = time.perf_counter_ns()

    def __call__(self, input_ids, scores):
        if self._sync:
            self._sync()
        self.requests[-1].token_ns.append(time.perf_counter_ns() - self._start)
        return scores

    def end(self) -> None:
        if self._sync:
            self._sync()
        self.requests[-1].total_ns = time.perf_counter_ns() - self._start


def logits_processor(timer: TokenTimer):
    """The timer as a transformers LogitsProcessor (generate() accepts only those)."""
    from transformers import LogitsProcessor

    class _TokenTimes(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return timer(input_ids, scores)

    return _TokenTimes()


NS_PER_MS = 1e6


def generation_figures(requests: list[RequestTiming], batch_size: int, prompt_tokens: int | None,
                       new_tokens: int) -> dict[str, Any]:
    """The row's generation figures from the timed requests (see the module docstring). A prompt
    that is not tokens (Whisper's audio) has no prefill token rate."""
    if not requests:
        raise ValueError("no timed requests")
    for r in requests:
        if len(r.token_ns) != new_tokens:
            raise RuntimeError(f"a request generated {len(r.token_ns)} tokens instead of {new_tokens}: "
                               "generation must run to the fixed length (min_new_tokens == max_new_tokens)")
    ttft = sorted(r.ttft_ns / NS_PER_MS for r in requests)
    steps = sorted(s / NS_PER_MS for r in requests for s in r.step_ns)
    decode_s = sum(r.decode_ns for r in requests) / 1e9
    ttft_p50 = statistics.median(ttft)
    return {
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "ttft_ms": ttft_p50,
        "ttft_p90_ms": percentile(ttft, 90),
        "tpot_p50_ms": statistics.median(steps),
        "tpot_p90_ms": percentile(steps, 90),
        "decode_tokens_per_s": batch_size * (new_tokens - 1) * len(requests) / decode_s,
        "prefill_tokens_per_s": batch_size * prompt_tokens / (ttft_p50 / 1e3) if prompt_tokens else None,
        "token_times_ms": [[ns / NS_PER_MS for ns in r.token_ns] for r in requests],
    }


def memory_breakdown(spec, shape: RequestShape, batch_size: int, element_bytes: int, weight_bytes: int | None,
                     cache: KVCache, prefill_cache: KVCache, process_bytes: int | None,
                     measured_peak_bytes: int | None, expert_copy_bytes: int = 0) -> dict[str, Any]:
    """The request's memory in named parts beside the measured peak (the analytic estimators'
    split: weights, KV cache, activations), all in bytes:
    - process: the worker's RSS before the model was built (interpreter, libraries);
    - weights: the model's weights at the row's precision;
    - kv_cache: the cache at the request's end, from the config (kv_cache);
    - activations: the prefill's peak live activations (models.op_profile's meta-device trace of
      the forward generate() runs first: logits of the last position only where the model keeps
      that few), less the prompt's keys and values that trace holds, which kv_cache counts; at
      half precision half the traced fp32 bytes;
    - expert_copy: for a mixture of experts decoded on a GPU, where generate() swaps in
      batched_mm, one layer's copies of the expert of every (token, expert) pair, which a decode
      step holds (batch x k experts; benchmarks/datasets/h200-cuda/README.md), given by the caller.
    `measured_over_estimate` is the measured peak over their sum: on a GPU the allocator's peak
    against weights, cache and activations (process_bytes None: the host's RSS is not that
    memory), on the CPU the peak RSS against all four."""
    from models.op_profile import prefill_peak_activation_bytes

    try:
        first, per_sample = prefill_peak_activation_bytes(spec, shape.signature_seq_length)
    except Exception as exc:  # a model the meta-device trace cannot run: the timed row stands without it
        return {"activation_bytes": None, "estimated_peak_bytes": None, "measured_peak_bytes": measured_peak_bytes,
                "activation_method": f"not traced: {type(exc).__name__}: {str(exc)[:200]}"}
    traced = (first + per_sample * (batch_size - 1)) * element_bytes / 4
    activations = max(int(traced) - prefill_cache.total_bytes, 0)
    parts = {"process_bytes": process_bytes, "weights_bytes": weight_bytes, "kv_cache_bytes": cache.total_bytes,
             "activation_bytes": activations, "expert_copy_bytes": expert_copy_bytes}
    known = weight_bytes is not None
    estimate = sum(v for v in parts.values() if v is not None) if known else None
    return {**parts, "estimated_peak_bytes": estimate, "measured_peak_bytes": measured_peak_bytes,
            "measured_over_estimate": measured_peak_bytes / estimate if estimate and measured_peak_bytes else None,
            "activation_method": "meta-device trace of the prefill forward (models.op_profile.prefill_peak_activation_bytes), "
                                 "the prompt's cache taken out"}
