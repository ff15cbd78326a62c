"""Which ``trident.autoscale`` run controls a Ray Data execution planned right now.

Ray Data instantiates execution callbacks when it plans an execution, from the classes in
the dataset's own ``DataContext`` (a copy taken when the dataset was built) plus those named
in ``RAY_DATA_EXECUTION_CALLBACKS`` (read at planning time). trident registers through the
environment variable, so datasets built before the ``with`` are covered too. The variable
holds trident's callback while at least one run is active; the callback picks the innermost
run active in the planning thread, else the innermost run of any thread.
"""
from __future__ import annotations

import os
import threading
from typing import Any

ENV_VAR = "RAY_DATA_EXECUTION_CALLBACKS"
CALLBACK_PATH = "trident.autoscaler.shim.callback.TridentExecutionCallback"


class TridentRuntimeWarning(RuntimeWarning):
    """trident stepped back (observe-only, stock Ray) for part of a run; the run record says why."""


_lock = threading.RLock()
_active: list[Any] = []
_local = threading.local()


def _stack() -> list[Any]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def _set_env(enabled: bool) -> None:
    entries = [e.strip() for e in os.environ.get(ENV_VAR, "").split(",") if e.strip()]
    entries = [e for e in entries if e != CALLBACK_PATH]
    if enabled:
        entries.append(CALLBACK_PATH)
    if entries:
        os.environ[ENV_VAR] = ",".join(entries)
    else:
        os.environ.pop(ENV_VAR, None)


def activate(run: Any) -> None:
    with _lock:
        _active.append(run)
        _stack().append(run)
        _set_env(True)


def deactivate(run: Any) -> None:
    with _lock:
        if run in _active:
            _active.remove(run)
        stack = _stack()
        if run in stack:
            stack.remove(run)
        if not _active:
            _set_env(False)


def current_run() -> Any | None:
    """The run that controls an execution planned in this thread now, or ``None``."""
    with _lock:
        stack = _stack()
        if stack:
            return stack[-1]
        return _active[-1] if _active else None


def active_runs() -> list[Any]:
    with _lock:
        return list(_active)
