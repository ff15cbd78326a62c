"""The documentation site: ``mkdocs build --strict`` passes (a reference to a name that does
not exist, or a link to a missing file, fails it) and every public name is in the reference."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trident

ROOT = Path(__file__).resolve().parents[2]


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs site needs the dev extra (mkdocs)")
    pytest.importorskip("mkdocstrings_handlers.python", reason="the docs site needs mkdocstrings[python]")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "site" / "reference" / "autoscale" / "index.html").read_text()
    assert "memory_limit" in page and "Run" in page  # rendered from the docstrings


def test_every_public_name_is_in_the_reference_with_a_docstring():
    reference = "\n".join(p.read_text() for p in (ROOT / "docs" / "reference").glob("*.md"))
    for name in trident.__all__:
        if name == "__version__":
            continue
        obj = getattr(trident, name)
        assert (obj.__doc__ or "").strip(), f"trident.{name} has no docstring"
        qualified = f"{obj.__module__}.{obj.__qualname__}" if hasattr(obj, "__qualname__") else obj.__name__
        assert f"::: {qualified}\n" in reference or f"::: {name}\n" in reference, f"trident.{name} ({qualified})"
