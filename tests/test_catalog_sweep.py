"""Every catalog model builds, gets valid inputs and is measured on this CPU (slow: ~5 min)."""
import pytest

from benchmark_runners.harness import TimingPolicy
from benchmark_runners.records import BenchmarkConfig
from benchmark_runners.sweep import run_sweep
from models.catalog import swept_catalog_names

pytestmark = pytest.mark.slow


def test_every_catalog_model_measures_on_cpu():
    policy = TimingPolicy(ci_target=0.05, min_iterations=3, max_time_s=1.0, warmup_max_time_s=1.0)
    rows = run_sweep([BenchmarkConfig(name, policy=policy) for name in swept_catalog_names()])
    failed = {r.model: r.error for r in rows if r.status != "ok"}
    assert not failed, failed
    for r in rows:
        assert r.p50_ms > 0 and r.forward_flops_per_sample > 0 and r.parameters > 0


def test_training_on_a_small_model_of_each_modality():
    policy = TimingPolicy(ci_target=0.05, min_iterations=3, max_time_s=1.0, warmup_max_time_s=1.0)
    names = ["bert-tiny", "mobilenet-v2", "whisper-tiny", "clip-vit-base-patch32", "t5-small"]
    rows = run_sweep([BenchmarkConfig(n, mode="training", batch_size=2, policy=policy) for n in names])
    failed = {r.model: r.error for r in rows if r.status != "ok"}
    assert not failed, failed
    assert all(r.backward_ms > 0 for r in rows)
