"""Two official Python MCP SDK clients exchange mail through a tuic node
(used by tests/tests/agent_sdk_mail.rs).

usage: mcp_python_mail.py URL COUNT
Both register, then each sends COUNT messages to the other; the receivers drain with
interleaved `wait` and `inbox` calls (since omitted: the server-side cursor). Prints one JSON
report line; the Rust test asserts on it.
"""
import asyncio
import json
import sys

from mcp.client.client import Client


async def call(c, args):
    r = await c.call_tool("agent", args)
    text = "".join(getattr(x, "text", "") for x in r.content)
    v = json.loads(text)
    if r.is_error:
        raise RuntimeError(f"{args['action']} failed: {v}")
    return v


async def main(url: str, count: int) -> None:
    async with Client(url, mode="legacy") as a, Client(url, mode="legacy") as b:
        ta = (await call(a, {"action": "register", "name": "sdk-a"}))["tuic_session"]
        tb = (await call(b, {"action": "register", "name": "sdk-b"}))["tuic_session"]
        got = {ta: [], tb: []}
        last_since = {ta: 0, tb: 0}
        problems = []

        async def drain(c, me, use_wait):
            if use_wait:
                v = await call(c, {"action": "wait", "timeout_ms": 5000})
                msgs = v["new_messages"]
            else:
                v = await call(c, {"action": "inbox", "limit": 7})
                msgs = v["messages"]
            ns = v["next_since"]
            if msgs and ns <= last_since[me]:
                problems.append(f"next_since did not advance: {ns} <= {last_since[me]}")
            if ns < last_since[me]:
                problems.append(f"next_since went back: {ns} < {last_since[me]}")
            last_since[me] = max(last_since[me], ns)
            got[me].extend(m["message"] for m in msgs)
            return v

        sent = 0
        step = 0
        while sent < count:
            burst = min(5, count - sent)
            for i in range(sent, sent + burst):
                await call(b, {"action": "send", "to": ta, "message": f"b{i}"})
                await call(a, {"action": "send", "to": tb, "message": f"a{i}"})
            sent += burst
            step += 1
            use_wait = step % 2 == 0
            await drain(a, ta, use_wait)
            await drain(b, tb, not use_wait)
        # Drain the rest, bounded.
        for _ in range(count):
            if len(got[ta]) >= count and len(got[tb]) >= count:
                break
            await drain(a, ta, False)
            await drain(b, tb, False)
        timed = await call(a, {"action": "wait", "timeout_ms": 200})
        print(json.dumps({
            "a_got": got[ta],
            "b_got": got[tb],
            "problems": problems,
            "timeout": timed,
            "a_last_since": last_since[ta],
        }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
