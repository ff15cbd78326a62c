"""trident.sched."""
