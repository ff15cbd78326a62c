"""trident: Ray Data pipelines fast and OOM-free without hand tuning; a GPU cluster shared well.

``trident.autoscale`` controls any Ray Data pipeline executed inside it; ``trident.sim``
replays cluster traces through the job layer's policies. Heavy modules load lazily.
"""
from __future__ import annotations

from importlib import import_module

from trident.core import __version__
from trident.core.errors import ConfigError, TridentError, UnknownNameError

_LAZY = {
    "autoscale": ("trident.autoscaler.api", "autoscale"),
    "Run": ("trident.autoscaler.api", "Run"),
    "JobScheduler": ("trident.jobs.scheduler", "JobScheduler"),
    "JobState": ("trident.jobs.scheduler", "JobState"),
    "sim": ("trident.sim", None),
}

__all__ = ["autoscale", "Run", "JobScheduler", "JobState", "sim", "TridentError", "ConfigError", "UnknownNameError",
           "__version__"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'trident' has no attribute {name!r}")
    module, attr = _LAZY[name]
    mod = import_module(module)
    if module == "trident.autoscaler.api" and mod.join_arbiter is None:
        mod.join_arbiter = _join_arbiter
    return mod if attr is None else getattr(mod, attr)


def _join_arbiter(run):
    """Every ``trident.autoscale`` block joins the cluster's arbiter (the job layer's)."""
    from trident.jobs.arbiter.link import join

    return join(run)
