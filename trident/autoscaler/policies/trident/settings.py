"""Every threshold of the ``trident`` policy, named and documented (seconds, fractions, counts)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from trident.core.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class TridentSettings:
    """How often and how cautiously the policy acts."""

    # --- the inner loop (every step, Ray's reactive rule within the planner's bounds) --------
    upscale_util: float = 1.75
    """Tasks in flight per actor slot at or above which a pool grows (Ray Data's default)."""
    downscale_util: float = 0.5
    """Tasks in flight per actor slot at or below which a pool shrinks by one (Ray Data's default)."""
    downscale_debounce_s: float = 10.0
    """Seconds after a pool grew during which it does not shrink (Ray Data's
    ``_ACTOR_POOL_SCALE_DOWN_DEBOUNCE_PERIOD_S``): on the PDF demo the inner loop cut OCR 2 -> 1
    5 s after it grew, as the scanned pages arrived, and the plan restarted it 10 s later."""
    # --- the outer planner ---------------------------------------------------------------------
    pay_margin: float = 2.0
    """A plan's predicted saving on the work left must be this many times its cost (cold starts
    it pays): the PDF demo's plan OCR 2 -> 3 saved a predicted 2.9 s for 2.8 s and lost 10 s."""
    plan_interval_s: float = 5.0
    """Seconds between two looks at the plan when nothing changed."""
    min_dwell_s: float = 15.0
    """Seconds a finished rollout stands before another plan, unless the data changed."""
    dwell_cold_starts: float = 3.0
    """The dwell in cold starts of the slowest operator, when longer than ``min_dwell_s``."""
    hysteresis: float = 0.10
    """Throughput gain a new plan needs over the current one."""
    near_gain_looks: int = 3
    """Looks in a row that find a better plan under the hysteresis after which the planner takes
    it all the same, if it pays for its cold starts (a gain that holds look after look is no
    noise: generated seed 61 kept a plan 8-9% below the best for 130 s)."""
    horizon_s: float = 600.0
    """Seconds over which a cold start is amortised (shortened by the remaining work when known)."""
    plan_work_left: bool = True
    """Size each operator for the rows it has left (its queue included), not for the rate of the
    operators before it alone (see :func:`trident.autoscaler.policies.trident.problem.work_left`)."""
    rate_window_s: float = 5.0
    """Seconds per throughput measurement."""
    max_rate_window_s: float = 60.0
    """Longest a measurement waits for the rows of a busy operator's long batch (seconds)."""
    min_rate_windows: int = 3
    """Measurements of a configuration after which its median rate replaces the busy-time rate."""
    history_weight: float = 3.0
    """Windows an earlier run's rate counts as, beside this run's first ones (it falls with every
    measure far off it: :class:`~trident.core.model.prior.Belief`)."""
    min_busy_s: float = 0.5
    """Busy replica-seconds of finished tasks needed before a busy-time rate is planned with."""
    refit_interval_s: float = 120.0
    """Seconds between GP refits of one operator (and after each change)."""
    history: int = 240
    """Snapshots per operator kept for the filters and models."""
    memory_margin: float = 0.15
    """Relative margin over the largest heap per replica observed."""
    memory_margin_ray: float = 0.6
    """The margin where the memory limit covers every Ray process on the machine (its scope
    ``"ray"``: a node's or container's limit, the kernel's to enforce). There a replica killed
    over it is restarted by Ray Data and its tasks retried on it, so a pool over the limit
    cannot be drained while its tasks run, and what the margin must cover is larger: a heap
    that grows with the data (the PDF demo's OCR held 508 MiB per replica on text pages, 807 on
    scanned ones) and Ray's other processes, read as the most so far (343 -> 1,245 MiB over
    the video demo as task workers came)."""
    stable_heap_samples: int = 20
    """Heap samples of one configuration after which a third of the margin is kept."""
    default_cold_start_s: float = 10.0
    """Cold start of an actor before one was observed."""
    solver_time_limit_s: float = 0.5
    """Wall-clock limit of one MILP solve (the plan is checked for feasibility either way)."""
    mismatch_shortfall: float = 0.2
    """A plan's output this fraction below its prediction, ``mismatch_windows`` rate windows in a row
    once its targets are reached, is a mismatch: its cause is named and the planner looks again."""
    mismatch_windows: int = 2
    bin_packing_max_nodes: int = 64
    """Up to this many live nodes a plan is packed node by node (each replica whole on one node);
    above it, identical nodes are planned as ``count x capacity``."""
    solver_retries: int = 2
    """Looks the planner takes again at the very next step after a solve that found no plan (else
    it waits ``plan_interval_s``): on a busy machine the time limit can pass before HiGHS has any
    plan (on two-types twice in a row at 0.5 s, and the type move waited 5 s for the next look)."""
    solver_retry_growth: float = 3.0
    """Factor on the time limit per solve in a row that found no plan (0.5, 1.5, 4.5 s by default)."""
    # --- rollouts -------------------------------------------------------------------------------
    stuck_intervals: int = 2
    """Steps a pool may stand still short of its target (plus the cold start once an actor is
    pending) before the obstacle is looked for and the plan redone."""
    rollout_timeout_s: float = 120.0
    """Most seconds a rollout phase waits, whatever moves."""
    ceiling_hold_s: float = 30.0
    """Seconds a pool that could not reach its planned size is planned at no more than it
    reached (then the planner may try again: what blocked it may be gone)."""
    # --- accelerator types -----------------------------------------------------------------------
    explore_types: bool = False
    """Pin unpinned GPU pools to each accelerator type in turn to measure them there (off by
    default: on the scenario suite a rolling update per type cost more than it gained while
    other pools competed for the same type)."""
    explore_windows: int = 2
    """Rate windows a GPU pool needs on each accelerator type before the planner chooses its type."""
    explore_min_remaining_s: float = 90.0
    """Remaining work (seconds at the current rate) below which no type is explored."""
    explore_cold_starts: float = 16.0
    """Remaining work, in the pool's own cold starts, below which the bottleneck is not moved to
    measure it on another type: the move, its windows there and, where the type is slower, a move
    back cost about two cold starts, and a faster type must pay that back over the work left."""
    # --- batch size and regimes ------------------------------------------------------------------
    bo_trials: int = 3
    """Batch sizes the optimiser may try per operator and regime (0 disables it)."""
    bo_min_remaining_s: float = 60.0
    """Remaining work (seconds at the current rate) below which no batch size is tried."""
    bo_min_batches: float = 8.0
    """Batches per replica the work left must hold at a new batch size for the pool to move to
    it: the last round of batches leaves replicas idle, and larger batches make it longer. On
    the video benchmark batch 2 of OCR on 5 replicas would have left 2.5 batches per replica
    (24 SD clips in three rounds of 10 s where batch 1 takes five of 5 s)."""
    bo_trial_cold_starts: float = 2.0
    """What a batch-size trial costs, in cold starts of the operator: it is tried only when the
    relative gain the optimiser expects of it, times the work left (seconds), is at least that."""
    bo_batch_growth: float = 4.0
    """Largest factor over the batch sizes measured that a trial may take (the optimiser's trust
    region). Memory per replica is bounded above by the measured value times the batch ratio (a
    fixed part plus a part at most proportional to the batch), which holds at any ratio; the trust
    region guards against memory that grows faster than the batch. At 4 the batch-size scenario
    reaches batch 32 from the user's 8 in one trial on fewer replicas, then adds replicas, instead
    of two swaps of the whole pool (8 -> 16 -> 32)."""
    bo_swap: bool = True
    """Try a batch size also when the pool's GPUs or the memory limit leave no room for new
    replicas beside the old ones, by swapping old replicas for new ones half the pool at a time
    (task operators held at their running tasks meanwhile, so that the CPUs the old replicas
    leave wait for the new ones). Off: such a batch is not tried."""
    min_change: float = 0.10
    """Relative shift a changepoint needs to start a new regime (smaller ones are noise)."""
    shift_ratio: float = 1.5
    """Factor off its median a configuration's rate must be, ``shift_windows`` windows in a row,
    to end the regime at once (a fast check beside the changepoint detector)."""
    shift_windows: int = 2
    """Windows in a row for the fast regime check."""
    shift_confirm_s: float = 2.0
    """Seconds a window lasts once the window before it was off by ``shift_ratio`` (a finished
    task still needed): a shift is confirmed without waiting another full rate window."""
    shift_ratio_alone: float = 3.0
    """Factor off the median of at least ``min_rate_windows`` steady windows (and three times
    further off, in log terms, than any of them) at which one window ends the regime alone (it
    must be ``shift_ratio`` off as well)."""
    sudden_tasks: int = 4
    """Finished tasks the last ``shift_confirm_s`` seconds of a rate window need to close it early
    when their rate is already ``shift_ratio_alone`` off (a sudden shift is acted on without
    waiting for the rest of ``rate_window_s``, or for a second window after a blurred one)."""

    def for_scope(self, memory_scope: str) -> "TridentSettings":
        """The settings to plan with under a memory limit of ``memory_scope``: the wider margin
        (``memory_margin_ray``) where it covers every Ray process on the machine."""
        if memory_scope != "ray":
            return self
        return replace(self, memory_margin=max(self.memory_margin, self.memory_margin_ray))

    def __post_init__(self) -> None:
        for name in ("plan_interval_s", "rate_window_s", "max_rate_window_s", "refit_interval_s",
                     "solver_time_limit_s", "rollout_timeout_s", "horizon_s", "min_busy_s", "ceiling_hold_s",
                     "shift_confirm_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, getattr(self, name), "a number of seconds > 0")
        if not 0 < self.downscale_util < self.upscale_util:
            raise ConfigError("downscale_util/upscale_util", (self.downscale_util, self.upscale_util),
                              "0 < downscale_util < upscale_util")
        if self.shift_ratio <= 1 or self.shift_windows < 1 or self.shift_ratio_alone <= 1:
            raise ConfigError("shift_ratio/shift_windows/shift_ratio_alone",
                              (self.shift_ratio, self.shift_windows, self.shift_ratio_alone),
                              "> 1, >= 1, > 1")
        if not 0 < self.mismatch_shortfall < 1 or self.mismatch_windows < 1:
            raise ConfigError("mismatch_shortfall/mismatch_windows", (self.mismatch_shortfall, self.mismatch_windows),
                              "a fraction in (0, 1) and an integer >= 1")
        if self.bin_packing_max_nodes < 0 or self.near_gain_looks < 0:
            raise ConfigError("bin_packing_max_nodes/near_gain_looks", (self.bin_packing_max_nodes,
                              self.near_gain_looks), "integers >= 0 (near_gain_looks 0: never)")
        if self.solver_retries < 0 or self.solver_retry_growth < 1:
            raise ConfigError("solver_retries/solver_retry_growth", (self.solver_retries, self.solver_retry_growth),
                              ">= 0, >= 1")
        if self.bo_batch_growth < 1:
            raise ConfigError("bo_batch_growth", self.bo_batch_growth, "a number >= 1")
        if self.bo_trial_cold_starts < 0 or self.bo_min_batches < 0:
            raise ConfigError("bo_trial_cold_starts/bo_min_batches", (self.bo_trial_cold_starts, self.bo_min_batches),
                              "numbers >= 0")
        if (self.min_dwell_s < 0 or self.dwell_cold_starts < 0 or self.hysteresis < 0 or self.memory_margin < 0
                or self.memory_margin_ray < 0):
            raise ConfigError("min_dwell_s/dwell_cold_starts/hysteresis/memory_margin/memory_margin_ray",
                              (self.min_dwell_s, self.dwell_cold_starts, self.hysteresis, self.memory_margin,
                               self.memory_margin_ray), "numbers >= 0")
        if (self.min_rate_windows < 1 or self.history < 20 or self.bo_trials < 0 or self.stable_heap_samples < 1
                or self.stuck_intervals < 1 or self.sudden_tasks < 1):
            raise ConfigError("min_rate_windows/history/bo_trials/stable_heap_samples/stuck_intervals/sudden_tasks",
                              (self.min_rate_windows, self.history, self.bo_trials, self.stable_heap_samples,
                               self.stuck_intervals, self.sudden_tasks), ">= 1, >= 20, >= 0, >= 1, >= 1, >= 1")
