"""An MCP server with 100 generated tools, for modu-mcp's lazy-discovery tests.

Usage: python many_tools_server.py [stdio | http PORT] [PREFIX]

Tool `tool_NNN` (000..099) answers {"tool": "tool_NNN", "server": PREFIX, "args": {...}}.
A few tools carry distinctive description words so search can be asserted:
tool_042 mentions "aurora borealis", tool_077 mentions "invoice reconciliation".
"""

import sys

from typing import Any

from mcp.server.mcpserver import MCPServer

transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
prefix = sys.argv[3] if transport == "http" and len(sys.argv) > 3 else (sys.argv[2] if transport != "http" and len(sys.argv) > 2 else "many")
server = MCPServer("modu-test-many-tools")

SPECIAL = {
    42: "Forecast the aurora borealis visibility for a latitude.",
    77: "Run invoice reconciliation for an account.",
}


def make_tool(i: int):
    name = f"tool_{i:03d}"

    def handler(value: str) -> dict[str, Any]:
        return {"tool": name, "server": prefix, "args": {"value": value}}

    handler.__name__ = name
    description = SPECIAL.get(i, f"Generated test tool number {i}.")
    server.add_tool(handler, name=name, description=description)


for i in range(100):
    make_tool(i)


if __name__ == "__main__":
    if transport == "http":
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run(transport="stdio")
