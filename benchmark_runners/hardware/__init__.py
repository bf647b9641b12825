"""Hardware detection: what this machine has, what devicefit can measure on it, and how fast
its devices really are (a short probe). Nothing is guessed: absent platforms say why."""
from benchmark_runners.hardware.inventory import HardwareInventory, detect_hardware
from benchmark_runners.hardware.platforms import PlatformInfo

__all__ = ["HardwareInventory", "PlatformInfo", "detect_hardware"]
