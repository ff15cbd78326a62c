"""The learned order with a preemptor on a cell it was never trained on (Pollux workload 3): the
lazy preemptor gets victims to judge, and evicts none still setting up."""
import os
from pathlib import Path

import pytest

from trident.sim.compare import Entry, simulate
from trident.sim.engine import EngineConfig
from trident.sim.metrics import summarize
from trident.sim.traces import load_trace

DATA = Path(os.environ.get("TRIDENT_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "data"))
W3 = DATA / "traces" / "pollux" / "workloads" / "workload-3.csv"


@pytest.mark.skipif(not W3.is_file(), reason="shared data not present")
def test_rltune_with_lazy_preemption_preempts_and_none_is_futile():
    trace = load_trace(f"pollux:{W3}")
    runs = {name: simulate(Entry.parse(name), trace.nodes, trace.jobs, EngineConfig(seed=0))
            for name in ("rltune", "rltune/lazy")}
    alone, lazy = (summarize(runs[n]) for n in ("rltune", "rltune/lazy"))
    assert alone["preemptions"] == 0  # without a preemptor the learned order only orders the queue
    assert lazy["preemptions"] > 0 and lazy["futile_preemptions"] == 0, lazy
    assert lazy["avg_jct_s"] != alone["avg_jct_s"]
    for r in runs.values():
        assert r.unschedulable == () and bool((r.finish_s < float("inf")).all())
