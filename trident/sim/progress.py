"""A running job's progress at a piecewise-constant rate.

A job holds groups of GPUs, each warm (making progress) from its own time on: its first
GPUs once its setup is over, GPUs lent to an elastic job once their actors have started.
Work is counted in seconds at full width on the reference GPU: ``width`` is the GPUs its
``duration_s`` was measured at (a job's ``num_gpus``, an elastic job's ``max_gpus``).
At full width a job does ``speed`` (its GPU model's speed) of work per second; with
``warm`` < ``width`` of its GPUs warm, ``speed / ((1 - p) + p * width / warm)`` (Amdahl,
``p`` its parallel fraction: ``speed * warm / width`` at p = 1), none with none warm.
"""
from __future__ import annotations

from typing import Sequence

Groups = Sequence[tuple[float, float]]
"""(time s from which the group is warm, GPUs), by time."""


def rate(speed: float, warm: float, width: float, parallel: float = 1.0) -> float:
    """Work (full-width reference seconds) done per second with ``warm`` GPUs warm."""
    if warm >= width:
        return speed
    return speed / ((1.0 - parallel) + parallel * width / warm) if warm > 0 else 0.0


def work_done(groups: Groups, speed: float, width: float, t0: float, t1: float, parallel: float = 1.0) -> float:
    """Work (full-width reference seconds) done between ``t0`` and ``t1`` (s)."""
    warm = sum(g for w, g in groups if w <= t0)
    done, t = 0.0, t0
    for w, g in groups:
        if t0 < w < t1:
            done += (w - t) * rate(speed, warm, width, parallel)
            t, warm = w, warm + g
    return done + (t1 - t) * rate(speed, warm, width, parallel)


def finish_s(groups: Groups, speed: float, width: float, t0: float, remaining: float,
             parallel: float = 1.0) -> float:
    """When ``remaining`` work (full-width reference seconds) left at ``t0`` is done (s)."""
    warm = sum(g for w, g in groups if w <= t0)
    t = t0
    for w, g in groups:
        if w <= t0:
            continue
        r = rate(speed, warm, width, parallel)
        if r > 0 and t + remaining / r <= w:
            break
        remaining -= (w - t) * r
        t, warm = w, warm + g
    return t + remaining / rate(speed, warm, width, parallel)
