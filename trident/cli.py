"""The ``trident`` command line. Each subcommand lives in its own module, imported on use.

Every bad argument is one line on stderr and exit status 2, before Ray starts or any work begins.
"""
from __future__ import annotations

import argparse
import sys
from importlib import import_module

from trident.core.cli_args import Parser, describe
from trident.core.errors import TridentError

# subcommand -> (module with add_arguments(parser) and main(args) -> int, one-line help)
SUBCOMMANDS = {
    "demo": ("trident.demos.cli", "run a curation example (pdf or video) on an embedded local Ray"),
    "simulate": ("trident.sim.cli", "replay a GPU-cluster trace through job-layer policies"),
    "status": ("trident.jobs.arbiter.cli", "the runs sharing this Ray cluster: budgets, progress, order (read only)"),
    "history": ("trident.history.cli", "list, show, forget or clear what trident keeps of each operator across runs"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="trident", description="trident: Ray Data pipelines fast and OOM-free without hand "
                                                "tuning, and a GPU cluster shared well. Run 'trident COMMAND "
                                                "--help' for a command's options.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for name, (module, help_text) in SUBCOMMANDS.items():
        try:
            mod = import_module(module)
        except ImportError as exc:  # a subcommand whose optional dependencies are missing
            p = sub.add_parser(name, help=help_text, description=help_text)
            p.set_defaults(_module=module, _import_error=str(exc))
            continue
        p = sub.add_parser(name, help=help_text, description=describe(mod.__doc__))
        p.set_defaults(_module=module)
        mod.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "_import_error", None):
        print(f"trident {args.command}: unavailable ({args._import_error}); "
              "install the extras: pip install 'trident[examples]'", file=sys.stderr)
        return 2
    try:
        return int(import_module(args._module).main(args) or 0)
    except TridentError as exc:
        print(f"trident {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
