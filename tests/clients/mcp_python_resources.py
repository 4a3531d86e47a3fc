"""The official Python MCP SDK client uses a tuic node's resources, prompts, logging and
completion (used by tests/tests/mcp_features.rs).

usage: mcp_python_resources.py URL CWD ROUNDS
Creates a /bin/sh session, subscribes to its screen resource, then ROUNDS times types a
marker and measures how long until `notifications/resources/updated` arrives for it, and
reads the screen until it shows the marker. Sets the logging level and collects the
`notifications/message` of a tool call; lists and gets prompts; completes an agent name and
a session alias. Prints one JSON report line; the Rust test asserts.
"""
import asyncio
import json
import sys
import time

from mcp import types
from mcp.client.client import Client


def text_of(r) -> str:
    return "".join(getattr(x, "text", "") for x in r.content)


async def main(url: str, cwd: str, rounds: int) -> None:
    updated: list = []  # (monotonic time, uri)
    got_update = asyncio.Event()
    logs: list = []

    list_changed = asyncio.Event()

    async def on_message(m) -> None:
        n = m.root if hasattr(m, "root") else m
        if isinstance(n, types.ResourceUpdatedNotification):
            updated.append((time.monotonic(), n.params.uri))
            got_update.set()
        elif isinstance(n, types.ResourceListChangedNotification):
            list_changed.set()

    async def on_log(p) -> None:
        logs.append({"level": p.level, "logger": p.logger, "data": p.data})

    async with Client(url, mode="legacy", message_handler=on_message, logging_callback=on_log) as c:
        caps = c.server_capabilities.model_dump(exclude_none=True)
        created = await c.call_tool(
            "session", {"action": "create", "shell": "/bin/sh", "cwd": cwd, "rows": 50, "cols": 200})
        made = json.loads(text_of(created))
        alias = made.get("alias") or made["session_id"]
        # The new session's resources are announced.
        try:
            await asyncio.wait_for(list_changed.wait(), 10)
            announced = True
        except asyncio.TimeoutError:
            announced = False
        resources = await c.list_resources()
        uris = [r.uri for r in resources.resources]
        templates = await c.list_resource_templates()
        screen_uri = f"tuic://sessions/{alias}/screen"
        await c.subscribe_resource(screen_uri)
        latencies = []
        seen_all = True
        for i in range(rounds):
            mark = f"mark-{i}-{i * 7}"
            got_update.clear()
            before = len(updated)
            t0 = time.monotonic()
            await c.call_tool("session", {"action": "input", "session_id": alias,
                                          "input": f"echo {mark}", "special_key": "enter"})
            while True:
                await asyncio.wait_for(got_update.wait(), 10)
                got_update.clear()
                hit = [t for (t, u) in updated[before:] if u == screen_uri and t >= t0]
                if hit:
                    latencies.append((hit[0] - t0) * 1000.0)
                    break
            # The screen shows the marker's output (the echo line and its result).
            deadline = time.monotonic() + 10
            shown = False
            while time.monotonic() < deadline:
                r = await c.read_resource(screen_uri)
                text = "".join(getattr(x, "text", "") for x in r.contents)
                if text.count(mark) >= 2:
                    shown = True
                    break
                got_update.clear()
                try:
                    await asyncio.wait_for(got_update.wait(), 2)
                except asyncio.TimeoutError:
                    pass
            seen_all = seen_all and shown
        await c.unsubscribe_resource(screen_uri)
        out_uri = f"tuic://sessions/{alias}/output?limit=5"
        out = await c.read_resource(out_uri)
        output = json.loads(out.contents[0].text)

        await c.set_logging_level("info")
        await c.call_tool("session", {"action": "list"})
        await c.call_tool("session", {"action": "status", "session_id": "no-such-session"})
        deadline = time.monotonic() + 10
        while len(logs) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

        prompts = await c.list_prompts()
        got = await c.get_prompt("spawn_reviewer", {"worktree": cwd, "agent": "codex"})
        agent = await c.complete(types.PromptReference(name="hand_off_task"),
                                 {"name": "agent", "value": "co"})
        aliases = await c.complete(types.ResourceTemplateReference(uri="tuic://sessions/{alias}/screen"),
                                   {"name": "alias", "value": alias[:2]})
        await c.call_tool("session", {"action": "close", "session_id": alias})
        latencies.sort()
        print(json.dumps({
            "capabilities": caps,
            "alias": alias,
            "list_changed": announced,
            "uris": uris,
            "templates": [t.uri_template for t in templates.resource_templates],
            "latencies_ms": latencies,
            "p50_ms": latencies[len(latencies) // 2] if latencies else None,
            "screens_shown": seen_all,
            "output_keys": sorted(output.keys()),
            "logs": logs,
            "prompts": [p.name for p in prompts.prompts],
            "prompt_text": got.messages[0].content.text,
            "complete_agent": agent.completion.values,
            "complete_alias": aliases.completion.values,
        }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
