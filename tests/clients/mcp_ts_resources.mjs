// Official TypeScript MCP SDK client: resources, subscriptions, prompts and completion against
// a tuic node (used by tests/tests/mcp_features.rs).
// usage: node mcp_ts_resources.mjs URL CWD ROUNDS   (run from a folder whose node_modules has
// @modelcontextprotocol/sdk). Creates a /bin/sh session, subscribes to its screen, then ROUNDS
// times types a marker and measures the time to `notifications/resources/updated`, and reads
// the screen until it shows the marker. Prints one JSON line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, cwd, roundsArg] = process.argv.slice(2);
const rounds = Number(roundsArg);
const client = new Client({ name: "tuic-ts-resources", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url));
const updates = [];
let wake = null;
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  updates.push([performance.now(), n.params.uri]);
  if (wake) { const w = wake; wake = null; w(); }
});
const nextUpdate = (ms) => new Promise((resolve, reject) => {
  const t = setTimeout(() => { wake = null; reject(new Error("no update")); }, ms);
  wake = () => { clearTimeout(t); resolve(); };
});
await client.connect(transport);
const text = (r) => r.content.map((c) => c.text ?? "").join("");
const made = JSON.parse(text(await client.callTool({ name: "session",
  arguments: { action: "create", shell: "/bin/sh", cwd, rows: 50, cols: 200 } })));
const alias = made.alias || made.session_id;
const uri = `tuic://sessions/${alias}/screen`;
await client.subscribeResource({ uri });
const latencies = [];
let shownAll = true;
for (let i = 0; i < rounds; i++) {
  const mark = `ts-mark-${i}-${i * 3}`;
  const before = updates.length;
  const t0 = performance.now();
  const waiting = nextUpdate(10000);
  await client.callTool({ name: "session",
    arguments: { action: "input", session_id: alias, input: `echo ${mark}`, special_key: "enter" } });
  for (;;) {
    const hit = updates.slice(before).find(([t, u]) => u === uri && t >= t0);
    if (hit) { latencies.push(hit[0] - t0); break; }
    await (wake ? waiting : nextUpdate(10000));
  }
  let shown = false;
  const deadline = performance.now() + 10000;
  while (performance.now() < deadline) {
    const r = await client.readResource({ uri });
    const t = r.contents.map((c) => c.text ?? "").join("");
    if (t.split(mark).length - 1 >= 2) { shown = true; break; }
    await nextUpdate(2000).catch(() => {});
  }
  shownAll = shownAll && shown;
}
await client.unsubscribeResource({ uri });
const prompts = await client.listPrompts();
const agent = await client.complete({ ref: { type: "ref/prompt", name: "spawn_reviewer" },
  argument: { name: "agent", value: "cl" } });
await client.callTool({ name: "session", arguments: { action: "close", session_id: alias } });
latencies.sort((a, b) => a - b);
console.log(JSON.stringify({
  latencies_ms: latencies,
  p50_ms: latencies.length ? latencies[Math.floor(latencies.length / 2)] : null,
  screens_shown: shownAll,
  prompts: prompts.prompts.map((p) => p.name),
  complete_agent: agent.completion.values,
}));
await transport.terminateSession();
await client.close();
