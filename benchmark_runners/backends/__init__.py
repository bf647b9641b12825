"""Backends: how a model is loaded in a precision and stepped once. One module per backend,
each implementing `base.Backend`; `benchmark_runners/registry.py` lists them."""
from benchmark_runners.backends.base import Backend, PreparedModel, TimedStep

__all__ = ["Backend", "PreparedModel", "TimedStep"]
