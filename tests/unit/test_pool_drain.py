"""``drain_to`` on a stand-in for Ray Data's actor pool (the members it touches, as in Ray 2.60)."""
from dataclasses import dataclass

import pytest

pytest.importorskip("ray")
from trident.ray_data.rollout import drain_to  # noqa: E402


@dataclass
class _State:
    num_tasks_in_flight: int


class _Pool:
    def __init__(self, in_flight: dict[str, int], pending: int = 0) -> None:
        self._running_actors = {a: _State(n) for a, n in in_flight.items()}
        self._alive_actors_to_in_flight_tasks_heap = {a: n for a, n in in_flight.items()}
        self._alive_node_to_actor_heap = {"node": dict(self._alive_actors_to_in_flight_tasks_heap)}
        self.pending = pending
        self.released: list[str] = []

    def num_pending_actors(self) -> int:
        return self.pending

    def _update_rank(self, actor, state, died) -> None:  # what Ray's refresh does per actor
        if died:
            self._alive_actors_to_in_flight_tasks_heap.pop(actor, None)
        else:
            self._alive_actors_to_in_flight_tasks_heap[actor] = state.num_tasks_in_flight

    def _release_running_actor(self, actor) -> None:
        del self._running_actors[actor]
        self.released.append(actor)


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
