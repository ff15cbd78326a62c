"""The ``trident`` command line. Each subcommand lives in its own module, imported on use."""
from __future__ import annotations

import argparse
import sys
from importlib import import_module

# subcommand -> (module with add_arguments(parser) and main(args) -> int, one-line help)
SUBCOMMANDS = {
    "demo": ("trident.demos.cli", "run a curation example (pdf or video) on an embedded local Ray"),
    "simulate": ("trident.sim.cli", "replay a GPU-cluster trace through job-layer policies"),
    "bench": ("trident.demos.bench_cli", "run the pipeline benchmark (trident vs Ray Data's autoscaler)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trident", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module)
        try:
            import_module(module).add_arguments(p)
        except ImportError as exc:  # a subcommand whose optional dependencies are missing
            p.set_defaults(_import_error=str(exc))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "_import_error", None):
        print(f"trident {args.command}: unavailable ({args._import_error}); "
              "install the extras: pip install 'trident[examples]'", file=sys.stderr)
        return 2
    return int(import_module(args._module).main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
