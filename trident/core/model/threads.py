"""Run small numerical fits on one thread.

GP fits on a few hundred points are dominated by thread start-up and contention when
BLAS or torch spread them over every core (measured: 41 s vs 2.9 s for one sklearn fit
on a loaded 2-core machine). The previous limits are restored on exit.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def single_threaded() -> Iterator[None]:
    """Limit BLAS/OpenMP pools (and torch, when already imported) to one thread inside the block."""
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")
    if torch is not None and getattr(getattr(torch, "__spec__", None), "_initializing", False):
        torch = None  # still being imported by another thread (the optimiser's warm-up): not ours to touch
    previous = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        if torch is not None and previous is not None:
            torch.set_num_threads(previous)
