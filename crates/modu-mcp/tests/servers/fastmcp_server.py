"""A small MCP server for modu-mcp's tests (PyPI `mcp` 2.x, `MCPServer`, formerly FastMCP).

Usage: python fastmcp_server.py [stdio | http PORT]

Tools:
- weather_forecast(city, days=1) -> dict          (structuredContent)
- shout(text) -> str (structured_output=False)     (text only)
- plain_upper(text) -> str                         (SDK default: structuredContent
                                                    {"result": ...} and a wrapper outputSchema)
- plain_count(items) -> int                        (the same, an integer)
- fail_softly(reason)                              (a ToolError → isError result)
- explode()                                        (an unexpected exception → isError result)
- slow(seconds)                                    (sleeps; for call timeouts)
- whoami() -> dict                                 (the server's process id and argv marker)
"""

import asyncio
import os
import sys

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("modu-test-fastmcp")


@server.tool(description="Return a weather forecast for a city.", structured_output=True)
def weather_forecast(city: str, days: int = 1) -> dict[str, Any]:
    return {"city": city, "days": days, "forecast": [{"day": i + 1, "sky": "sunny"} for i in range(days)]}


@server.tool(description="Repeat the text in upper case.", structured_output=False)
def shout(text: str) -> str:
    return text.upper()


@server.tool(description="Repeat the text in upper case (the SDK wraps the string).")
def plain_upper(text: str) -> str:
    return text.upper()


@server.tool(description="Count the items (the SDK wraps the integer).")
def plain_count(items: list[str]) -> int:
    return len(items)


@server.tool(description="Always fails with a tool error carrying the reason.")
def fail_softly(reason: str) -> str:
    raise ToolError(f"refused: {reason}")


@server.tool(description="Raises an unexpected exception.")
def explode() -> str:
    raise RuntimeError("kaboom")


@server.tool(description="Sleep for some seconds, then answer.", structured_output=True)
async def slow(seconds: float) -> dict[str, Any]:
    await asyncio.sleep(seconds)
    return {"slept": seconds}


@server.tool(description="The server's process id.", structured_output=True)
def whoami() -> dict[str, Any]:
    return {"pid": os.getpid(), "env_marker": os.environ.get("MODU_TEST_MARKER", "")}


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run(transport="stdio")
