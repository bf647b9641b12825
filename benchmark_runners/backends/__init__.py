"""Backends: how a model is loaded in a precision and stepped once. One module per backend."""
from benchmark_runners.backends.openvino_backend import OpenVINOBackend
from benchmark_runners.backends.torch_backend import TorchBackend

BACKENDS = {"torch": TorchBackend(), "openvino": OpenVINOBackend()}

__all__ = ["BACKENDS", "OpenVINOBackend", "TorchBackend"]
