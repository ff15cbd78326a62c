"""Parsing of human-written quantities (memory sizes)."""
from __future__ import annotations

import math
import re

from trident.core.errors import ConfigError

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_memory_bytes(value: object, parameter: str = "memory_limit") -> int | None:
    """Return ``value`` in bytes: an int/float of bytes or a string such as ``"16GiB"``, ``"512MB"``.

    ``None`` passes through (no limit). Anything else raises :class:`ConfigError` naming ``parameter``.
    """
    valid = "a finite number of bytes >= 1 or a string like '16GiB', '512MiB', '2GB' (units: " + ", ".join(
        u for u in _UNITS if u) + ")"
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(parameter, value, valid)
    n = None
    if isinstance(value, (int, float)):
        n = float(value)
    elif isinstance(value, str):
        m = _PATTERN.match(value)
        if m and m.group(2).lower() in _UNITS:
            n = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if n is None or not math.isfinite(n) or n < 1:
        raise ConfigError(parameter, value, valid)
    return int(n)
