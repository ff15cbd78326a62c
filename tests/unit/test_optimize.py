"""Memory-constrained BO on synthetic operators with an out-of-memory cliff."""
import numpy as np
import pytest

from trident.core.errors import ConfigError
from trident.core.optimize import KnobSpace, Knobs, Observation, SafeBayesOpt
from trident.core.optimize.safe_bo import warm_up
from trident.core.optimize.synthetic import OomCliffObjective

SPACE = KnobSpace(batch_sizes=(8, 16, 32, 64, 128, 256, 512), concurrencies=tuple(range(1, 13)), device_types=("cpu", "gpu"))
INITIAL = Knobs(16, 2, "cpu")


def _bo(obj, seed=0):
    return SafeBayesOpt(space=SPACE, memory_limit_bytes=obj.memory_limit_bytes, initial=INITIAL, seed=seed,
                        fixed_memory_bytes=obj.fixed_memory_bytes)


def _objective(seed):
    obj = OomCliffObjective.random(np.random.default_rng(seed), SPACE)
    assert obj.is_safe(INITIAL)
    return obj


def test_reaches_the_optimum_without_ever_crossing_the_memory_limit():
    seed = 4
    obj, rng = _objective(seed), np.random.default_rng(100 + seed)
    bo, observations, unsafe = _bo(obj, seed), [], 0
    for _ in range(15):
        s = bo.suggest(observations)
        if s.converged:
            break
        unsafe += not obj.is_safe(s.knobs)
        assert s.reason
        observations.append(obj.evaluate(s.knobs, rng))
    assert unsafe == 0
    _, best_true = obj.optimum(SPACE)
    found = max(obj.throughput_rows_per_s(o.knobs) for o in observations if obj.is_safe(o.knobs))
    assert found >= 0.95 * best_true, (found, best_true)
    # every configuration certified safe really is
    cands = [k for k in SPACE.grid() if k not in {o.knobs for o in observations}]
    upper = bo.memory_upper_bytes(cands, observations)
    certified = [k for k, u in zip(cands, upper) if u <= obj.memory_limit_bytes]
    assert certified and all(obj.is_safe(k) for k in certified)


def test_starts_from_the_known_safe_configuration_and_is_deterministic():
    obj = _objective(1)
    bo = _bo(obj)
    assert bo.suggest([]).knobs == INITIAL
    rng = np.random.default_rng(0)
    obs = [obj.evaluate(k, rng) for k in (INITIAL, Knobs(32, 2, "cpu"))]
    a, b = bo.suggest(obs), _bo(obj).suggest(obs)
    assert a == b and not a.converged
    warm_up()  # fits its own models beside: the suggestion is the same after it
    assert _bo(obj).suggest(obs) == a
    assert a.knobs not in {o.knobs for o in obs}
    if a.knobs.device_type == "gpu":  # an unseen device is only tried at its minimal configuration
        assert a.knobs == SPACE.minimal("gpu")
    else:
        assert a.memory_ucb_bytes is not None and a.memory_ucb_bytes <= obj.memory_limit_bytes


def test_a_new_device_seen_at_its_smallest_configuration_is_climbed_safely():
    # Per row of batch and per replica the GPU's first look (batch 8, 1 replica) beats the CPU
    # at batch 16 x 2 although its raw throughput is lower: the next trial grows the GPU's batch.
    bo = SafeBayesOpt(space=SPACE, memory_limit_bytes=20e9, initial=INITIAL, fixed_memory_bytes=1e9)
    obs = [Observation(INITIAL, 100.0, 2e9), Observation(SPACE.minimal("gpu"), 60.0, 1.5e9)]
    s = bo.suggest(obs)
    assert s.knobs.device_type == "gpu" and s.knobs.batch_size == 16 and s.knobs.concurrency > 1, s
    assert s.memory_ucb_bytes is not None and s.memory_ucb_bytes <= 20e9
    assert s.memory_ucb_bytes == pytest.approx(1e9 + s.knobs.concurrency * 2 * 1.5e9 * 1.03)


