"""An upstream MCP server built with the official Python SDK (MCPServer, formerly FastMCP),
used by tests/tests/upstream.rs as a real upstream behind tuic.

usage: upstream_server.py stdio | http PORT
Tools: echo, add (structured), get_secret (tests deny it), progress_steps (reports progress),
hang (never answers), crash (the process exits).
"""
import asyncio
import os
import sys
from typing import TypedDict

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("tuic-test-upstream")


@server.tool()
def echo(text: str) -> str:
    """Echo the given text back unchanged."""
    return f"echo: {text}"


class Sum(TypedDict):
    sum: int


@server.tool()
def add(a: int, b: int) -> Sum:
    """Add two numbers and return their sum."""
    return {"sum": a + b}


@server.tool()
def get_secret() -> str:
    """Return a secret value (tests hide it with a deny filter)."""
    return "the secret"


@server.tool()
async def progress_steps(steps: int, ctx: Context) -> str:
    """Report progress for each step, then finish."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        await asyncio.sleep(0.05)
    return f"done {steps}"


@server.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.sleep(3600)
    return "late"


@server.tool()
def crash() -> str:
    """Exits the server process."""
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
