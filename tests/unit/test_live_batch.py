"""A live batch transform: its batch size is the task's DataContext value under its key."""
import pytest

pytest.importorskip("ray.data")
import ray  # noqa: E402
from ray.data._internal.execution.operators.map_transformer import BatchMapTransformFn, MapTransformer  # noqa: E402
from ray.data.context import DataContext  # noqa: E402

from trident.ray_data.live_batch import LiveBatchMapTransformFn, make_live, waits  # noqa: E402
from trident.ray_data.rollout import with_batch_size  # noqa: E402


def _transformer(batch_size=32):
    return MapTransformer([BatchMapTransformFn(lambda b: b, batch_size=batch_size, batch_format="numpy")])


def test_a_live_transform_reads_its_batch_size_from_the_current_context():
    live = make_live(_transformer(32), "trident.batch_size.test.0")
    (fn,) = live.get_transform_fns()
    assert isinstance(fn, LiveBatchMapTransformFn)
    assert fn._batch_size == 32  # the key unset: the size it was built with
    ctx = DataContext.get_current().copy()
    ctx.set_config("trident.batch_size.test.0", 96)
    with DataContext.current(ctx):
        assert fn._batch_size == 96
    assert fn.batch_size_in(ctx) == 96 and fn._batch_size == 32
    # what an actor gets: the pickled transform keeps its key and its built size
    again = ray.cloudpickle.loads(ray.cloudpickle.dumps(fn))
    with DataContext.current(ctx):
        assert again._batch_size == 96
    # a rolling update's copy at a new size, under a key of its own
    (rolled,) = make_live(with_batch_size(live, 64), "trident.batch_size.test.1").get_transform_fns()
    with DataContext.current(ctx):
        assert rolled._batch_size == 64 and fn._batch_size == 96


def test_a_larger_batch_waits_for_the_pool_to_shrink_a_smaller_one_does_not():
    assert waits(32, 64, actors=7, most=4)
    assert not waits(32, 64, actors=4, most=4)
    assert not waits(64, 32, actors=7, most=4)  # less heap per actor: at once
    assert not waits(None, 64, actors=7, most=4)
