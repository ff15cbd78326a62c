"""The simulator's cluster is the job layer's capacity bookkeeping (:mod:`trident.sched.capacity`)."""
from trident.sched.capacity import Cluster

__all__ = ["Cluster"]
