"""One way to solve trident's MILPs (PuLP models): pick the solver, solve with a time limit,
read the solver's real status.

HiGHS runs in process (``highspy``), CBC is the fallback when HiGHS is not installed or
fails; neither prints a banner. A solve returns ``'optimal'``, ``'feasible'`` (a solution
exists, optimality not proven: time or node limit) or ``None`` (no solution), together with
the solver that produced it and a short note.
"""
from __future__ import annotations

from dataclasses import dataclass

from trident.core.errors import ConfigError

SOLVERS = ("highs", "cbc")


@dataclass(frozen=True)
class Outcome:
    """``status``: 'optimal', 'feasible' or None; ``solver``: the one that answered;
    ``infeasible``: the solver proved that no solution exists (``status`` is None)."""

    status: str | None
    solver: str
    note: str = ""
    infeasible: bool = False


def pick(solver: str | None) -> str:
    """``'highs'`` / ``'cbc'`` as asked, or HiGHS when ``highspy`` is installed (``None``)."""
    if solver not in (None, *SOLVERS):
        raise ConfigError("solver", solver, "'highs', 'cbc' or None")
    if solver is None:
        import pulp

        return "highs" if pulp.HiGHS().available() else "cbc"
    return solver


def solve(prob, *, solver: str | None = None, time_limit_s: float, gap_rel: float | None = None,
          start: dict | None = None, threads: int | None = 1) -> Outcome:
    """Solve the PuLP problem ``prob``; ``start`` (variable -> value) warm-starts HiGHS.

    ``threads`` applies to CBC only: HiGHS's thread pool is process-wide and asking for a
    count other than the one it started with fails the solve."""
    if not time_limit_s > 0:
        raise ConfigError("time_limit_s", time_limit_s, "seconds > 0")
    name = pick(solver)
    if name == "highs":
        try:
            status, infeasible = _highs(prob, time_limit_s, gap_rel, start)
            return Outcome(status, "highs", infeasible=infeasible)
        except Exception as exc:  # a broken HiGHS must not stop the caller: CBC answers instead
            note = f"HiGHS failed ({type(exc).__name__}: {exc}); CBC used"
            return _cbc(prob, time_limit_s, gap_rel, threads, note)
    return _cbc(prob, time_limit_s, gap_rel, threads)


def _highs(prob, time_limit_s: float, gap_rel: float | None, start: dict | None) -> tuple[str | None, bool]:
    import highspy

    kw = {"msg": False, "timeLimit": time_limit_s, "mip_heuristic_run_feasibility_jump": False}
    if gap_rel is not None:
        kw["gapRel"] = gap_rel
    prob.solve(_warm_highs()(start=start, **kw))
    model = prob.solverModel
    st = model.getModelStatus()
    if st == highspy.HighsModelStatus.kOptimal:
        return "optimal", False
    has_solution = model.getInfo().primal_solution_status == 2  # kSolutionStatusFeasible
    limits = (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kInterrupt,
              highspy.HighsModelStatus.kIterationLimit, highspy.HighsModelStatus.kSolutionLimit)
    return ("feasible" if has_solution and st in limits else None), st == highspy.HighsModelStatus.kInfeasible


def _cbc(prob, time_limit_s: float, gap_rel: float | None, threads: int | None, note: str = "") -> Outcome:
    import pulp

    kw = {"msg": False, "timeLimit": time_limit_s}
    if gap_rel is not None:
        kw["gapRel"] = gap_rel
    if threads:
        kw["threads"] = threads
    prob.solve(pulp.PULP_CBC_CMD(**kw))
    # CBC reports "Optimal" after a time limit (pulp#649): the solution status tells the truth.
    if prob.sol_status == pulp.LpSolutionOptimal:
        return Outcome("optimal", "cbc", note)
    if prob.sol_status == pulp.LpSolutionIntegerFeasible:
        return Outcome("feasible", "cbc", note)
    return Outcome(None, "cbc", note, infeasible=prob.status == pulp.LpStatusInfeasible)


def _warm_highs():
    """``pulp.HiGHS`` that hands HiGHS a starting solution (pulp has no warm start for it)."""
    import numpy as np
    import pulp

    class WarmHiGHS(pulp.HiGHS):
        def __init__(self, *, start: dict | None, **kw) -> None:
            super().__init__(**kw)
            self.start = start or {}

        def createAndConfigureSolver(self, lp) -> None:
            silence_banner()
            super().createAndConfigureSolver(lp)

        def callSolver(self, lp) -> None:
            if self.start:
                idx = np.array([v.index for v in self.start], dtype=np.int32)
                lp.solverModel.setSolution(len(idx), idx, np.array(list(self.start.values()), dtype=float))
            lp.solverModel.run()

    return WarmHiGHS


_BANNER_SHOWN = False


def silence_banner() -> None:
    """HiGHS prints its banner to the process's stdout when the first model is created, before
    any option can be set: create that first one with stdout pointed at /dev/null."""
    global _BANNER_SHOWN
    if _BANNER_SHOWN:
        return
    import os
    import sys

    try:
        import highspy
    except ImportError:
        return

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    _BANNER_SHOWN = True
