"""The trace caches are bounded (sequence lengths come from requests) and compute each key once
however many threads ask for it."""
import threading
import time

import pytest

from models.bounded_cache import BoundedCache


def test_least_recently_used_entries_go_first():
    cache = BoundedCache(2)
    cache.get("a", lambda: 1)
    cache.get("b", lambda: 2)
    cache.get("a", lambda: pytest.fail("a is cached"))
    cache.get("c", lambda: 3)
    assert "a" in cache and "c" in cache and "b" not in cache and len(cache) == 2


def test_racing_threads_compute_a_key_once():
    cache, calls = BoundedCache(4), []

    def compute():
        calls.append(1)
        time.sleep(0.05)
        return "traced"

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("m", compute))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["traced"] * 8 and len(calls) == 1


def test_a_failed_compute_is_not_cached():
    cache = BoundedCache(2)
    with pytest.raises(RuntimeError):
        cache.get("k", lambda: (_ for _ in ()).throw(RuntimeError("trace failed")))
    assert "k" not in cache and cache.get("k", lambda: 5) == 5


def test_the_trace_caches_are_bounded():
    from devicefit.predict import features
    from models import op_profile

    for cache in (op_profile._profiles, op_profile._training_peaks, features._points):
        assert isinstance(cache, BoundedCache) and cache.maxsize == op_profile.TRACE_CACHE_SIZE
