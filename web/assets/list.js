// The session list: rows from GET /sessions (host, agent state, cwd, last activity).

import { $, ago } from "/assets/dom.js";
import { api } from "/assets/api.js";
import { state } from "/assets/state.js";

export function sessionKey(s) { return s.address ?? s.session_id; }

export function renderList() {
  const ul = $("sessions");
  const rows = state.sessions.map((s) => {
    const li = document.createElement("li");
    const a = document.createElement("a");
    const key = sessionKey(s);
    a.href = `#/s/${encodeURIComponent(key)}`;
    a.dataset.session = key;
    if (state.current === key) a.setAttribute("aria-current", "true");
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = `${s.alias ?? s.session_id}${s.display_name ? " — " + s.display_name : ""}`;
    const badge = document.createElement("span");
    badge.className = `badge ${s.agent_state ?? s.shell_state ?? ""}`;
    badge.textContent = s.agent_state ?? s.shell_state ?? "";
    const meta = document.createElement("span");
    meta.className = "meta";
    const host = s.connection_id ?? "local";
    const last = ago(state.lastActivity.get(s.session_id));
    meta.textContent = [host, s.agent_type, s.cwd, last].filter(Boolean).join(" · ");
    a.append(name, badge, meta);
    li.appendChild(a);
    return li;
  });
  ul.replaceChildren(...rows);
  $("empty").hidden = rows.length > 0;
}

export async function refreshSessions() {
  try {
    const r = await api("/sessions");
    state.sessions = await r.json();
    renderList();
    $("conn").textContent = "";
  } catch (e) {
    if (e.message !== "unauthorized") $("conn").textContent = "offline";
  }
}
