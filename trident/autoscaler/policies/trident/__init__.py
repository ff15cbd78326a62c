"""The ``trident`` pipeline policy (see :mod:`trident.autoscaler.policies.trident.policy`)."""
from trident.core.policy import POLICIES
from trident.autoscaler.policies.trident.policy import TridentPolicy
from trident.autoscaler.policies.trident import estimates
from trident.autoscaler.policies.trident.settings import TridentSettings

POLICIES.register("trident", TridentPolicy)

__all__ = ["TridentPolicy", "TridentSettings"]
