"""trident.model."""
