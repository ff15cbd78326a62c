"""trident.detect."""
