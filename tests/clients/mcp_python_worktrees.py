"""The official Python MCP SDK's stdio client manages a worktree through tuic-bridge
(used by tests/tests/worktrees.rs).

usage: mcp_python_worktrees.py BRIDGE PHASE REPO BRANCH
PHASE "create": repo action=worktree_create, worktree_list, then session action=declare_worktree
for the terminal whose TUIC_SESSION the environment carries. PHASE "remove":
worktree_lifecycle, worktree_remove, worktree_list. Prints one JSON line with every answer;
the Rust test asserts. The environment (TUIC_SOCKET, TUIC_SESSION) passes through to the bridge.
"""
import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def decode(result):
    text = "".join(getattr(c, "text", "") for c in result.content)
    try:
        value = json.loads(text)
    except ValueError:
        value = {"text": text}
    return {"is_error": bool(result.is_error), "value": value}


async def main():
    bridge, phase, repo, branch = sys.argv[1:5]
    params = StdioServerParameters(command=bridge, args=[], env=dict(os.environ))
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            tools = await s.list_tools()
            out["tools"] = [t.name for t in tools.tools]
            if phase == "create":
                out["create"] = decode(await s.call_tool(
                    "repo", {"action": "worktree_create", "path": repo, "branch": branch}))
                out["list"] = decode(await s.call_tool(
                    "repo", {"action": "worktree_list", "path": repo}))
                wt = out["create"]["value"].get("worktree_path", "")
                out["declare"] = decode(await s.call_tool(
                    "session", {"action": "declare_worktree", "worktree_path": wt}))
            else:
                out["lifecycle"] = decode(await s.call_tool(
                    "repo", {"action": "worktree_lifecycle", "path": repo, "branch": branch}))
                out["remove"] = decode(await s.call_tool(
                    "repo", {"action": "worktree_remove", "path": repo, "branch": branch}))
                out["list"] = decode(await s.call_tool(
                    "repo", {"action": "worktree_list", "path": repo}))
    print(json.dumps(out), flush=True)


anyio.run(main)
