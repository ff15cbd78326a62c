"""The job layer: job policies, placers and preemptors, and their registries.

Importing this package registers the built-in plug-ins (see ``trident.sched.base``).
"""
from importlib import import_module
from importlib.util import find_spec

from trident.sched import baselines, placement  # noqa: F401  (register built-ins)
from trident.sched.base import (JOB_POLICIES, PLACERS, PREEMPTORS, Allocation, ArrivalPredictor,
                                CapacityView, EwmaArrivalPredictor, Job, JobPolicy, JobView, Node,
                                Placer, PreemptDecision, Preemptor, SchedState, Verdict)

# Plug-ins with optional heavy parts register themselves when their module is present.
for _module in ("trident.sched.preempt", "trident.sched.placement_milp", "trident.sched.rltune"):
    if find_spec(_module) is not None:
        import_module(_module)

__all__ = ["JOB_POLICIES", "PLACERS", "PREEMPTORS", "Allocation", "ArrivalPredictor", "CapacityView",
           "EwmaArrivalPredictor", "Job", "JobPolicy", "JobView", "Node", "Placer", "PreemptDecision",
           "Preemptor", "SchedState", "Verdict"]
