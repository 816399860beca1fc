"""An MCP server whose tools change while a client is connected (PyPI `mcp` 2.x, MCPServer).

Usage: python dynamic_tools_server.py stdio [MARKER]

Tools:
- add_tool(name)     registers a tool `name` (it answers "<name> is here") and sends
                     notifications/tools/list_changed before answering
- remove_tool(name)  removes tool `name` and sends notifications/tools/list_changed
- ping()             answers "pong"
"""

import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("modu-test-dynamic")


@server.tool(description="Answer pong.", structured_output=False)
def ping() -> str:
    return "pong"


def make_tool(name: str):
    def tool() -> str:
        return f"{name} is here"

    return tool


@server.tool(description="Add a tool with this name, then announce the changed tool list.", structured_output=False)
async def add_tool(name: str, ctx: Context) -> str:
    server.add_tool(make_tool(name), name=name, description=f"The {name} tool, added at run time.", structured_output=False)
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool(description="Remove the tool with this name, then announce the changed tool list.", structured_output=False)
async def remove_tool(name: str, ctx: Context) -> str:
    server.remove_tool(name)
    await ctx.session.send_tool_list_changed()
    return f"removed {name}"


if __name__ == "__main__":
    server.run(transport="stdio")
