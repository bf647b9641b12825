"""The generation scenario: requests of prompt + new tokens, every token timed, the KV cache
computed from the config; on tiny real models of each generating architecture."""
import pytest

from benchmark_runners.generation import (
    DEFAULT_NEW_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    RequestTiming,
    generation_figures,
    generation_reason,
    kv_cache,
    request_shape,
)
from benchmark_runners.measure import ConfigMeasurer
from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
from models.resolve import resolve_model


def config(model, **kw):
    from tests.conftest import FAST_POLICY

    return BenchmarkConfig(model=str(model), policy=FAST_POLICY, **kw)


@pytest.fixture(scope="module")
def measurer():
    return ConfigMeasurer("test-run", {"suite": "pytest"}, {"cpu": {"name": "test cpu", "fingerprint": "cpu-test"}})


def test_kv_cache_of_gpt2_matches_the_hand_computation():
    """The docstring's hand check: 12 layers x 2 (key, value) x 12 heads x 64 x (256 + 63)
    positions x batch 1 x 4 bytes."""
    cfg = resolve_model("gpt2").config
    cache = kv_cache(cfg, 1, 256, 64, 4)
    assert cache.total_bytes == 12 * 2 * 12 * 64 * (256 + 63) * 1 * 4 == 23_519_232
    assert (cache.layers, cache.kv_heads, cache.head_dim, cache.self_positions, cache.cross_bytes) == (12, 12, 64, 319, 0)
    assert kv_cache(cfg, 4, 256, 64, 2).total_bytes == 23_519_232 * 4 // 2  # linear in batch and bytes


def test_kv_cache_counts_grouped_kv_heads_and_the_cross_attention_of_an_encoder_decoder():
    qwen = resolve_model("qwen2.5-0.5b").config  # 24 layers, 14 query heads sharing 2 KV heads of 64
    assert kv_cache(qwen, 1, 256, 64, 4).total_bytes == 24 * 2 * 2 * 64 * 319 * 4
    t5 = resolve_model("t5-small").config  # 6 decoder layers, 8 heads of d_kv 64
    cache = kv_cache(t5, 1, 256, 64, 4)
    assert cache.self_bytes == 6 * 2 * 8 * 64 * 64 * 4  # the start token + 63 generated, fed back
    assert cache.cross_bytes == 6 * 2 * 8 * 64 * 256 * 4  # over the encoder's 256 positions


def test_tpot_comes_from_the_per_step_gaps_not_from_total_over_n():
    # A request whose decode steps are 10 ms except one 100-ms stall: the median gap is 10 ms,
    # where total / N would say 11.8.
    steps = [10.0] * 6 + [100.0]
    token_ms = [50.0]
    for s in steps:
        token_ms.append(token_ms[-1] + s)
    r = RequestTiming([int(t * 1e6) for t in token_ms], int((token_ms[-1] + 1.0) * 1e6))
    f = generation_figures([r, r], batch_size=2, prompt_tokens=32, new_tokens=8)
    assert f["ttft_ms"] == pytest.approx(50.0)
    assert f["tpot_p50_ms"] == pytest.approx(10.0)
    assert f["tpot_p90_ms"] > f["tpot_p50_ms"]
    decode_s = (token_ms[-1] + 1.0 - 50.0) / 1e3
    assert f["decode_tokens_per_s"] == pytest.approx(2 * 7 / decode_s)
    assert f["prefill_tokens_per_s"] == pytest.approx(2 * 32 / 0.050)
    with pytest.raises(RuntimeError, match="fixed length"):
        generation_figures([RequestTiming([1, 2, 3], 4)], 1, 32, 8)


def test_which_models_generate_and_which_requests_are_impossible():
    assert generation_reason(resolve_model("gpt2")) is None
    assert generation_reason(resolve_model("t5-small")) is None
    assert generation_reason(resolve_model("whisper-tiny")) is None
    assert "does not generate" in generation_reason(resolve_model("bert-base-uncased"))
    assert "does not generate" in generation_reason(resolve_model("resnet-18"))
    shape = request_shape(resolve_model("gpt2"), None, None)
    assert (shape.prompt_tokens, shape.new_tokens) == (DEFAULT_PROMPT_TOKENS, DEFAULT_NEW_TOKENS)
    with pytest.raises(ValueError, match="1024 positions"):
        request_shape(resolve_model("gpt2"), 1000, 64)
    with pytest.raises(ValueError, match="audio window"):
        request_shape(resolve_model("whisper-tiny"), 256, None)
    assert request_shape(resolve_model("whisper-tiny"), None, 32).prompt_tokens is None


