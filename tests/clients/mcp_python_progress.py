"""The official Python MCP SDK client reports progress through a tuic node
(used by tests/tests/progress.rs).

usage: mcp_python_progress.py URL NAME REPO REPORTS_JSON
Registers as NAME working in REPO, sends each report of REPORTS_JSON (a list of progress
arguments objects) in order, then a few bad reports, then reads the journal back page by page
with repo action=progress_list (limit 3). Prints one JSON report line; the Rust test asserts.
"""
import asyncio
import json
import sys

from mcp.client.client import Client


def text_of(r) -> str:
    return "".join(getattr(x, "text", "") for x in r.content)


async def call(c, name, args):
    try:
        r = await c.call_tool(name, args)
    except Exception as e:  # a client-side schema check counts as a refusal too
        return {"is_error": True, "client_refused": str(e)}
    t = text_of(r)
    try:
        v = json.loads(t)
    except ValueError:
        v = {"text": t}
    return {"is_error": bool(r.is_error), "value": v}


async def main(url, name, repo, reports):
    async with Client(url, mode="legacy") as c:
        tools = await c.list_tools()
        schema = next((getattr(t, "input_schema", None) or getattr(t, "inputSchema", None)
                       for t in tools.tools if t.name == "progress"), None)
        reg = await call(c, "agent", {"action": "register", "name": name, "path": repo})
        sent = [await call(c, "progress", r) for r in reports]
        bad = {
            "intent": await call(c, "progress", {"type": "intent", "text": "claimed"}),
            "unknown_type": await call(c, "progress", {"type": "working", "text": "x"}),
            "too_long": await call(c, "progress", {"type": "done", "text": "x" * 501}),
            "extra": await call(c, "progress", {"type": "done", "text": "x", "path": repo}),
        }
        pages, cursor = [], None
        while True:
            inp = {"limit": 3}
            if cursor is not None:
                inp["cursor"] = cursor
            p = await call(c, "repo", {"action": "progress_list", "path": repo, "input": inp})
            pages.append(p)
            if p["is_error"]:
                break
            cursor = p["value"].get("nextCursor")
            if cursor is None or len(pages) > 50:
                break
        print(json.dumps({"schema": schema, "register": reg, "sent": sent, "bad": bad,
                          "pages": pages}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))
