"""The benchmarks' harness: the calibrated stand-ins (:mod:`harness.calibration`, measured by
:mod:`harness.measure`), the pipeline benchmark (:mod:`harness.bench`, run by
``benchmarks/pipeline_bench.py``) and the scenario suite (:mod:`harness.suite`, run by
``benchmarks/scenario_suite.py``). The scripts in ``benchmarks/`` import it from their own folder."""
from __future__ import annotations

import sys


def ship() -> None:
    """Send the harness's functions and classes to Ray's workers by value (their processes do not
    have ``benchmarks/`` on their path); call it once Ray is started, before a pipeline runs."""
    import ray

    for name, module in list(sys.modules.items()):
        if name == __name__ or name.startswith(__name__ + "."):
            ray.cloudpickle.register_pickle_by_value(module)