def test_new_tokens_belong_to_the_generation_scenario_and_keep_older_keys():
    with pytest.raises(ValueError, match="generation scenario"):
        BenchmarkConfig(model="gpt2", new_tokens=8)
    with pytest.raises(ValueError, match="at least 2"):
        BenchmarkConfig(model="gpt2", mode="generation", new_tokens=1)
    base = BenchmarkConfig(model="gpt2", mode="generation")
    assert base.key() != BenchmarkConfig(model="gpt2", mode="generation", new_tokens=32).key()
    # A config without new tokens keys as it did before the field existed.
    import hashlib
    import json

    ident = {k: v for k, v in base.to_json().items() if k not in ("timeout_s", "policy", "isa", "new_tokens")}
    assert base.key() == hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("modality,prompt", [("causal", 16), ("seq2seq", 16), ("audio_features", None)])
def test_generation_rows_time_every_token_of_every_request(measurer, tiny_models, modality, prompt):
    r = measurer.run(config(tiny_models[modality], mode="generation", batch_size=2, seq_length=prompt, new_tokens=8))
    assert r.status == "ok", r.error
    assert r.new_tokens == 8 and r.prompt_tokens == prompt
    assert len(r.token_times_ms) == r.iterations == len(r.samples_ms)
    for request, total in zip(r.token_times_ms, r.samples_ms):
        assert len(request) == 8  # fixed length: no early end-of-sequence
        assert request == sorted(request) and request[-1] <= total * 1.05 + 0.5
    assert 0 < r.ttft_ms < r.p50_ms
    assert 0 < r.tpot_p50_ms <= r.tpot_p90_ms
    assert r.decode_tokens_per_s > 0 and r.kv_cache_bytes > 0
    assert r.forward_tokens_per_s is None  # a request is not one forward pass
    assert r.backend_config["generation"]["max_new_tokens"] == r.backend_config["generation"]["min_new_tokens"] == 8
    assert r.output_check["problem"] is None  # the logits of a forward over the prompt
    assert BenchmarkResult.from_json(r.to_json()) == r


def test_a_model_that_does_not_generate_is_skipped_with_the_reason(measurer, tiny_models):
    r = measurer.run(config(tiny_models["text"], mode="generation", new_tokens=4))
    assert r.status == "skipped" and r.reason_code == "unsupported"
    assert "does not generate" in r.error


def test_decode_tokens_per_second_is_far_below_the_forward_pass_rate_at_the_same_prompt(measurer, tiny_models):
    """The two rates the old `tokens_per_s` confused, side by side and by name: one forward pass
    over the whole prompt processes tokens in parallel; decode makes one token per step."""
    forward = measurer.run(config(tiny_models["causal"], batch_size=1, seq_length=32))
    generation = measurer.run(config(tiny_models["causal"], mode="generation", batch_size=1, seq_length=32, new_tokens=16))
    assert forward.status == generation.status == "ok"
    assert forward.forward_tokens_per_s == pytest.approx(forward.throughput_samples_per_s * 32)
    assert generation.decode_tokens_per_s < forward.forward_tokens_per_s / 3
    assert generation.decode_tokens_per_s < generation.prefill_tokens_per_s / 3


def test_rows_written_before_the_rename_keep_their_forward_rate():
    old = BenchmarkResult.from_json({"run_id": "r", "config_key": "k", "status": "ok", "model": "m", "backend": "torch",
                                     "device": "cpu", "precision": "fp32", "mode": "inference", "batch_size": 1,
                                     "timestamp": "2026-01-01T00:00:00+00:00", "tokens_per_s": 1234.5})
    assert old.forward_tokens_per_s == 1234.5


