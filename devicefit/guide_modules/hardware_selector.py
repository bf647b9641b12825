"""Guide name (002) for devicefit.select.selector."""
from devicefit.select.selector import HardwareSelector, SelectionError

__all__ = ["HardwareSelector", "SelectionError"]
