"""The shared core: records, errors, units, the policy protocol, solver and models. Pure: no Ray."""

__version__ = "0.1.0"
