"""Shared state for gateway replicas: a key-value seam, in-process and Redis (docs/scale-out.md)."""
