"""A least-recently-used cache whose values are computed once per key, however many threads ask.

Traces and model points are keyed by (model, sequence length). A server that accepts any
sequence length up to a model's limit would otherwise keep one trace per length it was ever
asked for: memory without bound, on a client's say-so. The cache keeps `maxsize` entries, and a
thread asking for a key another thread is computing waits for that result instead of tracing
again (a trace of a large model costs a second of CPU).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class BoundedCache(Generic[V]):
    def __init__(self, maxsize: int):
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self._guard = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}

    def __contains__(self, key: Hashable) -> bool:
        with self._guard:
            return key in self._values

    def __len__(self) -> int:
        with self._guard:
            return len(self._values)

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        with self._guard:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            lock = self._computing.setdefault(key, threading.Lock())
        with lock:
            with self._guard:
                if key in self._values:
                    return self._values[key]
            try:
                value = compute()
            except BaseException:
                with self._guard:
                    self._computing.pop(key, None)  # not cached: the next caller tries again
                raise
            with self._guard:
                self._values[key] = value
                while len(self._values) > self.maxsize:
                    self._values.popitem(last=False)
                self._computing.pop(key, None)
            return value

    def clear(self) -> None:
        with self._guard:
            self._values.clear()
