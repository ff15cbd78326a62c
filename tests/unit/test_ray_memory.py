"""What Ray's processes hold beside the pipeline's actor pools: counted by title, the most kept."""
from trident.autoscaler.shim import ray_memory
from trident.autoscaler.shim.ray_memory import RayMemory, other_memory_bytes, pool_names
from trident.core.types import OperatorConfig, OperatorSnapshot

MiB = 2**20
PROCESSES = [
    ("/site-packages/ray/core/src/ray/raylet/raylet --node_id=x", 9 * MiB),
    ("/site-packages/ray/core/src/ray/gcs/gcs_server --port=1", 24 * MiB),
    ("ray::_StatsActor", 102 * MiB),
    ("ray::IDLE", 80 * MiB),
    ("ray::Controller.step", 150 * MiB),
    ("ray::MapWorker(MapBatches(OcrPages)).submit", 600 * MiB),
    ("ray::ReadBinary->MapBatches(parse_pdfs)", 130 * MiB),
    ("ray::MapWorker(MapBatches(Other)).submit", 500 * MiB),  # another dataset's pool
]


def _op(name, kind):
    return OperatorSnapshot(name=name, index=0, config=OperatorConfig(kind=kind, replicas=1 if kind == "actor" else None))


def test_the_pipelines_actor_pools_are_left_out_and_everything_else_counts():
    """A task operator's workers are not planned as heap (a video decode task holds 0.2-0.3 GiB and
    its idle worker keeps most of it): they count with Ray's own processes."""
    ops = [_op("ReadBinary->MapBatches(parse_pdfs)", "task"), _op("MapBatches(OcrPages)#1", "actor"),
           _op("Write", "task")]
    assert pool_names(ops) == ["MapBatches(OcrPages)"]
    assert other_memory_bytes(PROCESSES, pool_names(ops)) == (9 + 24 + 102 + 80 + 150 + 130 + 500) * MiB
    assert other_memory_bytes(PROCESSES, []) == sum(m for _, m in PROCESSES)
    assert other_memory_bytes(PROCESSES, [""]) == sum(m for _, m in PROCESSES)  # an empty name matches nothing


def test_the_most_read_is_kept_and_read_again_only_every_interval(monkeypatch):
    readings = iter([[("ray::IDLE", 300 * MiB)], [("ray::IDLE", 100 * MiB)], [("ray::IDLE", 500 * MiB)]])
    monkeypatch.setattr(ray_memory, "ray_processes", lambda pid: next(readings))
    m = RayMemory(every_s=2.0)
    assert m.read(0.0, []) == 300 * MiB
    assert m.read(1.0, []) == 300 * MiB  # not read again yet
    assert m.read(2.0, []) == 300 * MiB  # 100 MiB read: an idle worker left, and may come back
    assert m.read(4.5, []) == 500 * MiB

