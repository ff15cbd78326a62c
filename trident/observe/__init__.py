"""trident.observe."""
