"""A minimal ACP agent for `bench acp-stream`'s throughput leg: it speaks newline-delimited
JSON-RPC on stdio by hand (no SDK), so the figure measures tuic and not an agent's own
serialization. It completes the handshake as the protocol says (`initialize` with protocol 1,
`session/new`), and for a prompt "flood N" writes N pre-serialized `session/update`
agent_message_chunk lines in one go, then answers the prompt with `end_turn`. Any other request
gets -32601; notifications (`session/cancel`) are ignored.
"""

import json
import sys


def send(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main():
    sid = "flood-session"
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            continue
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": False},
                "agentInfo": {"name": "tuic-acp-flood-agent", "version": "1.0"},
                "authMethods": [],
            }})
        elif method == "session/new":
            send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": sid}})
        elif method == "session/prompt":
            text = " ".join(b.get("text", "") for b in msg["params"].get("prompt", []))
            words = text.split()
            n = int(words[1]) if len(words) > 1 and words[0] == "flood" else 0
            chunk = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": sid,
                "update": {"sessionUpdate": "agent_message_chunk",
                           "content": {"type": "text", "text": "x"}},
            }}, separators=(",", ":")) + "\n"
            sys.stdout.write(chunk * n)
            sys.stdout.flush()
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
        else:
            send({"jsonrpc": "2.0", "id": mid,
                  "error": {"code": -32601, "message": f"method not found: {method}"}})


if __name__ == "__main__":
    main()
