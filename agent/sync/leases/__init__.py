"""Dataset leases: the versions this node's pods mount stay in the cache while they run."""
