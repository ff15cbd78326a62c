"""Memory-constrained Bayesian optimisation of per-operator knobs."""
from trident.core.optimize.safe_bo import SafeBayesOpt, Suggestion
from trident.core.optimize.space import KnobSpace, Knobs, Observation

__all__ = ["KnobSpace", "Knobs", "Observation", "SafeBayesOpt", "Suggestion"]
