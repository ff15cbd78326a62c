"""Online changepoint detection on per-replica throughput and input row size."""
from trident.core.detect.changepoint import ChangeDetector, ChangeEvent, bic_penalty, robust_sigma

__all__ = ["ChangeDetector", "ChangeEvent", "bic_penalty", "robust_sigma"]
