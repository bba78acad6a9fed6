"""hybrid-gateway: answer each LLM request from the cheapest place that is still good enough."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
