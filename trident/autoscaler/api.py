"""``trident.autoscale``: control every Ray Data execution inside a ``with`` block.

    with trident.autoscale(policy="ds2", memory_limit="16GiB") as run:
        ds.write_parquet(out_dir)
    run.report()

Input is validated when ``autoscale`` is called, before Ray is touched. Ray is first used
when an execution starts (the controller actor is created then), so ``ray.init`` may come
before or inside the block.
"""
from __future__ import annotations

import datetime as _dt
import os
import threading
import time
import warnings
from typing import Any, Callable

from trident.autoscaler.config import AutoscaleConfig
from trident.core import __version__
from trident.report.metrics import count_event
from trident.report.record import Event, ExecutionRecord, RunRecord, summarize


join_arbiter: Callable[["Run"], Any] | None = None
"""Seats a run at the cluster's arbiter and returns its link (``stop()`` leaves); the job layer's
:func:`trident.jobs.arbiter.link.join`, set by the package's face (``import trident``)."""


class Run:
    """One ``trident.autoscale`` block: its configuration, controller and record.

    Use :meth:`report`, :meth:`summary`, :meth:`to_json` and :meth:`plot` after the block.
    A run may be entered again; each block adds its executions to the same record.
    """

    def __init__(self, config: AutoscaleConfig) -> None:
        self.config = config
        self.record = RunRecord(policy=config.policy_name, config=_config_dict(config), started_at="",
                                trident_version=__version__)
        self._lock = threading.RLock()
        self._origin = time.perf_counter()
        self._controller: Any = None
        self._controller_dead = False
        self._warned: set[str] = set()
        self._closed = True
        self._depth = 0
        self.gpu_budget: float | None = None
        """The most GPUs this run's pipelines may hold (``None``: the cluster's); see :meth:`set_gpu_budget`."""
        self.share: Any = None
        """The budget the cluster's arbiter gives this run (a :class:`~trident.jobs.arbiter.Budget`;
        ``None``: no cap, the run is alone or not joined), set by :mod:`trident.jobs.arbiter.link`."""
        self._link: Any = None
        self.cold_starting = False
        """Whether a GPU actor pool of the running execution has actors still starting (observed)."""
        self.rewarm_s: float | None = None
        """Seconds the last GPU actors took from requested to running (observed cold start)."""

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> "Run":
        from trident.autoscaler.shim import session

        with self._lock:
            if self._depth == 0:
                if not self.record.started_at:
                    self._origin = time.perf_counter()
                    self.record.started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
                self._closed = False
                self._join_arbiter()
            self._depth += 1
        session.activate(self)
        return self

    def __exit__(self, *exc: object) -> None:
        from trident.autoscaler.shim import session

        session.deactivate(self)
        with self._lock:
            self._depth -= 1
            if self._depth > 0:
                return
            self._closed = True
            self.record.ended_at_s = self._now_s()
            controller, self._controller = self._controller, None
            link, self._link = self._link, None
        if link is not None:
            link.stop()
        # Nothing trident does at the end may raise: the user's own exception, if any, stays theirs.
        if controller is not None and not self._controller_dead:
            from trident.autoscaler.controller.actor import release_controller

            try:
                release_controller(controller)
            except Exception as err:
                self._warn_once("release", f"keeping the controller for the next run failed: {err!r}")
        if self.config.log_dir:
            try:
                self._write_log_dir(self.config.log_dir)
            except Exception as err:
                self._warn_once("log_dir", f"writing the run's logs to {self.config.log_dir!r} failed: {err!r}")

    def _join_arbiter(self) -> None:
        """Take a seat at the cluster's arbiter (:data:`join_arbiter`, see :mod:`trident.jobs.arbiter.link`),
        unless the run observes only (``dry_run``, the ``ray`` policy) or ``arbiter=False``."""
        c = self.config
        if join_arbiter is None or not c.arbiter or c.dry_run or c.policy_name == "ray":
            return
        self._link = join_arbiter(self)

    def set_gpu_budget(self, gpus: float | None) -> None:
        """Cap the GPUs this run's pipelines hold, live (``None`` lifts the cap). Lowering it drains
        actors (every row is still processed once); raising it lets the pools grow back. The
        policy sees the budget as the cluster's GPUs (:class:`~trident.core.types.ClusterView`)."""
        from trident.core.errors import ConfigError

        if gpus is not None and not (isinstance(gpus, (int, float)) and gpus >= 0):
            raise ConfigError("gpus", gpus, "None or a number of GPUs >= 0")
        with self._lock:
            self.gpu_budget = None if gpus is None else float(gpus)

    # -- the record, for users -------------------------------------------------------------

    def report(self, *, file: Any = None, echo: bool = True) -> str:
        """The per-operator timeline and every decision with its reason; printed unless ``echo=False``."""
        from trident.report.timeline import format_report

        text = format_report(self.record)
        if echo:
            print(text, file=file)
        return text

    def summary(self) -> dict[str, Any]:
        """Figures for a benchmark row: ``wall_s``, ``rows``, ``throughput_rows_per_s``,
        ``reconfigurations``, ``failed_tasks`` (per operator), ``target_reach_s``, ... (see docs/autoscale.md)."""
        return summarize(self.record)

    def to_json(self, path: str) -> None:
        self.record.to_json(path)

    def plot(self, path: str) -> None:
        from trident.report.plot import plot_run

        plot_run(self.record, path)

    def _repr_html_(self) -> str:
        """A short summary for Jupyter: policy, wall time, rows, plans and fallbacks."""
        import html

        s = self.summary()
        cells = [("policy", s["policy"]), ("executions", s["executions"]),
                 ("wall time", f"{s['wall_s']:.1f} s" if "wall_s" in s else "running"),
                 ("rows", "not measured" if s["rows"] is None else s["rows"]),
                 ("throughput", f"{s['throughput_rows_per_s']:.3g} rows/s" if "throughput_rows_per_s" in s else "-"),
                 ("decisions / plans", f"{s['decisions']} / {s['plans']}"),
                 ("reconfigurations", s["reconfigurations"]),
                 ("failed tasks", sum(s["failed_tasks"].values())),
                 ("fallbacks", len(s["fallbacks"]) + (s["controller_failure"] is not None))]
        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
                       for k, v in cells)
        return (f"<b>trident.Run</b><table>{rows}</table>"
                "<small>run.report() for every decision, run.plot(path) for the timeline</small>")

    @property
    def executions(self) -> list[ExecutionRecord]:
        return self.record.executions

    # -- used by the shim (any executor thread) --------------------------------------------

    def _now_s(self) -> float:
        return time.perf_counter() - self._origin

    def _begin_execution(self, execution_id: str, dataset_id: str) -> ExecutionRecord:
        import ray

        with self._lock:
            if self.record.ray_version is None:
                self.record.ray_version = ray.__version__
            rec = ExecutionRecord(execution_id=execution_id, dataset_id=dataset_id, started_at_s=self._now_s(),
                                  started_at_unix_s=time.time())
            self.record.executions.append(rec)
            return rec

    def _controller_client(self) -> Any:
        """A client for this run's controller actor (started on first use), or ``None`` once it died."""
        from trident.autoscaler.controller.actor import ControllerClient, acquire_controller
        from trident.core.policy import PolicyContext

        with self._lock:
            if self._controller_dead:
                return None
            if self._controller is None:
                ctx = PolicyContext(memory_limit_bytes=self.config.memory_limit_bytes, seed=self.config.seed,
                                    dry_run=self.config.dry_run, memory_scope=self.config.memory_scope)
                self._controller = acquire_controller(policy=self.config.policy, context=ctx)
            handle = self._controller
        return ControllerClient(handle, timeout_s=self.config.controller_timeout_s, clock_origin_s=self._origin)

    def _controller_failed(self, failure: Any) -> None:
        with self._lock:
            if not self._controller_dead:
                self._controller_dead = True
                self.record.events.append(Event(failure.time_s, "controller_failed", failure.reason))
                self._warn_once("controller", f"trident's controller failed ({failure.reason}); "
                                              "the pipeline continues on stock Ray Data")

    def _record_error(self, message: str) -> None:
        with self._lock:
            self.record.events.append(Event(self._now_s(), "fallback", message))
        count_event("", "fallback")
        self._warn_once("error:" + message, f"trident stepped back: {message}")

    def _warn_once(self, key: str, message: str) -> None:
        from trident.autoscaler.shim.session import TridentRuntimeWarning

        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
            self.record.warnings.append(message)
        warnings.warn(message, TridentRuntimeWarning, stacklevel=2)

    def _write_log_dir(self, log_dir: str) -> None:
        os.makedirs(log_dir, exist_ok=True)
        stem = os.path.join(log_dir, "trident-run")
        self.to_json(stem + ".json")
        with open(stem + ".txt", "w") as f:
            f.write(self.report(echo=False) + "\n")
        self.plot(stem + ".png")


