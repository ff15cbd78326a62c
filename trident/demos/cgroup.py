"""A real memory limit for the demo's embedded Ray: a Linux memory cgroup (v1 ``memory.limit_in_bytes``
or v2 ``memory.max``, where the memory controller is delegated to this process's cgroup's
children) made under this process's own cgroup, which Ray's processes are started in.

The driver joins the cgroup only while ``ray.init`` starts Ray's daemons (the raylet, the GCS and
every worker they start later inherit it), then goes back: the limit binds Ray, not the demo's
own reading of its results. Over the limit the kernel's OOM killer ends a process in the cgroup
(Ray starts its workers with ``oom_score_adj`` 1000, so a worker goes first).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Layout:
    """Where this process's memory cgroup lives and how its files are named."""

    version: int
    """1 or 2."""
    own: Path
    """This process's memory cgroup folder."""

    @property
    def limit_file(self) -> str:
        return "memory.limit_in_bytes" if self.version == 1 else "memory.max"

    @property
    def peak_file(self) -> str:
        return "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"

    @property
    def events_file(self) -> str:
        return "memory.oom_control" if self.version == 1 else "memory.events"


def find_layout(root: Path = ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> Layout | str:
    """This process's memory cgroup, or why there is none to use (a plain sentence)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError as err:
        return f"no cgroups here ({err.strerror or err})"
    for line in lines:  # "<id>:<controllers>:<path>"
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") and (root / "memory").is_dir():
            return Layout(1, root / "memory" / path.lstrip("/"))
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and (root / "cgroup.controllers").is_file():
            if "memory" not in (root / "cgroup.controllers").read_text().split():
                return "cgroup v2 without the memory controller"
            return Layout(2, root / path.lstrip("/"))
    return "no memory cgroup for this process"


class MemoryCgroup:
    """A memory cgroup of ``limit_bytes`` under this process's own; remove it once Ray is down."""

    def __init__(self, limit_bytes: int, *, layout: Layout, name: str | None = None) -> None:
        if limit_bytes <= 0:
            raise ValueError(f"a memory limit must be positive, not {limit_bytes}")
        self.layout, self.limit_bytes = layout, int(limit_bytes)  # bytes (None: attached without one)
        self.path = layout.own / (name or f"trident-demo-{os.getpid()}")
        self._home = layout.own
        self.path.mkdir(exist_ok=True)
        try:
            self._write(layout.limit_file, str(self.limit_bytes))
        except OSError:  # e.g. v2 without the memory controller delegated to this cgroup's children
            self.remove()
            raise
        if layout.version == 1:  # over the limit, processes are killed, not swapped
            self._write("memory.swappiness", "0")
            self._write("memory.memsw.limit_in_bytes", str(self.limit_bytes))  # where swap is accounted
        else:
            self._write("memory.swap.max", "0")

    @classmethod
    def attach(cls, path: Path, *, layout: Layout) -> "MemoryCgroup":
        """A cgroup another process made (its limit as it is)."""
        self = cls.__new__(cls)
        self.layout, self.path, self._home = layout, Path(path), layout.own
        text = (self.path / layout.limit_file).read_text().strip()
        self.limit_bytes = None if text == "max" else int(text)
        return self

    def pids(self) -> list[int]:
        """The processes in the cgroup now."""
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]

    def _write(self, name: str, value: str) -> None:
        """Write a control file; only the limit must take (swap knobs exist only where swap is
        accounted, and a cgroup without them still kills over the limit)."""
        try:
            (self.path / name).write_text(value)
        except OSError:
            if name == self.layout.limit_file:
                raise

    def join(self) -> None:
        """Move this process into the cgroup (processes it starts from now on are in it too)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def leave(self) -> None:
        """Move this process back to its own cgroup (its children stay)."""
        (self._home / "cgroup.procs").write_text(str(os.getpid()))

    def peak_bytes(self) -> int:
        """The most memory the cgroup has held since it was made or :meth:`reset_peak`, bytes."""
        return int((self.path / self.layout.peak_file).read_text().split()[0])

    def reset_peak(self) -> None:
        """Start the peak afresh (v1 only; under v2 the peak stays the cgroup's)."""
        if self.layout.version == 1:
            self._write(self.layout.peak_file, "0")

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer has ended in the cgroup so far."""
        for line in (self.path / self.layout.events_file).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        """Remove the cgroup (every process in it must have exited: shut Ray down first)."""
        try:
            self.path.rmdir()
        except OSError:
            pass


def limit_for_ray(limit_bytes: int | None, layout: Layout | str | None = None) -> tuple[MemoryCgroup | None, str]:
    """A cgroup that will hold Ray's processes under ``limit_bytes`` where this machine allows it
    (``layout``: default this process's), and one line saying how the limit is enforced."""
    if limit_bytes is None:
        return None, ""
    layout = find_layout() if layout is None else layout
    gib = f"{limit_bytes / 2**30:.2f} GiB"
    alone = f"memory limit {gib}: trident's alone, stock Ray Data does not see it"
    if isinstance(layout, str):
        return None, f"{alone} (no memory cgroup to enforce it: {layout})"
    try:
        cg = MemoryCgroup(limit_bytes, layout=layout)
    except OSError as err:
        return None, f"{alone} (no cgroup could be made under {layout.own}: {err.strerror or err})"
    return cg, (f"memory limit {gib}: Ray's processes run in a memory cgroup of that size in every run "
                f"(over it the kernel kills one)")


def release(cg: MemoryCgroup) -> None:
    """End what is left in ``cg`` (Ray shut down first) and remove it."""
    import signal
    import time

    for _ in range(5):
        try:
            pids = cg.pids()
        except OSError:
            return
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
    cg.remove()


class KillClock:
    """When the kernel killed processes in a cgroup while a block runs: its kill counter read
    every ``every_s`` by a thread; :attr:`times_s` holds one entry per kill, in seconds since the
    block began (a kill is timed to the reading that saw it, at most ``every_s`` late)."""

    def __init__(self, cg: MemoryCgroup, *, every_s: float = 0.25) -> None:
        self.cg, self.every_s = cg, every_s
        self.times_s: list[float] = []

    def __enter__(self) -> "KillClock":
        import threading
        import time

        self._t0, self._seen = time.perf_counter(), self.cg.oom_kills()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="trident-kill-clock", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            self._read()

    def _read(self) -> None:
        import time

        try:
            n = self.cg.oom_kills()
        except OSError:
            return
        self.times_s += [time.perf_counter() - self._t0] * max(n - self._seen, 0)
        self._seen = max(n, self._seen)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._read()
