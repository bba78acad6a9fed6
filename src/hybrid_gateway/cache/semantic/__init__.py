"""The semantic cache: answers to questions that mean the same, calibrated to a false-hit bound.

See docs/semantic-cache.md; the pipeline stage is ``stage.py``, the runtime builds it in
``build.py``.
"""
