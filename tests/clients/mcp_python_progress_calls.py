"""The official Python MCP SDK calls a tool that reports progress N times and counts the
progress it received before each result (used by tests/tests/mcp_progress_stream.rs).

usage: mcp_python_progress_calls.py http URL TOOL STEPS N
       mcp_python_progress_calls.py bridge BRIDGE_BINARY TOOL STEPS N
`http` connects over Streamable HTTP (legacy session); `bridge` runs tuic-bridge over stdio
(the environment, TUIC_SOCKET and TUIC_SESSION, passes through). Prints one JSON line:
{calls, errors, progress_per_call: {count: calls}, lost, seconds}.
"""
import asyncio
import json
import os
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.client import Client
from mcp.client.stdio import stdio_client


async def run_calls(call, steps: int, n: int) -> dict:
    per_call = {}
    errors = 0
    started = time.monotonic()
    for _ in range(n):
        seen = []

        async def on_progress(progress, total, message, seen=seen):
            seen.append(progress)

        r = await call(on_progress)
        if r.is_error:
            errors += 1
        per_call[len(seen)] = per_call.get(len(seen), 0) + 1
    lost = sum((steps - k) * c for k, c in per_call.items() if k < steps)
    return {"calls": n, "errors": errors, "progress_per_call": per_call, "lost": lost,
            "seconds": time.monotonic() - started}


async def main(kind: str, target: str, tool: str, steps: int, n: int) -> None:
    args = {"steps": steps}
    if kind == "http":
        async with Client(target, mode="legacy") as c:
            report = await run_calls(lambda cb: c.call_tool(tool, args, progress_callback=cb), steps, n)
    else:
        params = StdioServerParameters(command=target, args=[], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                report = await run_calls(lambda cb: s.call_tool(tool, args, progress_callback=cb), steps, n)
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
