"""What every ``trident`` subcommand shares: a parser whose errors are one line, argument types
that refuse bad values while parsing (before Ray starts or any work begins), and a quiet solver."""
from __future__ import annotations

import argparse
import math
from typing import Callable

from trident.core.errors import ConfigError


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Descriptions kept as written; each option's default shown after its help (unless it has none)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action)


def describe(docstring: str) -> str:
    """A module docstring as a ``--help`` description (reStructuredText markup removed)."""
    return docstring.replace("``", "").replace("::", ":")


class Parser(argparse.ArgumentParser):
    """An argument parser that shows defaults in ``--help`` and reports a bad argument in one line."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def integer(low: int) -> Callable[[str], int]:
    """An argument type: an integer >= ``low``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {low}")
        return value
    return parse


def number(*, above: float | None = None, at_least: float | None = None,
           at_most: float | None = None) -> Callable[[str], float]:
    """An argument type: a finite number within the given bounds."""
    bounds = " and ".join(s for s in (f"> {above:g}" if above is not None else "",
                                      f">= {at_least:g}" if at_least is not None else "",
                                      f"<= {at_most:g}" if at_most is not None else "") if s)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if (not math.isfinite(value) or (above is not None and not value > above)
                or (at_least is not None and value < at_least) or (at_most is not None and value > at_most)):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number" + (f" {bounds}" if bounds else ""))
        return value
    return parse


def memory_size(text: str) -> str:
    """An argument type: a memory size such as ``8GiB`` (kept as written)."""
    from trident.core.units import parse_memory_bytes

    try:
        parse_memory_bytes(text, "memory")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not {exc.valid}") from None
    return text


def output_dir(path: str, option: str) -> str:
    """Create ``path`` and check it can be written, naming the CLI ``option`` if not."""
    from trident.core.paths import writable_dir

    try:
        return writable_dir(path, option)
    except ConfigError as exc:
        raise ConfigError(option, path, exc.valid) from None


def silence_solver_banner() -> None:
    """Keep HiGHS's start-up banner out of a command's output (see :func:`trident.core.solver.silence_banner`)."""
    from trident.core.solver import silence_banner

    silence_banner()
