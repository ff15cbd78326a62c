"""``drain_to`` on a stand-in for Ray Data's actor pool (the members it touches, as in Ray 2.60)."""
from fake_pool import FakePool as _Pool

from trident.autoscaler.shim.rollout import drain_to, drive_to


def test_surplus_busy_actors_stop_getting_work_and_go_once_done():
    pool = _Pool({"a": 2, "b": 1, "c": 2, "d": 0})
    drained, released = drain_to(pool, 1)
    # the three with the fewest tasks in flight leave; the idle one goes at once
    assert (drained, released) == (3, 1) and pool.released == ["d"]
    assert set(pool._alive_actors_to_in_flight_tasks_heap) == {"c"}
    for actor in ("a", "b", "c"):
        pool._update_rank(actor, pool._running_actors[actor], False)  # a refresh keeps drained ones out
    assert set(pool._alive_actors_to_in_flight_tasks_heap) == {"c"}
    for state in pool._running_actors.values():
        state.num_tasks_in_flight = 0
    assert drain_to(pool, 1) == (0, 2)
    assert list(pool._running_actors) == ["c"]


def test_a_rising_target_puts_drained_actors_back_to_work():
    pool = _Pool({"a": 2, "b": 2, "c": 2})
    assert drain_to(pool, 1) == (2, 0)
    assert drain_to(pool, 3) == (0, 0)
    assert not pool.trident_retiring
    for actor, state in pool._running_actors.items():
        pool._update_rank(actor, state, False)
    assert set(pool._alive_actors_to_in_flight_tasks_heap) == {"a", "b", "c"}


def test_pending_actors_count_toward_the_target():
    pool = _Pool({"a": 1, "b": 1}, pending=1)
    assert drain_to(pool, 2) == (1, 0)


def test_while_busy_actors_drain_the_one_left_serving_stays():
    """Drained actors do not count as the pool's size: Ray's scale-down must not release the
    idle actor that is to keep the pool going while the drained ones finish."""
    pool = _Pool({"a": 2, "b": 2, "c": 2, "d": 1})
    assert drive_to(pool, target=1, budget=None, reason="test") == (3, 0)
    (kept,) = set(pool._running_actors) - pool.trident_retiring
    pool._running_actors[kept].num_tasks_in_flight = 0  # it went idle for a moment
    drive_to(pool, target=1, budget=None, reason="test")
    assert kept in pool._running_actors and kept not in pool.released


def test_a_pending_actor_is_cancelled_before_a_busy_one_is_drained():
    pool = _Pool({"a": 2, "b": 2}, pending=1)
    assert drive_to(pool, target=2, budget=None, reason="test") == (0, 0)
    assert pool.pending == 0 and len(pool._running_actors) == 2


def test_an_actor_read_at_rest_keeps_the_smallest_reading_and_not_the_actor():
    """The pool wrapper reads each actor as it comes up; it keeps the smallest reading only: a
    kept handle would keep a released actor's process, and its memory, alive."""
    import gc
    import weakref

    from trident.autoscaler.shim.metrics import busy_time_tracker

    class Actor:
        pass

    class Pool(_Pool):
        def pending_to_running(self, ready_ref):
            return ready_ref  # the actor that came up

    readings = iter([700, 650, 900])
    pool = busy_time_tracker(Pool({}), lambda actor: next(readings))
    refs = []
    for _ in range(3):
        actor = Actor()
        refs.append(weakref.ref(actor))
        assert pool.pending_to_running(actor) is actor
        del actor
    gc.collect()
    assert pool.trident_rest == 650
    assert all(r() is None for r in refs)
