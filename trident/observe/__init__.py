"""Observation: sustainable-throughput samples from operator snapshots."""
from trident.observe.filters import FilterResult, Rejection, ThroughputSample, hampel_mask, sustainable_samples

__all__ = ["FilterResult", "Rejection", "ThroughputSample", "hampel_mask", "sustainable_samples"]
