"""The history store: what each operator taught trident, kept per operator key across runs, in
one SQLite file (WAL mode: readers never wait for a writer, writers of several processes take
turns). Nothing to start: the file is created on first use.

Where: ``trident.autoscale(history=PATH)``, else the ``TRIDENT_HISTORY`` environment variable
(a path, or ``off``), else ``history.sqlite`` in the user's cache folder (``platformdirs``:
``$XDG_CACHE_HOME/trident`` or ``~/.cache/trident`` on Linux). Every failure to open, read or
write the store (corrupt, locked, full, read-only) raises :class:`HistoryUnavailable`; the
caller warns and runs without history.

Bounded: each operator key keeps its ``KEEP_RUNS`` latest runs, and the store its
``KEEP_ROWS`` latest lessons over all keys (older ones are deleted as new ones come in).
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from trident.core.model.prior import OperatorPrior, RegimePrior

SCHEMA_VERSION = 1
KEEP_RUNS = 5
KEEP_ROWS = 5000
ENV = "TRIDENT_HISTORY"
OFF = ("off", "0", "false", "no", "")


class HistoryUnavailable(RuntimeError):
    """The store cannot be used now (the run goes on without history)."""


def default_path() -> Path | None:
    """The store's path when none is given: ``TRIDENT_HISTORY`` (``None`` when it says off),
    else the user's cache folder."""
    env = os.environ.get(ENV)
    if env is not None:
        return None if env.strip().lower() in OFF else Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("trident")) / "history.sqlite"


@dataclass(frozen=True)
class RunEntry:
    """One run of one operator key as the store lists it."""

    key: str
    name: str
    run: str
    at_unix_s: float
    pipeline: str
    summary: str


