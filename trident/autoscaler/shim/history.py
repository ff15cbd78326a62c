"""One execution's link to the history store (:mod:`trident.history`): its operators' keys, what
earlier runs taught of them (read at install, handed to the controller), and what this run
taught (kept when it ends). Any failure of the store is one warning and a run without history."""
from __future__ import annotations

import time
from typing import Any

from trident.history.fingerprint import cluster_parts, operator_key
from trident.history.lessons import learn
from trident.core.model.prior import OperatorPrior
from trident.history.store import HistoryStore, HistoryUnavailable


def run_label(execution_id: str, unix_s: float | None = None) -> str:
    """A short name for a run in decisions and reports: when it began and its execution's suffix."""
    return time.strftime("%m-%d %H:%M", time.localtime(unix_s)) + "/" + execution_id.rsplit("-", 1)[-1]


class ExecutionHistory:
    def __init__(self, store: HistoryStore, keys: dict[str, str], pipeline: str) -> None:
        self.store = store
        self.keys = keys
        """Operator name -> key (task and actor operators)."""
        self.pipeline = pipeline
        self.priors: dict[str, OperatorPrior] = {}

    @classmethod
    def open(cls, shim: Any) -> "ExecutionHistory | None":
        """The execution's history, its priors read (``None`` without a store)."""
        path = shim.config.history_path
        if path is None:
            return None
        cluster = cluster_parts(shim.builder.cluster.view(shim.now_s()))
        keys = {shim.names.by_op[op]: operator_key(op, shim.names.by_op[op], cluster)
                for op, kind in shim.kinds.items() if kind in ("task", "actor")}
        hist = cls(HistoryStore(path), keys, pipeline=" -> ".join(shim.names.by_op[op] for op in shim.kinds))
        try:
            hist.priors = hist.store.priors(keys)
        except HistoryUnavailable as exc:
            shim.run._warn_once("history", f"trident's history is unavailable ({exc}); this run starts blind")
        if hist.priors:
            runs = sorted({p.run for p in hist.priors.values()})
            shim._event("history", f"history of {len(hist.priors)} of {len(keys)} operators, from run(s) "
                                   f"{', '.join(runs)}: " + "; ".join(
                                       f"{n} ({p.runs} run(s))" for n, p in sorted(hist.priors.items())))
        return hist

    def keep(self, shim: Any) -> None:
        """Keep what this execution taught (a failure is one warning)."""
        rec = shim.record
        lessons = learn(rec.snapshots, rec.decisions, run=run_label(shim.execution_id))
        if not lessons:
            return
        try:
            kept = self.store.add(lessons, self.keys, pipeline=self.pipeline)
            shim._event("history", f"kept what {kept} operators taught in {self.store.path}")
        except HistoryUnavailable as exc:
            shim.run._warn_once("history", f"trident's history could not be written ({exc}); "
                                           "the next run starts blind")
