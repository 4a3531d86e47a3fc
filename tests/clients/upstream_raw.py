"""A hand-written stdio MCP server for fault tests (tests/tests/upstream.rs); no SDK, so it can
misbehave on purpose.

usage: upstream_raw.py MODE
  ok       a correct server; tool `rich` returns a CallToolResult with structuredContent,
           isError, _meta and an extension field, to check they pass through unchanged; tool
           `progress_burst {n, after?}` sends n notifications/progress (1..n, on the caller's
           progressToken) as fast as it can, answers `burst n`, then sends `after` more (which
           must never reach the caller); with `hang: true` it never answers; it runs on its
           own thread, so other calls go on; tool `cancelled` answers the request ids this
           server was sent notifications/cancelled for (JSON text)
  garbage  answers every line with text that is not JSON-RPC
  flood    correct, but floods notifications (log messages and tools/list_changed) meanwhile
  many N   correct, listing N synthetic tools of realistic size (surface and search benchmarks)
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
cancelled = []
DOMAINS = ["github", "jira", "slack", "postgres", "files", "browser", "calendar", "mail",
           "docker", "kubernetes", "sentry", "figma", "notion", "linear", "stripe", "aws"]
VERBS = ["list", "get", "create", "update", "delete", "search", "sync", "export", "import", "watch"]
NOUNS = ["issue", "comment", "branch", "message", "channel", "row", "table", "page", "event",
         "invoice", "container", "pod", "alert", "file", "folder", "user", "team", "label"]


def synthetic(n):
    tools = []
    for i in range(n):
        d, v, o = DOMAINS[i % len(DOMAINS)], VERBS[(i // 3) % len(VERBS)], NOUNS[(i * 7) % len(NOUNS)]
        desc = (f"{v.capitalize()} {o}s in {d}. Use this to {v} one or more {o} records of the "
                f"connected {d} workspace; results are paginated with a cursor and filtered by the "
                f"optional query. Returns the {o} identifiers, titles, owners, timestamps and a "
                f"short excerpt of each. Requires the {d} integration to be authorized; the call "
                f"fails with a clear message when the token lacks the scope for {o}s. "
                f"Variant {i}: prefer the narrower filters first to keep answers small.")
        tools.append({"name": f"{d}_{v}_{o}_{i}", "description": desc, "inputSchema": {
            "type": "object", "properties": {
                "query": {"type": "string", "description": f"text to match in the {o}"},
                f"{o}_id": {"type": "string", "description": f"one {o} by id"},
                "limit": {"type": "integer", "description": "most results (20)"},
                "cursor": {"type": "string", "description": "from a previous answer"}},
            "required": []}})
    return tools


def send(msg):
    with lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def progress_burst(mid, params):
    args = params.get("arguments") or {}
    n, after = int(args.get("n", 1)), int(args.get("after", 0))
    token = (params.get("_meta") or {}).get("progressToken")

    def report(i):
        if token is not None:
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                "progressToken": token, "progress": i, "total": n, "message": f"step {i}"}})

    for i in range(1, n + 1):
        report(i)
    if args.get("hang"):
        return
    send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": f"burst {n}"}]}})
    for i in range(n + 1, n + after + 1):
        report(i)


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
        if method == "notifications/cancelled":
            cancelled.append((msg.get("params") or {}).get("requestId"))
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "raw", "version": "1"}}})
        if MODE == "flood":
            threading.Thread(target=flood, daemon=True).start()
    elif method == "tools/list" and MODE == "many":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": synthetic(int(sys.argv[2]))}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
            {"name": "rich", "description": "Return a rich result.",
             "inputSchema": {"type": "object", "properties": {}}},
            {"name": "ping_me", "description": "Answer pong.",
             "inputSchema": {"type": "object", "properties": {}}},
            {"name": "progress_burst", "description": "Report progress n times, then answer.",
             "inputSchema": {"type": "object", "properties": {
                 "n": {"type": "integer"}, "after": {"type": "integer"},
                 "hang": {"type": "boolean"}}}},
            {"name": "cancelled", "description": "The request ids cancelled so far.",
             "inputSchema": {"type": "object", "properties": {}}}]}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == "rich":
            send({"jsonrpc": "2.0", "id": mid, "result": RICH})
        elif name == "cancelled":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": json.dumps(cancelled)}]}})
        elif name == "progress_burst":
            threading.Thread(target=progress_burst, args=(mid, msg["params"]), daemon=True).start()
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "pong"}]}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})
