"""Curation examples (PDF and video) on Ray Data, their input generators and runner: ``trident demo``."""
