"""An ACP agent for tuic's end-to-end tests, written with the official Python SDK
(`agent-client-protocol` from PyPI). tuic launches it as a configured agent (`acp_agents`)
and drives it over stdio.

What a prompt's first word asks for:
  hello    stream chunks and a thought, send a plan, make a tool call with a diff, ask
           permission with three options, read notes.txt and write out.txt through the client,
           then say which option it received ("chose:<optionId>").
  escape   ask the client to read and write outside the cwd (`..`, absolute, a symlink out);
           say how many were refused ("refused:<n>/<tries>").
  flood N  stream N one-character chunks.
  stamp N  stream N chunks, each "<unix ns>|" taken just before it is sent, 1 ms apart
           (the benchmark's chunk → WebSocket latency), then "done".
  markdown stream a markdown message (a heading, bold, a list, a code block, a link) that
           also carries a <script> and an <img onerror>, in small chunks.
  garbage  write a line that is not JSON, then say "survived".
  exit     send one chunk and exit with status 3 mid-turn.
  ask      ask permission (three options) and say what came back.
  run      run `sh -c 'echo tuic-terminal-ok; exit 4'` through terminal/create, wait for its
           exit, read its output, release it; say "term:<exit code>:<output>".
  tools    start the MCP server the client offered in session/new (tuic-bridge) with the
           official MCP SDK and call `session action=list`; say "mcp:<tool>:<is_error>".
  whoami   connect to the offered MCP server (over HTTP when it is an HTTP one, else stdio)
           and call `agent action=register`; say "whoami:<http|stdio>:<tuic_session>".
  inbox    connect likewise, subscribe to tuic://inbox, say "subscribed", wait for
           notifications/resources/updated, read the resource and say "inbox:<newest message>".

With ACP_TEST_HTTP=1 in its environment it advertises mcpCapabilities.http.
  anything else: echo the text.
"""

import asyncio
import json
import os
import sys
import time
import uuid

import acp
from acp.schema import (
    AgentCapabilities,
    Implementation,
    McpCapabilities,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallUpdate,
)

