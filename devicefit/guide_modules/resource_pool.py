"""Guide name (003) for devicefit.resource_pool."""
from devicefit.resource_pool import DeviceUnavailable, ResourcePool, get_global_resource_pool

__all__ = ["DeviceUnavailable", "ResourcePool", "get_global_resource_pool"]
