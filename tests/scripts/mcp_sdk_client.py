"""Drives tuic-bridge with the official Python MCP SDK's stdio client, for end-to-end tests.

usage: mcp_sdk_client.py BRIDGE TOOL ARGS_JSON

Prints one JSON line per step on stdout: {"event": "initialized"}, {"event": "tools"},
{"event": "call"}; then waits for a line on stdin (the harness restarts the node), calls the
tool until it succeeds (at most 10 s) and prints {"event": "after_restart"}. The environment
(TUIC_SOCKET, TUIC_SESSION, ...) passes through to the bridge.
"""

import json
import os
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def out(obj):
    print(json.dumps(obj), flush=True)


def text_of(result):
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def main():
    bridge, tool, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    params = StdioServerParameters(command=bridge, args=[], env=dict(os.environ))
    inits = []

    async def on_message(message):
        inits.append(repr(message)[:200])

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            out({"event": "initialized", "server": init.server_info.name,
                 "version": init.protocol_version})
            tools = await session.list_tools()
            out({"event": "tools", "names": [t.name for t in tools.tools]})
            result = await session.call_tool(tool, args)
            out({"event": "call", "is_error": bool(result.is_error), "text": text_of(result)})
            await anyio.to_thread.run_sync(sys.stdin.readline)
            started = time.monotonic()
            while True:
                result = await session.call_tool(tool, args)
                elapsed = time.monotonic() - started
                if not result.is_error or elapsed > 10:
                    break
                await anyio.sleep(0.2)
            out({"event": "after_restart", "is_error": bool(result.is_error),
                 "text": text_of(result), "elapsed": elapsed,
                 "notifications": len(inits)})


anyio.run(main)
