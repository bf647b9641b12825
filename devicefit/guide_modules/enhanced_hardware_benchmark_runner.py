"""Guide name (002) for devicefit.benchmark_runner."""
from devicefit.benchmark_runner import BenchmarkRunnerError, EnhancedHardwareBenchmarkRunner

__all__ = ["BenchmarkRunnerError", "EnhancedHardwareBenchmarkRunner"]
