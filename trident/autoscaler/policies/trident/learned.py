"""What mismatches taught the ``trident`` policy, kept for its next plans (:mod:`.check`): the CPUs
or GPUs its actors could be placed on, while the cluster's nodes stay as they were and no operator
finishes, and the size beyond which a saturated pool puts out no more, until its data changes.
Pure: no Ray, no clock."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from trident.autoscaler.policies.trident.check import Mismatch
from trident.core.plan.placement import PlacementProblem
from trident.core.types import Snapshot, cluster_shape


@dataclass
class Learned:
    caps: dict[str, tuple[float, tuple]] = field(default_factory=dict)
    """``cpus`` / ``gpus`` -> (the most a plan may use, the cluster it was learned on)."""
    saturated: dict[str, int] = field(default_factory=dict)
    """Pool -> the replicas beyond which it put out no more."""

    def learn(self, mismatch: Mismatch, snap: Snapshot) -> None:
        for cause in mismatch.causes:
            for name, cap in (("gpus", cause.gpus_cap), ("cpus", cause.cpus_cap)):
                if cap is not None and cap > 0:
                    self.caps[name] = (cap, cluster_shape(snap))
            if cause.ceiling is not None:
                self.saturated[cause.operator] = cause.ceiling

    def data_changed(self, operators: list[str]) -> None:
        for name in operators:
            self.saturated.pop(name, None)

    def room_freed(self, *, cpus: bool, gpus: bool) -> None:
        """An operator that held CPUs (``cpus``) or GPUs (``gpus``) finished, or the room changed:
        the caps on them are forgotten. Each is what the operators running then held beside an
        actor Ray could not place; a finished operator leaves, and with it what split the nodes'
        room (a pool of quarter GPUs spread over four 1-GPU nodes leaves no node for a whole-GPU
        actor until it finishes)."""
        for name, freed in (("cpus", cpus), ("gpus", gpus)):
            if freed:
                self.caps.pop(name, None)

    def caps_on(self, snap: Snapshot) -> dict[str, float]:
        """The caps learned on the cluster ``snap`` sees (others are forgotten)."""
        self.caps = {n: (v, s) for n, (v, s) in self.caps.items() if s == cluster_shape(snap)}
        return {n: v for n, (v, _) in self.caps.items()}

    def within(self, snap: Snapshot) -> Snapshot:
        """``snap`` with the cluster's CPUs and GPUs cut to the caps (they bind Ray's rule too)."""
        caps = self.caps_on(snap)
        if not caps:
            return snap
        c = snap.cluster
        return replace(snap, cluster=replace(c, cpus=min(c.cpus, caps.get("cpus", c.cpus)),
                                             gpus=min(c.gpus, caps.get("gpus", c.gpus))))

    def limit(self, prob: PlacementProblem, snap: Snapshot) -> PlacementProblem:
        """``prob`` within the caps."""
        for name, cap in self.caps_on(snap).items():
            field_name = f"{name}_limit"
            now = getattr(prob, field_name)
            prob = replace(prob, **{field_name: cap if now is None else min(now, cap)})
        return prob
