"""Guide name (000) for devicefit.client."""
from devicefit.client import HardwareSelectionClient

__all__ = ["HardwareSelectionClient"]
