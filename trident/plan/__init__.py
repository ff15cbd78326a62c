"""trident.plan."""
