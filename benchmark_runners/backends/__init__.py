"""Backends: how a model is loaded in a precision and stepped once. One module per backend."""
from benchmark_runners.backends.torch_backend import TorchBackend

BACKENDS = {"torch": TorchBackend()}

__all__ = ["BACKENDS", "TorchBackend"]
