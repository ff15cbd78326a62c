"""Measured performance of Pollux's six training applications (its simulator's model).

Each application ships three kinds of tables (``trident/sim/data/pollux/models/<app>/``):

- ``placements.csv``: step and gradient-sync time (s) per placement (e.g. ``22`` = two
  nodes with two GPUs each) and per-GPU batch size;
- ``scalability.csv``: the same at more nodes, keyed by (nodes, replicas, per-GPU batch);
- ``validation-<B>.csv``: per epoch of a run at total batch size ``B``: the progress
  reached (in samples-equivalent units), iterations done, gradient square norm and variance.

A job at total batch size ``M`` (scale ``s = M / B0``, ``B0`` the smallest validated batch)
advances ``gain / step_time`` progress units per second, with Pollux's statistical
efficiency ``gain = (var + sqr) / (var / s + sqr)`` for that epoch; it completes when the
progress of its last epoch is reached. Units: seconds, samples, GPUs.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.elastic import packed_placement

APP_SETTINGS = {"bert": {"max_epochs": 2}, "cifar10": {"max_epochs": 100, "init_batch_size": 128},
                "ncf": {"max_epochs": 10}, "imagenet": {"max_epochs": 90, "max_batch_size": 12800},
                "deepspeech2": {"max_epochs": 80, "init_batch_size": 20},
                "yolov3": {"max_epochs": 50, "max_local_bsz": 8}}
"""Training length (epochs), base batch size (the batch whose steps the progress column
counts; default the smallest validated one), largest total batch (default the largest
validated one; above it the largest validated curve's gradient statistics are used) and
per-GPU batch caps per application. With these, Pollux's published JCTs are reproduced."""


def _read(path: Path) -> dict[str, np.ndarray]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ConfigError(str(path), "empty", "a table with rows")
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}


def normal_placement(placement: Sequence[int]) -> tuple[int, ...]:
    """GPUs per node, empty nodes dropped, rotated to the lexicographically smallest form."""
    p = tuple(int(g) for g in placement if g)
    return min(p[i:] + p[:i] for i in range(len(p))) if p else ()


@dataclass(frozen=True)
class LocalBatch:
    """How a total batch is split: ``atomic_bsz`` samples per GPU per pass, ``accum_steps``
    extra gradient-accumulation passes per step."""

    atomic_bsz: int
    accum_steps: int

    def batch_size(self, num_replicas: int) -> int:
        return num_replicas * self.atomic_bsz * (self.accum_steps + 1)


