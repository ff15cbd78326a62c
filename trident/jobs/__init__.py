"""The job layer: job policies, placers and preemptors, and their registries.

Importing this package registers the built-in plug-ins (see ``trident.jobs.base``).
"""
from trident.jobs import baselines, history_order, placement, placement_milp, preempt, rltune  # noqa: F401  (register built-ins)
from trident.jobs.base import (JOB_POLICIES, PLACERS, PREEMPTORS, Allocation, ArrivalPredictor,
                                CapacityView, EwmaArrivalPredictor, Job, JobPolicy, JobView, Node,
                                Placer, PreemptDecision, Preemptor, SchedState, Verdict)

__all__ = ["JOB_POLICIES", "PLACERS", "PREEMPTORS", "Allocation", "ArrivalPredictor", "CapacityView",
           "EwmaArrivalPredictor", "Job", "JobPolicy", "JobView", "Node", "Placer", "PreemptDecision",
           "Preemptor", "SchedState", "Verdict"]
