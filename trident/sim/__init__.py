"""trident.sim."""
