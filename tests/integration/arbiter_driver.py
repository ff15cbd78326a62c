"""A second driver for the arbiter's tests: connects to the cluster at ``sys.argv[1]``, runs the
gated pipeline of ``test_arbiter_ray`` under ``trident.autoscale(name=sys.argv[3])`` (its second half
waits for the file ``sys.argv[2]``), checks every row came out once and prints its arbiter events
as JSON on the last line. ``train`` is the tests' training stand-in."""
import json
import os
import sys
import time

import ray
from ray.data import ActorPoolStrategy

ROWS = 800


def gate(release: str):
    def wait(batch):
        deadline = time.time() + 300
        while batch["id"].max() >= ROWS // 2 and not os.path.exists(release) and time.time() < deadline:
            time.sleep(0.05)
        return batch
    return wait


class Embed:
    def __call__(self, batch):
        time.sleep(0.05)
        return batch


def train(release: str) -> str:
    """A training stand-in: holds its GPU until the file ``release`` exists."""
    deadline = time.time() + 300
    while not os.path.exists(release) and time.time() < deadline:
        time.sleep(0.05)
    return "trained"


def pipeline(release: str) -> list[int]:
    ds = (ray.data.range(ROWS, override_num_blocks=40).map_batches(gate(release), batch_size=20)
          .map_batches(Embed, compute=ActorPoolStrategy(min_size=1, max_size=4), num_gpus=0.5, num_cpus=0.5,
                       batch_size=20))
    return [int(row["id"]) for row in ds.iter_rows()]


def main() -> int:
    import trident

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address=sys.argv[1], log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.data.DataContext.get_current().enable_progress_bars = False
    with trident.autoscale(policy="ds2", interval_s=0.5, history=False, name=sys.argv[3]) as run:
        ids = pipeline(sys.argv[2])
    assert sorted(ids) == list(range(ROWS)), "rows lost or repeated"
    print(json.dumps([[e.kind, e.message] for e in run.record.events if e.kind.startswith("arbiter")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
