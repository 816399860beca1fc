"""An MCP server (PyPI `mcp` 2.x, low-level `Server`) whose tool declares an output schema and
answers with structuredContent that fits it or not.

Usage: python structured_server.py [MARKER]

weather(city, broken=False, missing=False): declares `{temperature: number, unit: "C"|"F"}` (both required);
answers `{"temperature": 21.5, "unit": "C"}`, or, when `broken`, `{"temperature": "warm
in CITY"}` (a string, and no unit) as a server with a stale schema does, or, when `missing`,
text content only (no structuredContent), as a server that forgot it does.
"""

import anyio

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

OUTPUT = {
    "type": "object",
    "properties": {"temperature": {"type": "number"}, "unit": {"enum": ["C", "F"]}},
    "required": ["temperature", "unit"],
}


async def list_tools(ctx, params):
    tools = [
        types.Tool(
            name="weather",
            description="The temperature in a city.",
            inputSchema={
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "broken": {"type": "boolean"},
                    "missing": {"type": "boolean"},
                },
                "required": ["city"],
            },
            outputSchema=OUTPUT,
        )
    ]
    return types.ListToolsResult(tools=tools)


async def call_tool(ctx, params):
    arguments = params.arguments or {}
    if arguments.get("missing"):
        return types.CallToolResult(content=[types.TextContent(type="text", text="21.5 C")])
    if arguments.get("broken"):
        structured = {"temperature": f"warm in {arguments.get('city')}"}
    else:
        structured = {"temperature": 21.5, "unit": "C"}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=str(structured))], structuredContent=structured
    )


server = Server("modu-test-structured", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
