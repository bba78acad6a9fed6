"""Replayable workloads built from real data (see ``schema.py`` for the file format)."""
