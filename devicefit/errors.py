"""devicefit's error base (defined in models.errors, the bottom layer, so models/ and
benchmark_runners/ raise it too). Import it from here in product code."""
from models.errors import DevicefitError, Interrupted

__all__ = ["DevicefitError", "Interrupted"]
