"""Observation: sustainable-throughput samples from operator snapshots."""
from trident.core.observe.filters import FilterResult, Rejection, ThroughputSample, hampel_mask, state_rejection, sustainable_samples, to_sample

__all__ = ["FilterResult", "Rejection", "ThroughputSample", "hampel_mask", "state_rejection", "sustainable_samples", "to_sample"]
