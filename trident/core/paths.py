"""Output folders checked before any work starts."""
from __future__ import annotations

import os
import tempfile

from trident.core.errors import ConfigError


def writable_dir(path: object, parameter: str) -> str:
    """Create ``path`` (with its parents) if needed and prove a file can be written in it.

    Returns the path; raises :class:`ConfigError` naming ``parameter`` for an empty or
    non-string path, an existing file, or a folder that cannot be created or written.
    """
    valid = "a folder that can be created and written"
    if not isinstance(path, (str, os.PathLike)) or str(path).strip() == "" or "\0" in str(path):
        raise ConfigError(parameter, path, valid)
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(parameter, path, valid + " (it is a file)")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ConfigError(parameter, path, f"{valid} ({exc.strerror or type(exc).__name__})") from None
    return path
