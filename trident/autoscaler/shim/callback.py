"""The Ray Data execution callback through which trident enters every execution.

Ray Data creates one instance per execution when it plans it (see
:mod:`trident.autoscaler.shim.session` for how the class is registered). Each instance belongs to
the run active at planning time and owns its own :class:`ExecutionShim`, so executions
running at the same time never share state. Nothing raised here reaches Ray Data: the
execution falls back to stock Ray Data instead.
"""
from __future__ import annotations

import time
from typing import Any

from ray.data._internal.execution.execution_callback import ExecutionCallback

from trident.autoscaler.shim.session import current_run


class TridentExecutionCallback(ExecutionCallback):
    def __init__(self) -> None:
        self.run = current_run()
        self.shim: Any = None

    def before_execution_starts(self, executor: Any) -> None:
        if self.run is None or self.run._closed:
            return
        try:
            from trident.autoscaler.shim.shim import ExecutionShim

            self.shim = ExecutionShim(self.run, executor)
        except Exception as exc:
            self.run._record_error(f"starting trident for an execution: {type(exc).__name__}: {exc}")
            return
        try:
            self.shim.install()
        except Exception as exc:
            self.shim.fail_open(exc, where="installing trident")

    def on_execution_step(self, executor: Any) -> None:
        if self.shim is None:
            return
        t0 = time.perf_counter()
        try:
            self.shim.on_step()
        except Exception as exc:
            self.shim.fail_open(exc, where="observing or applying a plan")
        self.shim.record.shim_time_s += time.perf_counter() - t0

    def after_execution_succeeds(self, executor: Any) -> None:
        self._finish("succeeded")

    def after_execution_fails(self, executor: Any, error: Exception) -> None:
        self._finish("failed")

    def _finish(self, status: str) -> None:
        if self.shim is None:
            return
        try:
            self.shim.finish(status)
        except Exception as exc:
            self.shim.record.status = status
            self.shim.fail_open(exc, where="finishing the execution record")
