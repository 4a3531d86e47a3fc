"""A hand-written stdio MCP server for fault tests (tests/tests/upstream.rs); no SDK, so it can
misbehave on purpose.

usage: upstream_raw.py MODE
  ok       a correct server; tool `rich` returns a CallToolResult with structuredContent,
           isError, _meta and an extension field, to check they pass through unchanged
  garbage  answers every line with text that is not JSON-RPC
  flood    correct, but floods notifications (log messages and tools/list_changed) meanwhile
"""
import json
import sys
import threading
import time

MODE = sys.argv[1]
RICH = {
    "content": [{"type": "text", "text": "rich result", "annotations": {"priority": 0.5}}],
    "structuredContent": {"answer": 42, "nested": {"list": [1, 2, 3]}},
    "isError": True,
    "_meta": {"example.com/trace": "abc"},
    "x-extension": {"kept": True},
}
lock = threading.Lock()


def send(msg):
    with lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def flood():
    for i in range(20000):
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "data": f"noise {i}"}})
        if i % 10 == 0:
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        time.sleep(0.0005)


for line in sys.stdin:
    if MODE == "garbage":
        with lock:
            sys.stdout.write("this is not json-rpc at all\n")
            sys.stdout.flush()
        continue
    msg = json.loads(line)
    mid, method = msg.get("id"), msg.get("method")
    if mid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "raw", "version": "1"}}})
        if MODE == "flood":
            threading.Thread(target=flood, daemon=True).start()
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
            {"name": "rich", "description": "Return a rich result.",
             "inputSchema": {"type": "object", "properties": {}}},
            {"name": "ping_me", "description": "Answer pong.",
             "inputSchema": {"type": "object", "properties": {}}}]}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == "rich":
            send({"jsonrpc": "2.0", "id": mid, "result": RICH})
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "pong"}]}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})