OPTIONS = [
    PermissionOption(option_id="allow", name="Allow once", kind="allow_once"),
    PermissionOption(option_id="always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]


class TestAgent:
    def __init__(self):
        self.conn = None
        self.cwd = {}
        self.mcp = {}

    def on_connect(self, conn):
        self.conn = conn

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kw):
        return InitializeResponse(
            protocol_version=1,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                mcp_capabilities=McpCapabilities(http=os.environ.get("ACP_TEST_HTTP") == "1"),
            ),
            agent_info=Implementation(name="tuic-acp-test-agent", version="1.0"),
        )

    async def new_session(self, cwd, mcp_servers=None, **kw):
        sid = str(uuid.uuid4())
        self.cwd[sid] = cwd
        self.mcp[sid] = list(mcp_servers or [])
        return NewSessionResponse(session_id=sid)

    async def load_session(self, cwd, session_id, mcp_servers=None, **kw):
        # A loaded session uses the MCP servers the client offers now (ACP: session/load
        # carries them as session/new does).
        self.cwd[session_id] = cwd
        self.mcp[session_id] = list(mcp_servers or [])
        return LoadSessionResponse()

    async def authenticate(self, method_id, **kw):
        return None

    async def cancel(self, session_id, **kw):
        return None

    async def say(self, sid, text):
        await self.conn.session_update(session_id=sid, update=acp.update_agent_message_text(text))

    async def ask(self, sid, tool_call_id, title):
        r = await self.conn.request_permission(
            session_id=sid,
            tool_call=ToolCallUpdate(tool_call_id=tool_call_id, title=title, kind="edit", status="pending"),
            options=OPTIONS,
        )
        o = r.outcome
        return getattr(o, "option_id", None) or "cancelled"

    async def prompt(self, prompt, session_id, **kw):
        sid = session_id
        text = " ".join(getattr(b, "text", "") or "" for b in prompt).strip()
        word = text.split(" ")[0] if text else ""
        cwd = self.cwd.get(sid, os.getcwd())
        if word == "hello":
            for part in ["Hel", "lo ", "from ", "the ", "test agent."]:
                await self.say(sid, part)
            await self.conn.session_update(session_id=sid, update=acp.update_agent_thought_text("thinking about notes"))
            await self.conn.session_update(
                session_id=sid,
                update=acp.update_plan([
                    acp.plan_entry("read notes.txt", status="completed"),
                    acp.plan_entry("write out.txt", status="in_progress"),
                    acp.plan_entry("report", status="pending"),
                ]),
            )
            await self.conn.session_update(
                session_id=sid,
                update=acp.start_edit_tool_call("t1", "Edit out.txt", os.path.join(cwd, "out.txt"), "new"),
            )
            await self.conn.session_update(
                session_id=sid,
                update=acp.update_tool_call(
                    "t1",
                    status="in_progress",
                    content=[acp.tool_diff_content(os.path.join(cwd, "out.txt"), "new line\n", "old line\n")],
                ),
            )
            chosen = await self.ask(sid, "t1", "Write out.txt")
            notes = await self.conn.read_text_file(session_id=sid, path=os.path.join(cwd, "notes.txt"))
            await self.conn.write_text_file(
                session_id=sid, path=os.path.join(cwd, "out.txt"), content="agent wrote: " + notes.content
            )
            await self.conn.session_update(session_id=sid, update=acp.update_tool_call("t1", status="completed"))
            await self.say(sid, f"chose:{chosen}")
            return PromptResponse(stop_reason="end_turn")
        if word == "ask":
            chosen = await self.ask(sid, "t2", "Run something")
            await self.say(sid, f"chose:{chosen}")
            return PromptResponse(stop_reason="end_turn")
        if word == "run":
            t = await self.conn.create_terminal(
                session_id=sid, command="sh", args=["-c", "echo tuic-terminal-ok; exit 4"], cwd=cwd
            )
            done = await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=t.terminal_id)
            out = await self.conn.terminal_output(session_id=sid, terminal_id=t.terminal_id)
            await self.conn.release_terminal(session_id=sid, terminal_id=t.terminal_id)
            await self.say(sid, f"term:{done.exit_code}:{out.output.strip()}")
            return PromptResponse(stop_reason="end_turn")
        if word == "tools":
            from mcp import ClientSession, StdioServerParameters
            from mcp.client.stdio import stdio_client

            servers = self.mcp.get(sid) or []
            if not servers:
                await self.say(sid, "mcp:none")
                return PromptResponse(stop_reason="end_turn")
            srv = servers[0]
            env = dict(os.environ)
            for e in srv.env or []:
                env[e.name] = e.value
            params = StdioServerParameters(command=str(srv.command), args=list(srv.args or []), env=env)
            try:
                async with stdio_client(params) as (read, write):
                    async with ClientSession(read, write) as s:
                        await s.initialize()
                        r = await s.call_tool("session", {"action": "list"})
                failed = bool(getattr(r, "is_error", getattr(r, "isError", None)))
                await self.say(sid, f"mcp:{srv.name}:{failed}")
            except BaseException as e:  # noqa: BLE001 - reported to the test as text
                await self.say(sid, f"mcp-error:{e!r}")
            return PromptResponse(stop_reason="end_turn")
        if word in ("whoami", "inbox"):
            try:
                await getattr(self, word)(sid)
            except BaseException as e:  # noqa: BLE001 - reported to the test as text
                await self.say(sid, f"mcp-error:{e!r}")
            return PromptResponse(stop_reason="end_turn")
        if word == "escape":
            tries = [
                ("read", os.path.join(cwd, "..", "secret.txt")),
                ("read", "/etc/hostname"),
                ("read", os.path.join(cwd, "link-out", "secret.txt")),
                ("write", os.path.join(cwd, "..", "planted.txt")),
                ("write", os.path.join(cwd, "link-out", "planted.txt")),
            ]
            refused = 0
            for op, path in tries:
                try:
                    if op == "read":
                        await self.conn.read_text_file(session_id=sid, path=path)
                    else:
                        await self.conn.write_text_file(session_id=sid, path=path, content="x")
                except Exception:
                    refused += 1
            await self.say(sid, f"refused:{refused}/{len(tries)}")
            return PromptResponse(stop_reason="end_turn")
        if word == "flood":
            n = int(text.split(" ")[1])
            for _ in range(n):
                await self.say(sid, "x")
            await self.say(sid, "done")
            return PromptResponse(stop_reason="end_turn")
        if word == "stamp":
            n = int(text.split(" ")[1])
            for _ in range(n):
                await self.say(sid, f"{time.time_ns()}|")
                await asyncio.sleep(0.001)
            await self.say(sid, "done")
            return PromptResponse(stop_reason="end_turn")
        if word == "markdown":
            md = (
                "## Result\n\nThe **build** passed with `cargo test`.\n\n"
                "- first item\n- second item\n\n"
                "```rust\nfn main() { println!(\"<b>hi</b>\"); }\n```\n\n"
                "<script>window.__pwned = 1</script> <img src=x onerror=\"window.__pwned = 2\">\n\n"
                "See [the docs](https://example.com/docs) and [bad](javascript:alert(1))."
            )
            for i in range(0, len(md), 7):
                await self.say(sid, md[i : i + 7])
            return PromptResponse(stop_reason="end_turn")
        if word == "garbage":
            sys.stdout.write("this is not json {\n")
            sys.stdout.flush()
            await self.say(sid, "survived")
            return PromptResponse(stop_reason="end_turn")
        if word == "exit":
            await self.say(sid, "about to exit")
            await asyncio.sleep(0)
            os._exit(3)
        await self.say(sid, f"echo:{text}")
        return PromptResponse(stop_reason="end_turn")


    def mcp_client(self, sid, **kw):
        """The official MCP SDK client on the server offered in session/new: HTTP (with its
        headers) when it is an HTTP one, else the stdio command."""
        from mcp import StdioServerParameters
        from mcp.client.client import Client

        srv = (self.mcp.get(sid) or [None])[0]
        if srv is None:
            raise RuntimeError("no MCP server was offered")
        if getattr(srv, "url", None):
            from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

            headers = {h.name: h.value for h in (srv.headers or [])}
            http = create_mcp_http_client(headers=headers)
            return "http", Client(streamable_http_client(srv.url, http_client=http), mode="legacy", **kw)
        env = dict(os.environ)
        for e in srv.env or []:
            env[e.name] = e.value
        params = StdioServerParameters(command=str(srv.command), args=list(srv.args or []), env=env)
        return "stdio", Client(params, mode="legacy", **kw)

    async def whoami(self, sid):
        kind, client = self.mcp_client(sid)
        async with client as c:
            r = await c.call_tool("agent", {"action": "register"})
        text = "".join(getattr(x, "text", "") for x in r.content)
        me = json.loads(text).get("tuic_session")
        await self.say(sid, f"whoami:{kind}:{me}")

    async def inbox(self, sid):
        from mcp import types

        updated = asyncio.Event()

        async def on_message(m):
            n = m.root if hasattr(m, "root") else m
            if isinstance(n, types.ResourceUpdatedNotification) and str(n.params.uri) == "tuic://inbox":
                updated.set()

        kind, client = self.mcp_client(sid, message_handler=on_message)
        async with client as c:
            await c.subscribe_resource("tuic://inbox")
            await self.say(sid, "subscribed")
            await asyncio.wait_for(updated.wait(), 60)
            r = await c.read_resource("tuic://inbox")
        body = json.loads(r.contents[0].text)
        newest = body["messages"][-1]["message"] if body["messages"] else ""
        await self.say(sid, f"inbox:{newest}")


async def main():
    await acp.run_agent(TestAgent())


if __name__ == "__main__":
    asyncio.run(main())
