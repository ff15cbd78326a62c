"""Every test starts blind: trident's history store (on by default) is off unless a test names
one (``trident.autoscale(history=path)``), so runs of the suite never teach each other. The
benchmarks' harness (``benchmarks/harness``) is importable, as the benchmark scripts import it."""
import os
import sys
from pathlib import Path

os.environ["TRIDENT_HISTORY"] = "off"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
