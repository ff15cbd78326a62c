"""What identifies an operator across runs: its user code (qualified name and a hash of its
source), the arguments its UDF is built and called with, its Ray Data arguments
(``batch_size``, ``num_cpus``, ``num_gpus``, accelerator type, ``concurrency``) and the
cluster's shape. The same pipeline run again on new input files keeps its keys: the data is
not part of a key (a read's datasource class is, its paths are not).

:func:`operator_key` reads a Ray Data physical operator (the one place Ray is touched);
:func:`key_of_parts` and :func:`cluster_parts` are pure.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import re
from typing import Any

from trident.core.types import ClusterView

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def key_of_parts(parts: dict[str, Any]) -> str:
    """A short, stable key (hex) for a canonical JSON of ``parts``."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def code_hash(obj: Any) -> str:
    """A hash of ``obj``'s code: its source where Python can read it, else its functions'
    bytecode and constants (lambdas typed at a prompt, classes built at run time)."""
    try:
        text = inspect.getsource(obj)
    except (OSError, TypeError):
        funcs = [obj] if hasattr(obj, "__code__") else [
            v for _, v in sorted(vars(obj).items()) if hasattr(v, "__code__")] if isinstance(obj, type) else []
        text = "|".join(f.__code__.co_code.hex() + repr(f.__code__.co_consts) for f in funcs) or type(obj).__name__
    return hashlib.sha256(_ADDRESS.sub("", text).encode()).hexdigest()[:16]


def value_hash(value: Any) -> str:
    """A hash of arguments by their ``repr`` (memory addresses dropped: an object without a
    ``repr`` of its own is known by its type)."""
    return hashlib.sha256(_ADDRESS.sub("", repr(value)).encode()).hexdigest()[:16]


def cluster_parts(view: ClusterView) -> dict[str, Any]:
    """The cluster's shape: its nodes' CPUs, GPUs and accelerator types (not their ids, which a
    new cluster does not keep)."""
    nodes = sorted((n.cpus, n.gpus, n.accelerator_type or "") for n in view.nodes)
    return {"nodes": nodes} if nodes else {"cpus": view.cpus, "gpus": view.gpus}


def udf_parts(logical: Any) -> dict[str, Any]:
    """One logical operator's identity (see the module docstring)."""
    parts: dict[str, Any] = {"op": type(logical).__name__}
    fn = getattr(logical, "fn", None)
    if fn is not None:
        target = fn if isinstance(fn, type) or (callable(fn) and hasattr(fn, "__code__")) else type(fn)
        parts["udf"] = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', repr(target))}"
        parts["code"] = code_hash(target)
        parts["args"] = value_hash([getattr(logical, a, None) for a in (
            "fn_args", "fn_kwargs", "fn_constructor_args", "fn_constructor_kwargs")])
    datasource = getattr(logical, "datasource", None) or getattr(logical, "_datasource", None)
    if datasource is not None:
        parts["source"] = type(datasource).__qualname__
    remote = dict(getattr(logical, "ray_remote_args", None) or {})
    parts["ray"] = {k: remote.get(k) for k in ("num_cpus", "num_gpus", "accelerator_type", "memory")
                    if remote.get(k) is not None}
    batch = getattr(logical, "batch_size", None)
    if batch is not None:
        parts["batch_size"] = batch
    compute = getattr(logical, "compute", None)
    if compute is not None:
        parts["compute"] = {"kind": type(compute).__name__,
                            **{k: getattr(compute, k) for k in ("min_size", "max_size", "size")
                               if isinstance(getattr(compute, k, None), int)}}
    return parts


def operator_key(physical_op: Any, name: str, cluster: dict[str, Any]) -> str:
    """The key of a Ray Data physical operator (named ``name`` in trident's records) on
    ``cluster`` (:func:`cluster_parts`); its fused logical operators in order."""
    logical = list(getattr(physical_op, "_logical_operators", None) or [])
    parts = {"name": name, "logical": [udf_parts(op) for op in logical] or [type(physical_op).__name__],
             "cluster": cluster}
    return key_of_parts(parts)
