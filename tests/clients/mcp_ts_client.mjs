// Official TypeScript MCP SDK client against a tuic node (used by tests/tests/mcp_sdk_clients.rs).
// usage: node mcp_ts_client.mjs URL   (NODE_PATH-free: run from a folder whose node_modules has
// @modelcontextprotocol/sdk). Prints one JSON line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL(process.argv[2]);
const client = new Client({ name: "tuic-ts-sdk-test", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(url);
await client.connect(transport);
const tools = await client.listTools();
const r = await client.callTool({ name: "session", arguments: { action: "list" } });
console.log(JSON.stringify({
  protocol: transport.protocolVersion ?? null,
  session_id: transport.sessionId ?? null,
  tools: tools.tools.map((t) => t.name),
  session_list: { is_error: !!r.isError, text: r.content.map((c) => c.text ?? "").join("") },
}));
await transport.terminateSession();
await client.close();
