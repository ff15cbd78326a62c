"""trident.core.plan."""