def test_no_safe_candidate_keeps_the_best_observation():
    space = KnobSpace(batch_sizes=(8, 16), concurrencies=(1, 2), device_types=("cpu",))
    bo = SafeBayesOpt(space=space, memory_limit_bytes=10e9, initial=Knobs(8, 1, "cpu"))
    obs = [Observation(Knobs(8, 1, "cpu"), 100.0, 6e9)]
    s = bo.suggest(obs)
    assert s.converged and s.knobs == Knobs(8, 1, "cpu") and "safe" in s.reason


def test_memory_bound_grows_with_batch_and_concurrency():
    bo = SafeBayesOpt(space=SPACE, memory_limit_bytes=64e9, initial=INITIAL, fixed_memory_bytes=1e9)
    obs = [Observation(Knobs(16, 2, "cpu"), 50.0, 2e9)]
    u = bo.memory_upper_bytes([Knobs(16, 1, "cpu"), Knobs(16, 4, "cpu"), Knobs(32, 1, "cpu"), Knobs(128, 1, "cpu"), Knobs(8, 1, "gpu")], obs)
    assert u[0] == pytest.approx(1e9 + 2e9 * 1.03)
    assert u[1] == pytest.approx(1e9 + 4 * 2e9 * 1.03)
    assert u[2] == pytest.approx(1e9 + 2 * 2e9 * 1.03)  # at most proportional to the batch
    assert np.isinf(u[3]) and np.isinf(u[4])  # beyond the trust region / unseen device
    lo = bo.memory_lower_bytes([Knobs(8, 3, "cpu"), Knobs(16, 3, "cpu"), Knobs(128, 3, "cpu"), Knobs(8, 3, "gpu")], obs)
    assert lo.tolist() == pytest.approx([1e9, 1e9 + 3 * 2e9 * 0.97, 1e9 + 3 * 2e9 * 0.97, 1e9])  # memory never shrinks with the batch


def test_space_and_optimiser_validate_their_inputs():
    with pytest.raises(ConfigError, match="batch_sizes"):
        KnobSpace(batch_sizes=(16, 8), concurrencies=(1,), device_types=("cpu",))
    with pytest.raises(ConfigError, match="initial"):
        SafeBayesOpt(space=SPACE, memory_limit_bytes=1e9, initial=Knobs(3, 1, "cpu"))
    with pytest.raises(ConfigError, match="memory_per_replica_bytes"):
        Observation(INITIAL, 1.0, 0.0)
    x = SPACE.encode([Knobs(8, 1, "cpu"), Knobs(512, 12, "gpu")])
    assert x.tolist() == [[0, 0, 1, 0], [1, 1, 0, 1]]


def test_two_batches_bound_memory_by_the_secant_not_the_batch_ratio():
    # 1 GiB fixed + 0.1 GiB per row: proportional scaling from batch 16 would allow 5.2 GiB at 32
    bo = SafeBayesOpt(space=SPACE, memory_limit_bytes=64e9, initial=INITIAL)
    one = [Observation(Knobs(16, 1, "cpu"), 50.0, 2.6e9)]
    two = one + [Observation(Knobs(8, 1, "cpu"), 30.0, 1.8e9)]
    u1, u2 = (bo.memory_upper_bytes([Knobs(32, 1, "cpu")], obs)[0] for obs in (one, two))
    assert u1 == pytest.approx(2 * 2.6e9 * 1.03)
    assert u2 < u1 and u2 >= 4.2e9  # the affine truth at 32 is 4.2 GB: the bound stays above it


