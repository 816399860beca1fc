"""An MCP server on the low-level API of PyPI `mcp` 2.x (`mcp.server.lowlevel.Server`), which
answers only the requests it was given handlers for: here `resources/list` and
`resources/read`, so `resources/templates/list` is "method not found" (-32601).

Usage: python lowlevel_server.py [MARKER]
"""

import anyio

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


async def list_resources(ctx, params):
    return types.ListResourcesResult(
        resources=[types.Resource(uri="notes://one", name="one", mimeType="text/plain")]
    )


async def read_resource(ctx, params):
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=str(params.uri), text="note one", mimeType="text/plain")]
    )


server = Server("modu-test-lowlevel", on_list_resources=list_resources, on_read_resource=read_resource)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
