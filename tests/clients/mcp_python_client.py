"""Official Python MCP SDK client against a tuic node (used by tests/tests/mcp_sdk_clients.rs).

usage: mcp_python_client.py URL MODE [CWD]   (MODE: legacy | 2026-07-28 | auto)
Prints one JSON line: {mode, protocol, tools: [names], session_list: {is_error, text},
round_trip?: {...}}. With CWD it also runs a real round trip: session create (/bin/sh in CWD),
input (a command plus Enter), output polled until the command's result appears (at most 10 s),
then close.
"""
import asyncio
import json
import sys
import time

from mcp.client.client import Client


def text_of(r) -> str:
    return "".join(getattr(x, "text", "") for x in r.content)


async def round_trip(c, cwd: str) -> dict:
    created = await c.call_tool(
        "session", {"action": "create", "shell": "/bin/sh", "cwd": cwd, "rows": 24, "cols": 80})
    if created.is_error:
        return {"created": False, "error": text_of(created)}
    sid = json.loads(text_of(created))["session_id"]
    wrote = await c.call_tool(
        "session", {"action": "input", "session_id": sid, "input": "echo sdk-$((6*7))",
                    "special_key": "enter"})
    found, last = False, ""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        out = await c.call_tool("session", {"action": "output", "session_id": sid})
        last = json.loads(text_of(out)).get("data", "")
        if "sdk-42" in last:
            found = True
            break
        await asyncio.sleep(0.05)
    closed = await c.call_tool("session", {"action": "close", "session_id": sid})
    return {"created": True, "input_ok": not wrote.is_error, "found": found,
            "output": last[-400:], "closed": not closed.is_error}


async def main(url: str, mode: str, cwd) -> None:
    async with Client(url, mode=mode) as c:
        tools = await c.list_tools()
        r = await c.call_tool("session", {"action": "list"})
        proto = getattr(c, "protocol_version", None) or getattr(c.session, "protocol_version", None)
        report = {
            "mode": mode,
            "protocol": str(proto) if proto else None,
            "tools": [t.name for t in tools.tools],
            "session_list": {"is_error": bool(r.is_error), "text": text_of(r)},
        }
        if cwd:
            report["round_trip"] = await round_trip(c, cwd)
        print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
