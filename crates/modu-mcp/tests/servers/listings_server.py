"""An MCP server offering resources and prompts (PyPI `mcp` 2.x, low-level `Server`) whose
listings either work or fail.

Usage: python listings_server.py ok|fail|hang [MARKER]
       python listings_server.py wait|signal PATH [MARKER]

ok: `resources/list` lists `notes://one` and `prompts/list` the prompt `greet`.
fail: both declared, both answered with a JSON-RPC error ("listing broke").
hang: both declared, neither answered.
wait: as ok, but each listing answers only once the file `PATH.<method>` exists.
signal: as ok, each listing first creating the file `PATH.<method>` (so a client that asks
one server at a time, the `wait` one first, never gets the `wait` server's answer).
"""

import os
import sys

import anyio

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
FAIL = MODE == "fail"
PATH = sys.argv[2] if MODE in ("wait", "signal") else None


async def before(method):
    if MODE == "hang":
        await anyio.sleep_forever()
    if MODE == "signal":
        with open(f"{PATH}.{method}", "w") as f:
            f.write("asked")
    if MODE == "wait":
        while not os.path.exists(f"{PATH}.{method}"):
            await anyio.sleep(0.05)


def broken():
    raise MCPError(code=-32603, message="listing broke")


async def list_resources(ctx, params):
    await before("resources")
    if FAIL:
        broken()
    return types.ListResourcesResult(resources=[types.Resource(uri="notes://one", name="one")])


async def list_prompts(ctx, params):
    await before("prompts")
    if FAIL:
        broken()
    return types.ListPromptsResult(prompts=[types.Prompt(name="greet")])


server = Server("modu-test-listings", on_list_resources=list_resources, on_list_prompts=list_prompts)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
