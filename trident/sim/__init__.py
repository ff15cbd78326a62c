"""trident.sim: trace loaders and a discrete-event GPU-cluster simulator driving the job layer's policies.

See ``docs/simulate.md``. Entry points: :func:`trident.sim.traces.load_trace`,
:class:`trident.sim.engine.Simulator`, :func:`trident.sim.metrics.summarize` and
:func:`trident.sim.compare.simulate`.
"""
from trident.sim.engine import EngineConfig, SetupModel, SimResult, Simulator
from trident.sim.metrics import summarize
from trident.sim.traces import Trace, load_trace

__all__ = ["EngineConfig", "SetupModel", "SimResult", "Simulator", "Trace", "load_trace", "summarize"]