def test_one_measured_batch_steps_to_the_trust_region_edge_without_a_fit(monkeypatch):
    """Measured at one batch size, the step is the model's (same batch, same goal) but needs no
    fit: a fit costs seconds of CPU while the pipeline's first actors start."""
    from trident.core.optimize import safe_bo

    rng, compared = np.random.default_rng(3), 0
    for _ in range(6):
        b, n = int(rng.choice([4, 8, 16])), int(rng.choice([4, 6, 8]))
        space = KnobSpace(batch_sizes=(b, 2 * b, 4 * b), concurrencies=tuple(range(n // 2, n + 1)), device_types=("gpu",))
        heap, others = rng.uniform(1e8, 8e8), rng.uniform(0, 1e9)
        limit = others + n * heap * rng.uniform(1.2, 4.0)
        obs = [Observation(Knobs(b, c, "gpu"), 10.0 * c, heap) for c in space.concurrencies]
        bo = SafeBayesOpt(space=space, memory_limit_bytes=limit, initial=Knobs(b, n, "gpu"), fixed_memory_bytes=others)
        with monkeypatch.context() as m:
            m.setattr(safe_bo, "_log_expected_improvement", lambda *a, **k: pytest.fail("fitted"))
            fast = bo.suggest(obs)
        with monkeypatch.context() as m:
            m.setattr(SafeBayesOpt, "_first_step", lambda *a, **k: None)
            model = bo.suggest(obs)
        if model.converged or model.knobs.batch_size <= b:  # no larger batch certified: the model decides
            continue
        assert (fast.knobs.batch_size, fast.goal and fast.goal.batch_size) == (
            model.knobs.batch_size, model.goal and model.goal.batch_size), (fast, model)
        assert fast.memory_ucb_bytes <= limit and fast.expected_improvement > 0 and not fast.converged
        compared += 1
    assert compared >= 3, compared  # most instances have a larger certified batch to step to


def test_a_fit_is_deferred_while_the_model_loads_in_another_thread(monkeypatch):
    """While :func:`warm_up` runs, a suggestion that needs a fit raises ``ModelLoading`` (a
    control step then does not wait on it); a torch still being imported is not touched by
    ``single_threaded``."""
    import sys
    import threading
    import types

    from trident.core.model.threads import single_threaded
    from trident.core.optimize import safe_bo

    assert not safe_bo._warming.is_set()
    seen, release = [], threading.Event()

    def fit(*args, **kwargs):  # stands in for a slow first fit
        seen.append(safe_bo._warming.is_set())
        release.wait(10)
        raise RuntimeError("stand-in")

    def warm():
        try:
            safe_bo.warm_up()
        except RuntimeError:
            pass

    monkeypatch.setattr(safe_bo, "_fit_gp", fit)
    thread = threading.Thread(target=warm, daemon=True)
    thread.start()
    for _ in range(200):
        if seen:
            break
        threading.Event().wait(0.05)
    assert seen == [True]
    two = [Observation(Knobs(b, 2, "cpu"), 10.0 * b, 1e8 * b) for b in (16, 32)]
    with pytest.raises(safe_bo.ModelLoading):
        SafeBayesOpt(space=SPACE, memory_limit_bytes=1e11, initial=INITIAL).suggest(two)
    release.set()
    thread.join(10)
    assert not safe_bo._warming.is_set()
    half = types.ModuleType("torch")
    half.__spec__ = types.SimpleNamespace(_initializing=True)  # no get_num_threads yet
    monkeypatch.setitem(sys.modules, "torch", half)
    with single_threaded():
        pass


def test_a_replica_at_rest_bounds_only_the_part_above_it_by_the_batch_ratio():
    # 2 GB of weights at rest, 0.5 GB more at batch 8: batch 32 is bounded by 2 + 4 x 0.5 GB, not 4 x 2.5 GB
    one = [Observation(Knobs(8, 1, "cpu"), 30.0, 2.5e9)]
    plain, rested, over = (SafeBayesOpt(space=SPACE, memory_limit_bytes=64e9, initial=INITIAL, max_batch_growth=4.0,
                                        rest_memory_bytes=rest) for rest in (0.0, 2e9, 9e9))
    at32 = [Knobs(32, 1, "cpu")]
    assert plain.memory_upper_bytes(at32, one)[0] == pytest.approx(4 * 2.5e9 * 1.03)
    assert rested.memory_upper_bytes(at32, one)[0] == pytest.approx((2e9 + 4 * 0.5e9) * 1.03)
    # a reading at rest above the measured batch's is inconsistent: the batch ratio bounds it all
    assert over.memory_upper_bytes(at32, one)[0] == pytest.approx(4 * 2.5e9 * 1.03)
    with pytest.raises(ConfigError, match="rest_memory_bytes"):
        SafeBayesOpt(space=SPACE, memory_limit_bytes=64e9, initial=INITIAL, rest_memory_bytes=-1.0)
