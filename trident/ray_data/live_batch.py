"""Batch size changed on running actors, with no new actor and no cold start.

Ray Data 2.60 builds an actor pool's actors with the operator's map transformer (its batch
size fixed) and sends each task the operator's ``DataContext`` (``op._data_context_ref``),
which the task installs as current while it runs. A live batch transform reads its batch size
from that context at every task, under a key of its own; changing the key's value and the
operator's context reference changes the batch of every task dispatched from then on, on the
actors already running. The driver side (rows bundled per task) changes with it
(:func:`~trident.ray_data.rollout.bundle_rows`).

Each transformer generation has its own key: a rolling update (a new ``num_gpus`` or
accelerator type, new actors anyway) gives its new actors a new key, so the old actors keep
their batch until they leave. Without trident's shim the key is never set and the transform
runs the batch size it was built with.
"""
from __future__ import annotations

import copy
import itertools
from typing import Any

from ray.data._internal.execution.operators.map_transformer import BatchMapTransformFn
from ray.data.context import DataContext

KEY_PREFIX = "trident.batch_size."
_generations = itertools.count()


class LiveBatchMapTransformFn(BatchMapTransformFn):
    """A batch transform whose batch size is the current ``DataContext``'s value under
    ``_live_key`` (the size it was built with when the key is unset)."""

    @property
    def _batch_size(self) -> Any:
        default = self.__dict__.get("_built_batch_size")
        key = self.__dict__.get("_live_key")
        return default if key is None else DataContext.get_current().get_config(key, default)

    @_batch_size.setter
    def _batch_size(self, value: Any) -> None:
        self.__dict__["_built_batch_size"] = value

    def batch_size_in(self, ctx: DataContext) -> Any:
        """The batch size tasks run with under ``ctx`` (the driver's view of the operator's context)."""
        return ctx.get_config(self._live_key, self.__dict__.get("_built_batch_size"))


def _last_batch_fn(transformer: Any) -> tuple[int, Any] | None:
    fns = list(transformer.get_transform_fns())
    for i in range(len(fns) - 1, -1, -1):
        if isinstance(fns[i], BatchMapTransformFn):
            return i, fns[i]
    return None


def live_fn(op: Any) -> LiveBatchMapTransformFn | None:
    """The operator's live batch transform, or ``None`` when its batch size is fixed."""
    found = _last_batch_fn(op._map_transformer) if getattr(op, "_map_transformer", None) is not None else None
    return found[1] if found is not None and isinstance(found[1], LiveBatchMapTransformFn) else None


def new_key(op: Any) -> str:
    """A key for one transformer generation of ``op``."""
    return f"{KEY_PREFIX}{getattr(op, 'id', id(op))}.{next(_generations)}"


def make_live(transformer: Any, key: str) -> Any:
    """A copy of ``transformer`` whose last batch transform reads its batch size under ``key``."""
    found = _last_batch_fn(transformer)
    if found is None:
        raise ValueError("the operator has no batch transform")
    i, fn = found
    live = LiveBatchMapTransformFn.__new__(LiveBatchMapTransformFn)
    state = dict(fn.__dict__)
    built = state.pop("_built_batch_size", state.pop("_batch_size", None))
    live.__dict__.update(state, _built_batch_size=built, _live_key=key)
    new = copy.copy(transformer)
    fns = list(transformer.get_transform_fns())
    fns[i] = live
    new._transform_fns = fns
    return new


def set_context_value(op: Any, key: str, batch_size: int) -> None:
    """Tasks of ``op`` dispatched from now on run ``batch_size`` under ``key``: the operator's
    context gets the value and a new object-store reference (the one each task is sent)."""
    import ray

    ctx = op.data_context
    ctx.set_config(key, int(batch_size))
    op.__dict__["_data_context_ref"] = ray.put(ctx)


def waits(current: int | None, new: int, *, actors: int, most: int) -> bool:
    """Whether a switch from batch ``current`` to ``new`` waits: a larger batch (more heap per
    actor) only once the pool holds at most ``most`` actors, drained ones gone (a plan that
    trades replicas for batch must not run the old count at the new batch)."""
    return current is not None and new > current and actors > most
