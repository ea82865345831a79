"""``milepost mcp``: the agent tools (``milepost.agent``) as a Model Context
Protocol server over stdio, on the official ``mcp`` SDK.

It uses the SDK's low-level ``Server`` rather than the decorator-based
``MCPServer``: the tool list is generated from milepost's own pydantic input
models (unknown fields are errors, where ``MCPServer`` would drop them
silently) and compacted to fit the token budget, and every answer is the
compact JSON the tools return, also as structured content (each tool
declares its output schema). The server is long-lived: the store is opened
on the first call and kept, so a call costs milliseconds, not a process start.
A call that runs gates (``drive``, ``milestone`` done or verify) runs in a
worker thread with a service of its own: the event loop answers the other
calls meanwhile, and two drives of different items run side by side.
A refusal comes back as a tool error whose text is the CLI's error document
(``{"type": ..., "message": ..., "exit_code": ...}``).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from milepost import __version__
from milepost.agent import TOOLS, call_tool, error_payload, prime, tool_list
from milepost.errors import MilepostError
from milepost.service import Service

__all__ = ["build_server", "runs_gates", "serve_stdio"]

INSTRUCTIONS = (
    "milepost keeps a work item's milestone DAG in a store. Read the `prime` prompt first. Work the lowest-id"
    " ready milestone: milestone start, do the work, milestone done (runs its gate). Only a passing gate makes"
    " a milestone done."
)


class _Session:
    """The store, opened on first use and kept for the server's life."""

    def __init__(self, db: str | None, agent: str | None, operator: bool) -> None:
        self.db, self.agent, self.operator = db, agent, operator
        self._svc: Service | None = None

    @property
    def service(self) -> Service:
        if self._svc is None:
            self._svc = Service.open(self.db, self.agent, operator=self.operator)
            self._svc.keep_cache = True  # long-lived: reuse an item's graph while its revision holds
        return self._svc

    def own(self) -> Service:
        """A service of its own for a call that runs off the event loop (its
        caches are not the loop's), on the same store."""
        svc = self.service
        return Service(
            svc.store, svc.agent, operator=svc.operator, lease_ttl=svc.lease_ttl.total_seconds(), clock=svc.ctx.clock
        )

    def close(self) -> None:
        if self._svc is not None:
            self._svc.close()


def runs_gates(name: str, arguments: dict[str, Any]) -> bool:
    """Whether a tool call may run a gate (``drive``; ``milestone`` done or verify)."""
    return name == "drive" or (name == "milestone" and arguments.get("action") in ("done", "verify"))


def _dump(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), default=str, allow_nan=False)


def build_server(
    db: str | None = None, agent: str | None = None, operator: bool = False
) -> tuple[Server[Any], _Session]:
    session = _Session(db, agent, operator)
    tools = [
        types.Tool(
            name=t["name"], description=t["description"], input_schema=t["inputSchema"], output_schema=t["outputSchema"]
        )
        for t in tool_list()
    ]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        try:
            if runs_gates(params.name, arguments):
                # A gate runs for a while: off the event loop, in a service of its own (on
                # the same store), so the other calls are answered meanwhile, and calls
                # that run gates run side by side (each drive is its own object).
                data = await anyio.to_thread.run_sync(call_tool, session.own(), params.name, arguments)
            else:
                data = call_tool(session.service, params.name, arguments)
        except MilepostError as e:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=_dump(error_payload(e)))], is_error=True
            )
        except Exception as e:
            payload = {"type": "internal", "message": f"internal error: {type(e).__name__}: {e}", "exit_code": 1}
            return types.CallToolResult(content=[types.TextContent(type="text", text=_dump(payload))], is_error=True)
        # The same answer twice, as the protocol asks of a tool with an output
        # schema: structured (for clients that read it) and as text (for those that do not).
        return types.CallToolResult(content=[types.TextContent(type="text", text=_dump(data))], structured_content=data)

    prompt = types.Prompt(
        name="prime",
        description="Briefing: the focused work item, ready milestones, blockers, how to prove work.",
        arguments=[types.PromptArgument(name="item", description="work item id (default: focused)", required=False)],
    )

    async def list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[prompt])

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name != "prime":
            raise ValueError(f"unknown prompt {params.name!r}: use prime")
        raw = (params.arguments or {}).get("item")
        try:
            item = int(raw) if raw else None
            text = prime(session.service, item)
        except (MilepostError, ValueError) as e:
            text = f"milepost: {getattr(e, 'message', str(e))}"
        return types.GetPromptResult(
            description=prompt.description,
            messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
        )

    server: Server[Any] = Server(
        "milepost",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )
    assert set(TOOLS) == {t.name for t in tools}
    return server, session


def serve_stdio(db: str | None = None, agent: str | None = None, operator: bool = False) -> None:
    server, session = build_server(db, agent, operator)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        session.close()
