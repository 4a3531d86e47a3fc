// Official TypeScript MCP SDK client: calls a tool that reports progress N times and counts
// the progress each call received (`onprogress`) before its result (used by
// tests/tests/mcp_progress_stream.rs). Run from a folder whose node_modules has
// @modelcontextprotocol/sdk.
// usage: node mcp_ts_progress_calls.mjs http URL TOOL STEPS N
//        node mcp_ts_progress_calls.mjs bridge BRIDGE_BINARY TOOL STEPS N
// `http` connects over Streamable HTTP; `bridge` runs tuic-bridge over stdio (the
// environment, TUIC_SOCKET and TUIC_SESSION, passes through). Prints one JSON line:
// {calls, errors, progress_per_call: {count: calls}, lost, late, seconds}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [kind, target, tool, stepsArg, nArg] = process.argv.slice(2);
const steps = Number(stepsArg);
const n = Number(nArg);
const client = new Client({ name: "tuic-ts-progress", version: "1.0.0" });
const transport = kind === "http"
  ? new StreamableHTTPClientTransport(new URL(target))
  : new StdioClientTransport({ command: target, args: [], env: { ...process.env }, stderr: "inherit" });
await client.connect(transport);

const perCall = {};
let errors = 0;
// Progress that arrived after its call's result (the SDK drops those: it removes the
// handler when the result comes).
let late = 0;
const started = performance.now();
for (let i = 0; i < n; i++) {
  const seen = [];
  let done = false;
  const r = await client.callTool({ name: tool, arguments: { steps } }, undefined, {
    onprogress: (p) => { if (done) { late++; } seen.push(p.progress); },
    timeout: 60000,
  });
  done = true;
  if (r.isError) errors++;
  perCall[seen.length] = (perCall[seen.length] || 0) + 1;
}
let lost = 0;
for (const [k, c] of Object.entries(perCall)) {
  if (Number(k) < steps) lost += (steps - Number(k)) * c;
}
console.log(JSON.stringify({ calls: n, errors, progress_per_call: perCall, lost, late,
  seconds: (performance.now() - started) / 1000 }));
if (kind === "http") await transport.terminateSession().catch(() => {});
await client.close();