class Application:
    """One application's tables; lookups are memoised (pure functions of their arguments)."""

    def __init__(self, name: str, directory: Path, *, max_epochs: int, max_local_bsz: int | None = None,
                 init_batch_size: int | None = None, max_batch_size: int | None = None) -> None:
        self.name = name
        place = _read(directory / "placements.csv")
        self._by_placement: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for pid in np.unique(place["placement"]).astype(int):
            m = place["placement"] == pid
            order = np.argsort(place["local_bsz"][m], kind="stable")
            self._by_placement[int(pid)] = (place["local_bsz"][m][order], place["step_time"][m][order],
                                            place["sync_time"][m][order])
        self._place = place
        self._scal = _read(directory / "scalability.csv")
        self._nd = None
        self.validation: dict[int, dict[str, np.ndarray]] = {
            int(p.stem.split("-")[1]): _read(p) for p in sorted(directory.glob("validation-*.csv"))}
        if not self.validation:
            raise ConfigError(f"{directory}", "no validation-*.csv", "per-batch-size training curves")
        self.batch_sizes = sorted(self.validation)
        self.init_batch_size = int(init_batch_size or self.batch_sizes[0])
        self.max_batch_size = int(max_batch_size or self.batch_sizes[-1])
        self.min_local_bsz = int(place["local_bsz"].min())
        self.max_local_bsz = int(max_local_bsz or place["local_bsz"].max())
        self.max_epochs = max_epochs
        self.progress_by_epoch = np.concatenate(
            [[0.0], np.min([v["progress"][:max_epochs] for v in self.validation.values()], axis=0)])
        """progress_by_epoch[e] = progress at the end of epoch e (0 at the start)."""

    # --- throughput -------------------------------------------------------------------------
    def local_batch(self, batch_size: int, num_replicas: int) -> LocalBatch:
        """Per-GPU split of a fixed total batch: gradient accumulation when a GPU cannot hold
        its share; the total is capped at the largest validated batch."""
        local = math.ceil(batch_size / num_replicas - 1e-8)
        accum = math.ceil(local / self.max_local_bsz - 1e-8) - 1
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        atomic = min(atomic, int(self.max_batch_size / (num_replicas * (accum + 1))))
        return LocalBatch(atomic, accum)

    @lru_cache(maxsize=None)
    def step_sync_s(self, placement: tuple[int, ...], atomic_bsz: int) -> tuple[float, float]:
        """(step time, sync time) in seconds of one pass at ``atomic_bsz`` per GPU."""
        p = normal_placement(placement)
        pid = int("".join(map(str, p)))
        if pid in self._by_placement:
            x, step, sync = self._by_placement[pid]
            return float(np.interp(atomic_bsz, x, step)), float(np.interp(atomic_bsz, x, sync))
        if self._nd is None:
            self._nd = self._nd_interpolator()
        value = self._nd([[min(len(p), 16), sum(p), atomic_bsz]])[0]
        if not np.all(np.isfinite(value)):
            raise ConfigError(f"{self.name}.placement", (p, atomic_bsz), "a placement inside the measured range")
        return float(value[0]), float(value[1])

    def _nd_interpolator(self):
        from scipy.interpolate import LinearNDInterpolator

        pl = self._place
        nodes = np.array([len(str(int(p))) for p in pl["placement"]], dtype=float)
        reps = np.array([sum(map(int, str(int(p)))) for p in pl["placement"]], dtype=float)
        keys = np.stack([nodes, reps, pl["local_bsz"]], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        counts = np.bincount(inv)
        means = np.stack([np.bincount(inv, pl[c]) / counts for c in ("step_time", "sync_time")], axis=1)
        sc = self._scal
        pts = np.concatenate([uniq, np.stack([sc["num_nodes"], sc["num_replicas"], sc["local_bsz"]], axis=1)])
        vals = np.concatenate([means, np.stack([sc["step_time"], sc["sync_time"]], axis=1)])
        return LinearNDInterpolator(pts, vals)

    def iteration_s(self, placement: tuple[int, ...], lb: LocalBatch) -> float:
        """Seconds per optimizer step (accumulation passes skip the sync)."""
        step, sync = self.step_sync_s(normal_placement(placement), lb.atomic_bsz)
        return step + lb.accum_steps * (step - sync)

    # --- statistical efficiency -------------------------------------------------------------
    def _interp(self, batch_size: float, epoch: int, column: str) -> float:
        bs = self.batch_sizes
        batch_size = min(batch_size, bs[-1])
        lo = max((b for b in bs if b <= batch_size), default=None)
        hi = min((b for b in bs if b >= batch_size), default=None)
        if lo is None or hi is None:
            raise ConfigError(f"{self.name}.batch_size", batch_size, f"within the validated {bs[0]}..{bs[-1]}")
        a, b = self.validation[lo][column][epoch], self.validation[hi][column][epoch]
        return float(a) if lo == hi else float(((batch_size - lo) * b + (hi - batch_size) * a) / (hi - lo))

    @lru_cache(maxsize=None)
    def gain(self, batch_size: int, epoch: int) -> float:
        """Progress per step at ``batch_size`` during ``epoch`` (1 at the base batch)."""
        sqr, var = self._interp(batch_size, epoch, "grad_sqr"), self._interp(batch_size, epoch, "grad_var")
        scale = batch_size / self.init_batch_size
        return (var + sqr) / (var / scale + sqr)

    def iterations(self, batch_size: int, epoch: int) -> float:
        """Optimizer steps done by the end of ``epoch`` by a job asking for ``batch_size``.

        The job trains at most at ``max_batch_size``. Between validated batch sizes the
        curves' iteration counts are interpolated; above the largest validated batch ``B``
        the same samples are covered in larger steps, so its count is scaled by ``B / batch``
        (imagenet at 6,400 takes an eighth of the steps of its 800-sample curve)."""
        batch_size = min(batch_size, self.max_batch_size)
        top = self.batch_sizes[-1]
        if batch_size > top:
            return self._interp(top, epoch, "iteration") * top / batch_size
        return self._interp(batch_size, epoch, "iteration")


@lru_cache(maxsize=None)
def application(name: str, models_dir: str | None = None) -> Application:
    """The application ``name`` from ``models_dir`` (default: the tables shipped with trident)."""
    if name not in APP_SETTINGS:
        raise ConfigError("application", name, f"one of {sorted(APP_SETTINGS)}")
    base = Path(models_dir) if models_dir else Path(str(resources.files("trident.sim").joinpath(
        "data", "pollux", "models")))
    return Application(name, base / name, **APP_SETTINGS[name])


def isolated_run_s(name: str, num_replicas: int, batch_size: int, gpus_per_node: int = 4) -> float:
    """Seconds a job of application ``name`` needs on ``num_replicas`` GPUs packed on full
    nodes at total batch ``batch_size``, from start to its last epoch (no restarts)."""
    app = application(name)
    if num_replicas < 1:
        raise ConfigError("num_replicas", num_replicas, "an integer >= 1")
    if batch_size < 1:
        raise ConfigError("batch_size", batch_size, "an integer >= 1")
    lb = app.local_batch(batch_size, num_replicas)
    step_s = app.iteration_s(packed_placement(num_replicas, gpus_per_node), lb)
    bs, p = lb.batch_size(num_replicas), app.progress_by_epoch
    return float(sum((p[e + 1] - p[e]) * step_s / app.gain(bs, e) for e in range(app.max_epochs)))