def test_migration_16_renames_the_forward_rate_and_keeps_the_natural_key(tmp_path):
    """A store of version 15 keeps its rows' `tokens_per_s` as forward_tokens_per_s, gains the
    generation columns, and its natural key still refuses a second copy of a row."""
    import duckdb

    from devicefit import store

    with duckdb.connect(str(tmp_path / "old.duckdb")) as con:
        for version in range(1, 16):
            for step in store.MIGRATIONS[version]:
                step(con) if callable(step) else con.execute(step)
            con.execute("INSERT INTO schema_version VALUES (?, now())", [version])
        insert = ("INSERT INTO measurements (source_key, run_id, config_key, status, model, backend, device, device_kind, "
                  "precision, mode, batch_size, tokens_per_s) VALUES ('s', 'r', 'k', 'ok', 'm', 'torch', 'cpu', 'cpu', "
                  "'fp32', 'inference', 1, 4321.0)")
        con.execute(insert)
        assert store.migrate(con) == list(range(16, store.SCHEMA_VERSION + 1))
        assert con.execute("SELECT forward_tokens_per_s, ttft_ms, kv_cache_bytes FROM measurements").fetchall() == [(4321.0, None, None)]
        columns = {c for (c,) in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'measurements'").fetchall()}
        assert "tokens_per_s" not in columns and set(store.MEASUREMENT_COLUMNS) <= columns
        with pytest.raises(duckdb.ConstraintException):
            con.execute(insert.replace("'s', 'r'", "'s2', 'r'").replace("tokens_per_s", "forward_tokens_per_s"))


def test_a_landing_row_of_an_older_version_loads_its_rate_under_the_new_name():
    from devicefit.landing_schema import ResultRow

    base = {"run_id": "r", "config_key": "k", "status": "ok", "model": "m", "backend": "torch", "device": "cpu",
            "precision": "fp32", "mode": "inference", "batch_size": 1, "timestamp": "2026-01-01T00:00:00+00:00"}
    assert ResultRow.model_validate({**base, "tokens_per_s": 99.0}).forward_tokens_per_s == 99.0
    with pytest.raises(ValueError, match="same figure"):
        ResultRow.model_validate({**base, "tokens_per_s": 99.0, "forward_tokens_per_s": 98.0})


def test_multi_query_attention_holds_one_kv_head_and_bounds_are_enforced():
    falcon = resolve_model("falcon-7b").config  # multi_query: 71 query heads share one key/value head
    assert kv_cache(falcon, 1, 256, 64, 2).kv_heads == 1
    assert kv_cache(falcon, 1, 256, 64, 2).total_bytes == 32 * 2 * 1 * 64 * 319 * 2
    spec = resolve_model("t5-small")  # no position limit: the bounds are devicefit's
    for new in (0, 1, -5, 10**9):
        with pytest.raises(ValueError, match="new tokens"):
            request_shape(spec, None, new)
    with pytest.raises(ValueError, match="prompt"):
        request_shape(spec, 0, None)


def test_configs_differing_only_in_new_tokens_are_distinct_inputs_and_models(measurer, tiny_models):
    """A worker that measured 4 new tokens must not reuse that generation setting for 6, and
    the two rows are different inputs to the store (the aggregates never mix them)."""
    from benchmark_runners.backends.torch_backend import TorchBackend

    short, long = (config(tiny_models["causal"], mode="generation", seq_length=8, new_tokens=n) for n in (4, 6))
    assert TorchBackend().loaded_key(short) != TorchBackend().loaded_key(long)
    a, b = measurer.run(short), measurer.run(long)
    assert a.status == b.status == "ok", (a.error, b.error)
    assert [len(t) for t in a.token_times_ms] == [4] * a.iterations and [len(t) for t in b.token_times_ms] == [6] * b.iterations
    assert a.input["dims"]["new_tokens"] == 4 and b.input["dims"]["new_tokens"] == 6


def test_the_memory_breakdown_names_its_parts_and_compares_them_with_the_peak(measurer, tiny_models):
    r = measurer.run(config(tiny_models["causal"], mode="generation", batch_size=2, seq_length=16, new_tokens=4))
    assert r.status == "ok", r.error
    b = r.memory_breakdown
    assert b["weights_bytes"] == r.weight_bytes and b["kv_cache_bytes"] == r.kv_cache_bytes
    assert b["process_bytes"] == r.rss_before_load_bytes and b["activation_bytes"] >= 0
    assert b["estimated_peak_bytes"] == b["process_bytes"] + b["weights_bytes"] + b["kv_cache_bytes"] + b["activation_bytes"]
    assert b["measured_peak_bytes"] == r.peak_rss_bytes
    assert b["measured_over_estimate"] == pytest.approx(r.peak_rss_bytes / b["estimated_peak_bytes"])
    assert b["expert_copy_bytes"] == 0  # a dense model on the CPU: no batched_mm copies


def test_a_gpu_decode_of_a_mixture_of_experts_names_the_batched_expert_copies():
    """The part is the caller's (measure.py: batch x k x one layer's expert, on a GPU) and counts
    in the estimate; checked on the 4-layer Mixtral config's arithmetic, traced on meta."""
    from benchmark_runners.generation import kv_cache, memory_breakdown, request_shape
    from models.analysis import routed_expert_bytes
    from models.resolve import resolve_model

    spec = resolve_model("benchmarks/configs/mixtral-8x7b-4layers.json")
    assert routed_expert_bytes(spec, "bf16") == pytest.approx(3 * 4096 * 14336 * 2, rel=1e-9)
    shape = request_shape(spec, 256, 64)
    cache, prefill = kv_cache(spec.config, 4, 256, 64, 2), kv_cache(spec.config, 4, 256, 1, 2)
    copies = int(4 * 2 * routed_expert_bytes(spec, "bf16"))
    b = memory_breakdown(spec, shape, 4, 2, 12 * 2**30, cache, prefill, None, 15 * 2**30, copies)
    assert b["expert_copy_bytes"] == copies and b["estimated_peak_bytes"] == 12 * 2**30 + cache.total_bytes + b["activation_bytes"] + copies