class HistoryStore:
    """The SQLite store at ``path`` (see the module docstring)."""

    def __init__(self, path: str | os.PathLike, *, timeout_s: float = 2.0) -> None:
        self.path = Path(path).expanduser()
        self.timeout_s = timeout_s

    def _connect(self, *, repair: bool = False) -> sqlite3.Connection:
        """An open connection; with ``repair``, a file that is not a database is moved aside
        (``.corrupt-<unix time>``) and a new store begins."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
            try:
                con.execute("PRAGMA journal_mode=WAL")
                version = con.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.DatabaseError as exc:
                con.close()
                if not repair or isinstance(exc, sqlite3.OperationalError):  # locked or busy: not corrupt
                    raise
                self.path.rename(self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}"))
                return self._connect()
            if version != SCHEMA_VERSION:
                self._create(con)
            return con
        except (sqlite3.Error, OSError) as exc:
            raise HistoryUnavailable(f"{self.path}: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def _create(con: sqlite3.Connection) -> None:
        """Create the tables; a store of another schema version starts anew (its lessons were
        read by another trident and are not migrated)."""
        con.execute("BEGIN IMMEDIATE")
        try:
            if con.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                con.execute("DROP TABLE IF EXISTS lessons")
                con.execute("CREATE TABLE lessons (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, "
                            "name TEXT NOT NULL, run TEXT NOT NULL, at REAL NOT NULL, pipeline TEXT NOT NULL, "
                            "summary TEXT NOT NULL, body TEXT NOT NULL)")
                con.execute("CREATE INDEX lessons_key ON lessons (key, at)")
                con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def _run(self, fn, *, repair: bool = False):
        con = self._connect(repair=repair)
        try:
            return fn(con)
        except (sqlite3.Error, OSError, ValueError, KeyError, TypeError) as exc:
            raise HistoryUnavailable(f"{self.path}: {type(exc).__name__}: {exc}") from exc
        finally:
            con.close()

    # -- reading ---------------------------------------------------------------------------

    def priors(self, keys: dict[str, str]) -> dict[str, OperatorPrior]:
        """For each operator name -> key, its prior: the latest run's regimes first, then the
        other runs' (newest first), with the latest cold start and selectivity."""
        def read(con):
            out = {}
            for name, key in keys.items():
                rows = con.execute("SELECT run, body FROM lessons WHERE key = ? ORDER BY at DESC, id DESC",
                                   (key,)).fetchall()
                if rows:
                    priors = [_decode(body) for _, body in rows]
                    latest = priors[0]
                    regimes = tuple(r for p in priors for r in p.regimes)
                    out[name] = OperatorPrior(name=name, run=rows[0][0], regimes=regimes,
                                              cold_start_s=latest.cold_start_s, selectivity=latest.selectivity,
                                              runs=len(rows))
            return out
        return self._run(read)

    def entries(self, name: str | None = None) -> list[RunEntry]:
        """Every lesson kept, newest first; those of operators whose name contains ``name``."""
        def read(con):
            rows = con.execute("SELECT key, name, run, at, pipeline, summary FROM lessons ORDER BY at DESC, id DESC")
            return [RunEntry(*r) for r in rows if name is None or name in r[1]]
        return self._run(read)

    def body(self, key: str) -> list[OperatorPrior]:
        """The lessons kept under ``key``, newest first."""
        return self._run(lambda con: [_decode(b) for (b,) in con.execute(
            "SELECT body FROM lessons WHERE key = ? ORDER BY at DESC, id DESC", (key,))])

    # -- writing ---------------------------------------------------------------------------

    def add(self, lessons: dict[str, OperatorPrior], keys: dict[str, str], *, pipeline: str,
            at_unix_s: float | None = None) -> int:
        """Keep one execution's lessons (operator name -> prior) under their keys; returns how many."""
        at = time.time() if at_unix_s is None else at_unix_s
        todo = [(keys[n], n, p) for n, p in lessons.items() if n in keys]

        def write(con):
            con.execute("BEGIN IMMEDIATE")
            try:
                for key, name, p in todo:
                    con.execute("INSERT INTO lessons (key, name, run, at, pipeline, summary, body) "
                                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                                (key, name, p.run, at, pipeline, _summary(p), json.dumps(asdict(p))))
                    con.execute("DELETE FROM lessons WHERE key = ? AND id NOT IN (SELECT id FROM lessons "
                                "WHERE key = ? ORDER BY at DESC, id DESC LIMIT ?)", (key, key, KEEP_RUNS))
                con.execute("DELETE FROM lessons WHERE id NOT IN (SELECT id FROM lessons ORDER BY at DESC, "
                            "id DESC LIMIT ?)", (KEEP_ROWS,))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            return len(todo)
        return self._run(write, repair=True)

    def forget(self, name: str) -> int:
        """Delete the lessons of operators whose name or key is ``name``; returns how many."""
        return self._run(lambda con: con.execute("DELETE FROM lessons WHERE name = ? OR key = ?",
                                                 (name, name)).rowcount)

    def clear(self) -> int:
        return self._run(lambda con: con.execute("DELETE FROM lessons").rowcount)


def _summary(p: OperatorPrior) -> str:
    parts = []
    for i, r in enumerate(p.regimes):
        rates = ", ".join(f"{_config_text(c)} {r.rate(c):.3g}" for c, _ in r.rates)
        typed = "".join(f"; on {t} {v:.3g}" for t, v in r.typed)
        parts.append(f"regime {i + 1}: {rates}{typed} rows/s per replica")
    if p.cold_start_s is not None:
        parts.append(f"cold start {p.cold_start_s:.1f} s")
    return "; ".join(parts)


def _config_text(c) -> str:
    batch, device, gpus = c
    return f"{device}" + (f" x{gpus:g} GPU" if gpus else "") + (f" batch {batch}" if batch else "")


def _decode(body: str) -> OperatorPrior:
    d = json.loads(body)
    regimes = tuple(RegimePrior(rates=tuple((tuple(c), tuple(w)) for c, w in r["rates"]),
                                typed=tuple((t, v) for t, v in r["typed"]),
                                heap=tuple((tuple(c), h) for c, h in r["heap"]),
                                bytes_per_row=r["bytes_per_row"]) for r in d["regimes"])
    return OperatorPrior(name=d["name"], run=d["run"], regimes=regimes, cold_start_s=d["cold_start_s"],
                         selectivity=d["selectivity"], runs=d.get("runs", 1))
