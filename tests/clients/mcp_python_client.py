"""Official Python MCP SDK client against a tuic node (used by tests/tests/mcp_sdk_clients.rs).

usage: mcp_python_client.py URL MODE   (MODE: legacy | 2026-07-28 | auto)
Prints one JSON line: {mode, protocol, tools: [names], session_list: {is_error, text}}.
"""
import asyncio
import json
import sys

from mcp.client.client import Client


async def main(url: str, mode: str) -> None:
    async with Client(url, mode=mode) as c:
        tools = await c.list_tools()
        r = await c.call_tool("session", {"action": "list"})
        texts = [getattr(x, "text", "") for x in r.content]
        proto = getattr(c, "protocol_version", None) or getattr(c.session, "protocol_version", None)
        print(json.dumps({
            "mode": mode,
            "protocol": str(proto) if proto else None,
            "tools": [t.name for t in tools.tools],
            "session_list": {"is_error": bool(r.is_error), "text": "".join(texts)},
        }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
