"""A pool stand-in whose memory Ray Data learns only when a task ends: each batch holds ``mib``
MiB for ``hold_s`` seconds. A test module using it registers this module for pickling by value
(Ray's workers cannot import it)."""
import time


class HoldsMemory:
    def __init__(self, mib: int, hold_s: float) -> None:
        self.mib, self.hold_s = mib, hold_s

    def __call__(self, batch):
        import numpy as np

        held = np.ones(self.mib * 2**20, dtype=np.uint8)
        time.sleep(self.hold_s)
        del held
        return batch
