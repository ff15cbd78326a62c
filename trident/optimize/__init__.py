"""trident.optimize."""
