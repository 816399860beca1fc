"""An MCP server offering resources and prompts (PyPI `mcp` 2.x, low-level `Server`) whose
listings either work or fail.

Usage: python listings_server.py ok|fail [MARKER]

ok: `resources/list` lists `notes://one` and `prompts/list` the prompt `greet`.
fail: both declared, both answered with a JSON-RPC error ("listing broke").
"""

import sys

import anyio

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

FAIL = len(sys.argv) > 1 and sys.argv[1] == "fail"


def broken():
    raise MCPError(code=-32603, message="listing broke")


async def list_resources(ctx, params):
    if FAIL:
        broken()
    return types.ListResourcesResult(resources=[types.Resource(uri="notes://one", name="one")])


async def list_prompts(ctx, params):
    if FAIL:
        broken()
    return types.ListPromptsResult(prompts=[types.Prompt(name="greet")])


server = Server("modu-test-listings", on_list_resources=list_resources, on_list_prompts=list_prompts)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
