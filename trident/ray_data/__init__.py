"""trident.ray_data."""
