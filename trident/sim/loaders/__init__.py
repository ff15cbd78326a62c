"""One trace loader module per trace family; :mod:`trident.sim.traces` is the entry point."""
