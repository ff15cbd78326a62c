"""Task-operator concurrency caps that trident can raise and lower while the execution runs.

Appended to ``executor._backpressure_policies``: an operator may start another task only
while fewer than its cap are running. Raising a cap above the one the user configured also
lifts Ray Data's own cap (``ConcurrencyCapBackpressurePolicy`` and the operator's
``_max_concurrency``), which are restored when trident steps back.
"""
from __future__ import annotations

from typing import Any

from ray.data._internal.execution.backpressure_policy import BackpressurePolicy


class TaskConcurrencyCap(BackpressurePolicy):
    """Per-operator caps on running tasks; operators without a cap are not limited here."""

    @property
    def name(self) -> str:
        return "TridentTaskConcurrencyCap"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.caps: dict[Any, int] = {}
        self.enabled = True

    def can_add_input(self, op: Any) -> bool:
        if not self.enabled:
            return True
        cap = self.caps.get(op)
        try:
            return cap is None or op.metrics.num_tasks_running < cap
        except Exception:  # never fail the executor from a backpressure check
            return True


class StockCaps:
    """Ray Data's own cap of each task operator, saved so trident can lift and restore it."""

    def __init__(self, executor: Any) -> None:
        self.executor = executor
        self.saved: dict[Any, Any] = {}

    def _stock_policies(self) -> list[Any]:
        return [p for p in self.executor._backpressure_policies if hasattr(p, "_concurrency_caps")]

    def lift(self, op: Any, cap: int) -> None:
        if op not in self.saved:
            self.saved[op] = (getattr(op, "_max_concurrency", None),
                              [(p, p._concurrency_caps.get(op)) for p in self._stock_policies()])
        op._max_concurrency = cap
        for p in self._stock_policies():
            p._concurrency_caps[op] = float(cap)

    def restore(self) -> None:
        for op, (max_conc, per_policy) in self.saved.items():
            op._max_concurrency = max_conc
            for p, value in per_policy:
                if value is None:
                    p._concurrency_caps.pop(op, None)
                else:
                    p._concurrency_caps[op] = value
        self.saved.clear()
