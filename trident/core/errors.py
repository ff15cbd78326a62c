"""Errors raised by trident. Every one names what was wrong and where."""
from __future__ import annotations


class TridentError(Exception):
    """Base class of every error trident raises on purpose.

    Picklable whatever the offending value was (a value that cannot travel is kept as its
    ``repr``), so an error raised inside a Ray actor reaches the driver as itself.
    """

    def __reduce__(self):
        return _restore, (type(self), self.args, {k: _portable(v) for k, v in self.__dict__.items()})


def _portable(value: object) -> object:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(_portable(v) for v in value)
    return repr(value)


def _restore(cls: type, args: tuple, state: dict) -> "TridentError":
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


class ConfigError(TridentError, ValueError):
    """A parameter has a value trident cannot use.

    The message names the parameter, the value given and what is valid.
    """

    def __init__(self, parameter: str, value: object, valid: str) -> None:
        self.parameter = parameter
        self.value = value
        self.valid = valid
        super().__init__(f"{parameter}={value!r} is not valid; expected {valid}")


class UnknownNameError(TridentError, KeyError):
    """A name looked up in a registry is not registered."""

    def __init__(self, kind: str, name: str, valid: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = valid
        super().__init__(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(sorted(valid)) or '(none)'}")

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message plain
        return self.args[0]


class TraceFormatError(TridentError, ValueError):
    """A trace file has a row trident cannot parse; names the file and line."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        self.path = path
        self.line = line
        super().__init__(f"{path}:{line}: {problem}")
