"""The ``trident`` pipeline policy (see :mod:`trident.policies.trident.policy`)."""
from trident.control.policy import POLICIES
from trident.policies.trident.policy import TridentPolicy
from trident.policies.trident import estimates
from trident.policies.trident.settings import TridentSettings

POLICIES.register("trident", TridentPolicy)

__all__ = ["TridentPolicy", "TridentSettings"]
