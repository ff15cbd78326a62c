"""Every test starts blind: trident's history store (on by default) is off unless a test names
one (``trident.autoscale(history=path)``), so runs of the suite never teach each other."""
import os

os.environ["TRIDENT_HISTORY"] = "off"
