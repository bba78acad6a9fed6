"""`hybrid-gateway bench overhead`: the gateway's pass-through cost against a bare aiohttp proxy.

Modules: ``cli`` (the command), ``bare_proxy`` (the reference relay), ``wrk`` (Lua script and
output parsing), ``procstat`` (CPU/RSS of a pid), ``report`` (JSON + Markdown); for
``--pipeline full``: ``full`` (the run), ``full_args``, ``prompts``, ``openloop``, ``stages``
(in-process CPU by stage), ``full_report``.  Only stdlib-only names are re-exported here, so
importing the package stays cheap; the CLI entry point is ``hybrid_gateway.tools.overhead.cli``.
"""

from hybrid_gateway.tools.overhead.procstat import (
    ProcessSampler,
    ProcessSnapshot,
    ProcessUsage,
    read_process,
)
from hybrid_gateway.tools.overhead.report import LevelResult, build_report, render_markdown
from hybrid_gateway.tools.overhead.wrk import WrkResult, lua_script, parse_wrk_output

__all__ = [
    "LevelResult",
    "ProcessSampler",
    "ProcessSnapshot",
    "ProcessUsage",
    "WrkResult",
    "build_report",
    "lua_script",
    "parse_wrk_output",
    "read_process",
    "render_markdown",
]
