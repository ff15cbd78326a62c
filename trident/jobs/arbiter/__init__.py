"""The arbiter: one per Ray cluster, it divides the cluster between the runs of every driver.

:mod:`~trident.jobs.arbiter.state` and :mod:`~trident.jobs.arbiter.divide` are pure;
:mod:`~trident.jobs.arbiter.actor` holds them in a detached, named Ray actor.
"""
from trident.jobs.arbiter.divide import PREEMPTION, Budget
from trident.jobs.arbiter.state import ArbiterState, Claim, Progress, Refused

__all__ = ["PREEMPTION", "ArbiterState", "Budget", "Claim", "Progress", "Refused"]
