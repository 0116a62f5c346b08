"""The quotas API: clusters, flavors, tiers and a tenant's quotas with their push state."""
