"""The simulator's cluster is the job layer's capacity bookkeeping (:mod:`trident.jobs.capacity`)."""
from trident.jobs.capacity import Cluster

__all__ = ["Cluster"]
