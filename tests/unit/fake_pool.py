"""A stand-in for Ray Data's actor pool: the members trident's pool driver touches, as in Ray 2.60."""
from dataclasses import dataclass


@dataclass
class ActorState:
    num_tasks_in_flight: int
    actor_location: str = "node"


class FakePool:
    def __init__(self, in_flight: dict[str, int], pending: int = 0) -> None:
        self._running_actors = {a: ActorState(n) for a, n in in_flight.items()}
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

    def current_size(self) -> int:
        return len(self._running_actors) + self.pending

    def scale(self, req) -> int:  # Ray's scale-down: pending actors, then idle ones
        released = 0
        for _ in range(-req.delta):
            idle = next((a for a, st in self._running_actors.items() if st.num_tasks_in_flight == 0), None)
            if self.pending:
                self.pending -= 1
            elif idle is not None:
                self._release_running_actor(idle)
            else:
                break
            released += 1
        return -released
