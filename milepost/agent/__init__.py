"""milepost for coding agents: a handful of tools over the service layer, and
a short briefing (``prime``).

The tools are plain functions of a :class:`~milepost.service.Service` and a
pydantic input model (unknown fields are errors); the MCP server
(``milepost.mcp_server``) only carries them over the protocol, and the tests
can call them directly. Every result is a small JSON-ready dict: an agent
pays for every token it reads. Errors are milepost's own
(:class:`~milepost.errors.MilepostError`), with the CLI's one-line message.

This package imports neither Prefect nor the MCP SDK (the drive tool imports
the flows when it runs).
"""

from milepost.agent.args import DriveArgs, GraphArgs, MilestoneArgs, WaitArgs, WorkItemArgs
from milepost.agent.prime import prime
from milepost.agent.tools import TOOLS, ToolSpec, call_tool, compact_schema, tool_list
from milepost.agent.words import error_payload, tool_words

__all__ = [
    "TOOLS",
    "DriveArgs",
    "GraphArgs",
    "MilestoneArgs",
    "ToolSpec",
    "WaitArgs",
    "WorkItemArgs",
    "call_tool",
    "compact_schema",
    "error_payload",
    "prime",
    "tool_list",
    "tool_words",
]
