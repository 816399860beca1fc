"""An MCP server whose pagination goes round in a circle (PyPI `mcp` 2.x, low-level `Server`):
every page of `tools/list`, `resources/list` and `prompts/list` carries the next cursor
"again", as a server that always sets one does.

Usage: python circular_cursor_server.py [MARKER]
"""

import anyio

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


async def list_tools(ctx, params):
    tools = [types.Tool(name="ping", description="Answer pong.", inputSchema={"type": "object"})]
    return types.ListToolsResult(tools=tools, nextCursor="again")


async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="pong")])


async def list_resources(ctx, params):
    resources = [types.Resource(uri="notes://one", name="one")]
    return types.ListResourcesResult(resources=resources, nextCursor="again")


async def list_prompts(ctx, params):
    return types.ListPromptsResult(prompts=[types.Prompt(name="greet")], nextCursor="again")


server = Server(
    "modu-test-circular-cursor",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_list_prompts=list_prompts,
)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
