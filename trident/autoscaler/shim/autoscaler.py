"""The actor autoscaler trident puts in place of Ray Data's (``executor._actor_autoscaler``)."""
from __future__ import annotations

import time
from typing import Any

from ray.data._internal.actor_autoscaler import ActorAutoscaler


class TridentActorAutoscaler(ActorAutoscaler):
    """Drives actor pools toward trident's targets; hands over to the stock autoscaler it
    replaced once the execution falls back to stock Ray Data."""

    def __init__(self, stock: ActorAutoscaler, shim: Any) -> None:
        super().__init__(stock._topology, stock._resource_manager)
        self.stock = stock
        self.shim = shim

    def try_trigger_scaling(self) -> None:
        if not self.shim.controlling:
            self.stock.try_trigger_scaling()
            return
        t0 = time.perf_counter()
        try:
            self.shim.drive_pools()
        except Exception as exc:
            self.shim.fail_open(exc, where="driving actor pools")
            self.stock.try_trigger_scaling()
        self.shim.record.shim_time_s += time.perf_counter() - t0
