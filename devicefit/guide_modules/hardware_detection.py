"""Guide name (003) for devicefit.hardware_detection."""
from devicefit.hardware_detection import HardwareDetectionError, HardwareDetector, detect_available_hardware

__all__ = ["HardwareDetectionError", "HardwareDetector", "detect_available_hardware"]
