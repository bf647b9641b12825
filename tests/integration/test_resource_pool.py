"""The ResourcePool: cache hits return the same object, low-memory mode evicts least recently
used models under its budget, idle models are freed after the timeout, and an absent device is
refused with detection's reason."""
import time

import pytest
import torch

from devicefit.resource_pool import DeviceUnavailable, ResourcePool, get_global_resource_pool, model_bytes

MB = 2**20


def linear(mb: float) -> torch.nn.Module:
    n = int((mb * MB / 4) ** 0.5)
    return torch.nn.Linear(n, n, bias=False)


def test_a_cache_hit_returns_the_same_object_and_counts():
    pool = ResourcePool(low_memory=False)
    built = []

    def make():
        built.append(1)
        return linear(1)

    first = pool.get_model("embedding", "tiny", make, {"device": "cpu"})
    again = pool.get_model("embedding", "tiny", make, {"device": "cpu"})
    assert first is again and len(built) == 1
    stats = pool.stats()
    assert (stats["hits"], stats["misses"], stats["hit_rate"]) == (1, 1, 0.5)
    assert stats["models"][0]["device"] == "cpu" and stats["models"][0]["memory_mb"] == pytest.approx(model_bytes(first) / MB)
    assert next(first.parameters()).device.type == "cpu"


def test_openvino_requests_keep_the_torch_model_on_the_cpu():
    pool = ResourcePool(low_memory=False)
    pool.get_model("vision", "m", lambda: linear(1), {"device": "openvino"})
    assert pool.stats()["models"][0]["device"] == "cpu" and "stays on the cpu device that openvino runs on" in pool.stats()["models"][0]["placement"]


def test_an_absent_device_is_refused_with_the_reason():
    if torch.cuda.is_available():
        pytest.skip("CUDA is present here")
    pool = ResourcePool(low_memory=False)
    with pytest.raises(DeviceUnavailable, match="cuda requested, but .*"):
        pool.get_model("vision", "m", lambda: linear(1), {"device": "cuda"})
    with pytest.raises(DeviceUnavailable, match="not one a torch model"):
        pool.get_model("vision", "m", lambda: linear(1), {"device": "tpu"})
    assert pool.stats()["models"] == []


def test_low_memory_mode_evicts_the_least_recently_used_under_the_budget():
    pool = ResourcePool(low_memory=True, memory_budget_mb=10)
    a = pool.get_model("f", "a", lambda: linear(4), {"device": "cpu"})
    pool.get_model("f", "b", lambda: linear(4), {"device": "cpu"})
    assert pool.get_model("f", "a", lambda: linear(4), {"device": "cpu"}) is a  # a is now the most recent
    pool.get_model("f", "c", lambda: linear(4), {"device": "cpu"})  # 12 MB > 10: b goes, not a
    stats = pool.stats()
    assert [m["name"] for m in stats["models"]] == ["a", "c"] and stats["evictions"] == 1
    assert stats["memory_mb"] <= 10
    assert any("evicted" in e and "b on cpu" in e for e in stats["events"])


def test_a_model_larger_than_the_budget_is_kept_and_said(monkeypatch):
    monkeypatch.setenv("RESOURCE_POOL_LOW_MEMORY", "1")
    monkeypatch.setenv("RESOURCE_POOL_MEMORY_BUDGET_MB", "2")
    pool = ResourcePool()
    assert pool.low_memory and pool.memory_budget_mb == 2
    pool.get_model("f", "big", lambda: linear(4), {"device": "cpu"})
    assert [m["name"] for m in pool.stats()["models"]] == ["big"]
    assert any("exceeds the 2 MB budget" in e for e in pool.stats()["events"])


def test_idle_models_expire_after_the_timeout():
    now = [100.0]
    pool = ResourcePool(low_memory=False, idle_timeout_s=30, clock=lambda: now[0])
    pool.get_model("f", "old", lambda: linear(1), {"device": "cpu"})
    now[0] += 20
    pool.get_model("f", "new", lambda: linear(1), {"device": "cpu"})
    now[0] += 15  # old idle 35 s, new 15 s
    assert pool.cleanup_idle() == ["old"]
    assert [m["name"] for m in pool.stats()["models"]] == ["new"] and pool.stats()["expired"] == 1
    pool.close()


def test_the_reaper_thread_frees_idle_models_on_its_own():
    pool = ResourcePool(low_memory=False, idle_timeout_s=0.2)
    pool.get_model("f", "m", lambda: linear(1), {"device": "cpu"})
    deadline = time.monotonic() + 5
    while pool.stats()["models"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.stats()["models"] == [] and pool.stats()["expired"] == 1
    pool.close()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="budget"):
        ResourcePool(low_memory=True, memory_budget_mb=0)
    with pytest.raises(ValueError, match="timeout"):
        ResourcePool(idle_timeout_s=-1)


def test_the_global_pool_is_one_object():
    assert get_global_resource_pool() is get_global_resource_pool()
