"""`hybrid-gateway bench soak`: sustained mixed traffic, sampled for leaks.

stack.py     emulators + a gateway configured for churn (small cache, fault lanes)
traffic.py   the mix: plain and streamed, repeated and unique, hang-ups, upstream resets
sampler.py   gateway RSS, open fds, asyncio tasks, upstream sockets, every few seconds
analysis.py  a robust slope per series after warm-up, and the verdict
report.py    JSON + Markdown + PNG
runner.py    the run, start to finish
"""
