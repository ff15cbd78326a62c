"""A pool stand-in whose memory Ray Data learns only when a task ends: each batch holds ``mib``
MiB for ``hold_s`` seconds (and the replica ``rest_mib`` MiB from its constructor on, as a model). A test module using it registers this module for pickling by value
(Ray's workers cannot import it)."""
import time


class HoldsMemory:
    def __init__(self, mib: int, hold_s: float, rest_mib: int = 0) -> None:
        import numpy as np

        self.mib, self.hold_s = mib, hold_s
        self.weights = np.ones(rest_mib * 2**20, dtype=np.uint8)

    def __call__(self, batch):
        import numpy as np

        held = np.ones(self.mib * 2**20, dtype=np.uint8)
        time.sleep(self.hold_s)
        del held
        return batch


def stand_in_snapshots(execution):
    """The ``HoldsMemory`` pool's operator snapshots of one execution record."""
    return [o for s in execution.snapshots for o in s.operators if "HoldsMemory" in o.name]


def live_before_first_finish(execution) -> list[int]:
    """Live memory readings (bytes) of the ``HoldsMemory`` pool taken before any of its tasks finished."""
    return [o.heap_live_per_replica_bytes for o in stand_in_snapshots(execution)
            if o.tasks_finished == 0 and o.heap_live_per_replica_bytes]
