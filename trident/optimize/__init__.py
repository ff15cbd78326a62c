"""Memory-constrained Bayesian optimisation of per-operator knobs."""
from trident.optimize.safe_bo import SafeBayesOpt, Suggestion
from trident.optimize.space import KnobSpace, Knobs, Observation

__all__ = ["KnobSpace", "Knobs", "Observation", "SafeBayesOpt", "Suggestion"]
