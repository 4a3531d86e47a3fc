"""An agent (official Python MCP SDK client) that uses upstream tools through tuic
(tests/tests/upstream.rs).

usage: upstream_agent.py URL CALLS_JSON   where CALLS_JSON is [[tool, arguments], ...]
Prints one JSON line: {tools: [names], calls: [{name, is_error, text, structured, progress}]}.
"""
import asyncio
import json
import sys

from mcp.client.client import Client


async def main(url, calls):
    async with Client(url, mode="legacy") as c:
        tools = await c.list_tools()
        out = []
        for name, args in calls:
            seen = []

            async def on_progress(progress, total, message, seen=seen):
                seen.append([progress, total, message])

            r = await c.call_tool(name, args, progress_callback=on_progress)
            out.append({
                "name": name,
                "is_error": bool(r.is_error),
                "text": "".join(getattr(x, "text", "") for x in r.content),
                "structured": r.structured_content,
                "progress": seen,
            })
        print(json.dumps({"tools": [t.name for t in tools.tools], "calls": out}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