def _config_dict(config: AutoscaleConfig) -> dict[str, Any]:
    import dataclasses

    return {**dataclasses.asdict(config), "policy": config.policy_name}


def autoscale(*, policy: Any = "trident", memory_limit: object = None, interval_s: float = 1.0,
              dry_run: bool = False, log_dir: str | None = None, seed: int = 0,
              controller_timeout_s: float = 60.0, start_slots: int | None = None,
              history: object = True, memory_scope: str = "ray", arbiter: bool = True, name: str | None = None,
              owner: str | None = None, priority: int | str = 0) -> Run:
    """Control every Ray Data execution run inside the returned context manager.

    ``policy``: a registered policy name (``"trident"``, ``"ds2"``, ``"static"``, ``"ray"``), or a
    policy factory ``factory(context=PolicyContext) -> Policy`` (it must be picklable).
    ``memory_limit``: the memory Ray may use on the driver's machine (bytes or ``"16GiB"``); the
    ``trident`` policy plans the actor pools within what Ray's other processes (daemons, idle and
    task workers) leave of it, with ``TridentSettings.memory_margin_ray`` over their heap
    (``memory_scope="workers"``: the limit covers the pipeline's workers alone).
    ``interval_s``: seconds between snapshots (>= 0.05). ``dry_run``: decide and record, change nothing.
    ``log_dir``: write ``trident-run.{json,txt,png}`` there when the block ends (created and
    checked for writing now; a failure to write at the end is a warning, never an exception).
    ``seed``: the policy's RNG seed. ``start_slots``: actors started side by side at most (default:
    the cores of the cluster's hosts; actors starting together share them).
    ``history``: keep what each operator taught across runs and plan the next run's start from it
    (``True``: the default store, ``TRIDENT_HISTORY`` or the user's cache folder; a path; ``False``:
    start blind and keep nothing). See ``trident history``.
    ``arbiter``: share the cluster with the runs of every other driver through its arbiter
    (``trident status`` shows them): alone, a run plans on the whole cluster; beside others, within
    the budget the arbiter gives it. ``name`` (default: the script and process id), ``owner``
    (default: the user) and ``priority`` (a class, higher first: an integer, or ``"low"``,
    ``"medium"`` (0), ``"high"`` as Ray Data names them) are what the arbiter knows it by.
    Raises :class:`~trident.core.errors.ConfigError` on bad input.
    """
    return Run(AutoscaleConfig.from_user(policy=policy, memory_limit=memory_limit, interval_s=interval_s,
                                         dry_run=dry_run, log_dir=log_dir, seed=seed,
                                         controller_timeout_s=controller_timeout_s, start_slots=start_slots,
                                         history=history, memory_scope=memory_scope, arbiter=arbiter, name=name,
                                         owner=owner, priority=priority))
