// Upstream MCP servers that need an OAuth authorization: a card per upstream in `needs_auth`
// with an Authorize button. The consent is the person's: the node starts the flow
// (POST /mcp/upstreams/{name}/oauth/start), the page shows the authorization server's origin
// (with a warning when it is on another domain than the MCP server) and opens the URL only
// after Yes; No cancels the flow. Text only ever goes in through textContent.

import { $ } from "/assets/dom.js";
import { api } from "/assets/api.js";

const cards = new Map();

function card(u) {
  const box = document.createElement("div");
  box.className = "confirm upstream-auth";
  box.setAttribute("role", "status");
  const t = document.createElement("strong");
  const m = document.createElement("p");
  const row = document.createElement("div");
  row.className = "answers";
  const go = document.createElement("button");
  go.type = "button";
  go.textContent = "Authorize";
  const path = `/mcp/upstreams/${encodeURIComponent(u.name)}/oauth`;
  go.onclick = async () => {
    go.disabled = true;
    try {
      const s = await (await api(`${path}/start`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" })).json();
      const warn = s.cross_domain_as ? `\n\nWarning: ${s.authorization_server} is not on the MCP server's domain.` : "";
      if (confirm(`Sign in to ${u.name} at ${s.authorization_server}?${warn}`)) {
        window.open(s.authorize_url, "_blank", "noopener");
      } else {
        await api(`${path}/cancel`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
      }
    } catch (e) {
      m.textContent = `Could not start: ${e.message}`;
    } finally {
      go.disabled = false;
    }
  };
  row.appendChild(go);
  box.append(t, m, row);
  return { box, t, m, go };
}

export async function refreshUpstreams() {
  let rows = [];
  try {
    rows = (await (await api("/mcp/status")).json()).upstreams ?? [];
  } catch { return; }
  const want = rows.filter((u) => u.auth && (u.auth.state === "needs_auth" || u.auth.state === "authorizing"));
  for (const [name, c] of cards) {
    if (!want.some((u) => u.name === name)) { c.box.remove(); cards.delete(name); }
  }
  for (const u of want) {
    let c = cards.get(u.name);
    if (!c) { c = card(u); cards.set(u.name, c); $("notices").appendChild(c.box); }
    c.t.textContent = `Upstream ${u.name}: ${u.auth.state === "authorizing" ? "awaiting authorization…" : "needs authorization"}`;
    c.m.textContent = u.auth.last_error ?? "";
  }
}
