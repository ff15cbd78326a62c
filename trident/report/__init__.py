"""trident.report."""
