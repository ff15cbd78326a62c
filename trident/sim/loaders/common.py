"""What every trace loader shares: the :class:`Trace` it returns, a row reader with line
numbers that raises or counts malformed rows, and the checks of GPU counts."""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Sequence

from trident.core.errors import TraceFormatError
from trident.jobs.base import Job, Node



@dataclass(frozen=True, eq=False)
class Trace:
    """Jobs (sorted by arrival) and nodes of one trace; ``skipped_rows`` malformed rows
    skipped on request; ``excluded`` counts well-formed rows left out, by reason."""

    name: str
    jobs: tuple[Job, ...]
    nodes: tuple[Node, ...]
    skipped_rows: int = 0
    excluded: dict[str, int] = field(default_factory=dict)


class Rows:
    """Reads a delimited file with line numbers; collects or raises row errors."""

    def __init__(self, path: Path, skip_bad: bool) -> None:
        self.path = path
        self.skip_bad = skip_bad
        self.skipped = 0
        self.excluded: dict[str, int] = {}

    def exclude(self, reason: str) -> None:
        self.excluded[reason] = self.excluded.get(reason, 0) + 1

    def bad(self, line: int, problem: str) -> None:
        if not self.skip_bad:
            raise TraceFormatError(str(self.path), line, problem)
        self.skipped += 1

    def read(self, *, columns: Sequence[str] | None = None, delimiter: str = ",",
             required: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, str]]]:
        """Rows as dicts. ``columns`` names a header-less file's columns; a first line equal
        to them is taken as a header and skipped."""
        if not self.path.is_file():
            raise TraceFormatError(str(self.path), 0, "trace file not found")
        with open(self.path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, delimiter=delimiter)
            header = list(columns) if columns is not None else None
            for line, row in enumerate(reader, start=1):
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if header is None or (line == 1 and columns is not None and row == list(columns)):
                    header = [c.strip() for c in row]
                    missing = [c for c in required if c not in header]
                    if missing:
                        raise TraceFormatError(str(self.path), line, f"missing columns {missing}; found {header}")
                    continue
                if len(row) != len(header):
                    self.bad(line, f"expected {len(header)} fields ({','.join(header)}), found {len(row)}")
                    continue
                yield line, dict(zip(header, row))

    def num(self, line: int, row: dict[str, str], col: str, *, default: float | None = None) -> float:
        """A finite number from ``row[col]``; raises ``BadRow`` (reported by the caller)."""
        text = row.get(col, "").strip()
        if text == "" and default is not None:
            return default
        try:
            value = float(text)
        except ValueError:
            raise BadRow(f"{col}={text!r} is not a number") from None
        if not math.isfinite(value):
            raise BadRow(f"{col}={text!r} is not finite")
        return value


class BadRow(Exception):
    """A problem with one row (turned into a TraceFormatError with file and line)."""


def existing(path: Path, what: str = "trace file") -> Path:
    """``path`` if it exists, else a TraceFormatError saying the trace itself is missing."""
    if not path.exists():
        raise TraceFormatError(str(path), 0, f"{what} not found")
    return path


def finish(name: str, jobs: list[Job], nodes: Sequence[Node], rows: Rows) -> Trace:
    if not jobs:
        raise TraceFormatError(str(rows.path), 0, "no replayable jobs in the trace")
    t0 = min(j.arrival_s for j in jobs)
    jobs = sorted((replace(j, arrival_s=j.arrival_s - t0) if t0 else j for j in jobs),
                  key=lambda j: (j.arrival_s, j.job_id))
    return Trace(name=name, jobs=tuple(jobs), nodes=tuple(nodes), skipped_rows=rows.skipped,
                 excluded=dict(rows.excluded))


MAX_NODES = 100_000
"""More nodes than this in a trace is a malformed row (a replay would not fit in memory)."""
MAX_GPUS_PER_NODE = 256
"""More devices than this on one node is a malformed row."""
MAX_JOB_GPUS = 1_000_000


def gpus_demand(value: float) -> float:
    """A GPU demand as the schema wants it: a fraction below one, else whole GPUs (rounded up)."""
    if value > MAX_JOB_GPUS:
        raise BadRow(f"a job asking for {value:g} GPUs (more than {MAX_JOB_GPUS})")
    return value if value < 1 else float(math.ceil(value - 1e-9))


def node_gpus(value: float, col: str) -> int:
    """A node's device count: a whole number in [0, MAX_GPUS_PER_NODE]."""
    if not (0 <= value <= MAX_GPUS_PER_NODE and float(value).is_integer()):
        raise BadRow(f"{col}={value:g} is not a whole number of GPUs in [0, {MAX_GPUS_PER_NODE}]")
    return int(value)


def find_beside(path: Path, name: str) -> Path | None:
    """``name`` in the folder of ``path`` or the one above it, else None."""
    for folder in (path.parent, path.parent.parent):
        if (folder / name).is_file():
            return folder / name
    return None


def parse_time(text: object) -> float | None:
    """'YYYY-MM-DD HH:MM:SS' (UTC) -> epoch seconds; None/'None'/'' -> None."""
    if text is None or str(text).strip() in ("", "None"):
        return None
    try:
        return datetime.strptime(str(text).strip(), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise BadRow(f"time {text!r} is not 'YYYY-MM-DD HH:MM:SS'") from None

