"""Curation examples (PDF and video) on Ray Data, their input generators, and the pipeline
benchmark's calibrated stand-ins. Used by ``trident demo`` and ``trident bench``."""
