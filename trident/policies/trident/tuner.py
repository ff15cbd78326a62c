"""The batch-size tuner: memory-constrained Bayesian optimisation of the bottleneck's batch size,
once the allocation is settled and a memory limit is known."""
from __future__ import annotations

from trident.model.features import device_type_of
from trident.model.threads import single_threaded
from trident.plan.milp import PlacementProblem, throughput_of
from trident.policies.trident import estimates
from trident.policies.trident.problem import remaining_s, utilisation
from trident.policies.trident.records import ConfigKey, Estimate, key_of
from trident.policies.trident.settings import TridentSettings
from trident.policies.trident.tracking import OperatorTrack
from trident.types import OperatorSnapshot, OperatorTarget, Snapshot


def next_batch_size(snap: Snapshot, ops: list[OperatorSnapshot], problem: PlacementProblem,
                    rates: dict[str, Estimate], tracks: dict[str, OperatorTrack], settings: TridentSettings,
                    seed: int) -> tuple[OperatorTarget, str] | None:
    """The bottleneck's next batch size to try (target, reason), or ``None``: no limit, too
    little work left, no measured bottleneck with trials left, or converged (then its trials
    are spent for this regime)."""
    limit = problem.memory_limit_bytes
    if settings.bo_trials == 0 or limit is None:
        return None
    left_s = remaining_s(snap, problem, tracks)
    if left_s is not None and left_s < settings.bo_min_remaining_s:
        return None
    util = utilisation(problem, throughput_of(problem, problem.current))
    cands = [o for o in ops if o.config.kind == "actor" and o.config.batch_size and o.config.replicas
             and rates[o.name].source in ("measured", "busy time") and tracks[o.name].bo_tried < settings.bo_trials]
    if not cands:
        return None
    o = max(cands, key=lambda c: util.get(c.name, 0.0))
    if util.get(o.name, 0.0) < max(util.values()) - 1e-9:
        return None
    from trident.optimize.safe_bo import SafeBayesOpt
    from trident.optimize.space import KnobSpace, Knobs, Observation

    tr = tracks[o.name]
    b, n, dev = o.config.batch_size, o.config.replicas, device_type_of(o.config)
    # larger batches raise throughput until memory runs out; smaller ones measured before stay candidates
    tried = {r.key.batch_size for r in tr.rates if r.key.device == dev and r.key.num_gpus == o.config.num_gpus
             and r.key.batch_size}
    batches = tuple(sorted({b, b * 2, b * 4} | tried))
    others = sum(estimates.heap(tracks[x.name], key_of(x.config), settings) * (x.config.replicas or 0)
                 for x in ops if x.name != o.name and x.name in tracks)
    if others >= limit or not tr.heap:
        return None
    obs = []
    for bb in batches:
        key = ConfigKey(bb, dev, o.config.num_gpus)
        r = estimates.rate(tr, o, key, settings).rows_per_s if key in tr.heap else None
        if r and (key == key_of(o.config) or len(tr.measured(key)) >= settings.min_rate_windows):
            obs.append(Observation(knobs=Knobs(bb, n, dev), throughput_rows_per_s=r * n,
                                   memory_per_replica_bytes=tr.heap[key]))
    if not any(ob.knobs.batch_size == b for ob in obs):
        return None
    bo = SafeBayesOpt(space=KnobSpace(batch_sizes=batches, concurrencies=(n,), device_types=(dev,)),
                      memory_limit_bytes=float(limit), initial=Knobs(b, n, dev), seed=seed,
                      fixed_memory_bytes=float(others))
    with single_threaded():
        sug = bo.suggest(obs)
    if sug.knobs.batch_size == b:
        tr.bo_tried = settings.bo_trials  # converged on the current batch size for this regime
        return None
    tr.bo_tried += 1
    reason = (f"tune {o.name} batch_size {b} -> {sug.knobs.batch_size} "
              f"({'best safe' if sug.converged else f'trial {tr.bo_tried}/{settings.bo_trials}'}): {sug.reason}")
    return OperatorTarget(name=o.name, batch_size=sug.knobs.batch_size), reason
