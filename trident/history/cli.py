"""``trident history``: what trident keeps of each operator across runs.

Examples::

    trident history list
    trident history show "MapBatches(OcrPages)"
    trident history forget "MapBatches(OcrPages)"
    trident history clear

The store is ``--path``, else ``TRIDENT_HISTORY``, else ``history.sqlite`` in the user's cache
folder (``~/.cache/trident`` on Linux).
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys

from trident.core.errors import ConfigError
from trident.history.store import ENV, HistoryStore, HistoryUnavailable, default_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "show", "forget", "clear"),
                        help="list: every operator kept; show NAME: its lessons; forget NAME: delete them "
                             "(NAME or its key); clear: delete everything")
    parser.add_argument("name", nargs="?", default=None, help="an operator's name (part of it for list and "
                                                              "show) or its key")
    parser.add_argument("--path", default=None, help=f"the store's file (default: ${ENV} or the user's cache)")


def main(args: argparse.Namespace) -> int:
    path = args.path or default_path()
    if path is None:
        raise ConfigError(ENV, "off", "a path (history is off here; give --path)")
    if args.action in ("show", "forget") and not args.name:
        raise ConfigError("name", None, f"an operator's name or key for 'trident history {args.action}'")
    store = HistoryStore(path)
    try:
        print(_run(store, args))
    except HistoryUnavailable as exc:
        print(f"trident history: {exc}", file=sys.stderr)
        return 1
    return 0


def _run(store: HistoryStore, args: argparse.Namespace) -> str:
    if args.action == "clear":
        return f"{store.clear()} lessons deleted from {store.path}"
    if args.action == "forget":
        return f"{store.forget(args.name)} lessons of {args.name!r} deleted from {store.path}"
    entries = store.entries(args.name)
    if not entries:
        return f"nothing kept in {store.path}" + (f" for {args.name!r}" if args.name else "")
    if args.action == "list":
        by_key: dict[str, list] = {}
        for e in entries:
            by_key.setdefault(e.key, []).append(e)
        lines = [f"{len(by_key)} operators, {len(entries)} lessons in {store.path}", ""]
        for key, es in by_key.items():
            lines.append(f"{es[0].name}  [{key}]  {len(es)} run(s), last {_when(es[0].at_unix_s)} "
                         f"(run {es[0].run})  in {es[0].pipeline}")
        return "\n".join(lines)
    lines = []
    for e in entries:
        lines += [f"{e.name}  [{e.key}]  run {e.run}, {_when(e.at_unix_s)}", f"  pipeline: {e.pipeline}",
                  f"  {e.summary}", ""]
    return "\n".join(lines).rstrip()


def _when(unix_s: float) -> str:
    return dt.datetime.fromtimestamp(unix_s).strftime("%Y-%m-%d %H:%M:%S")
