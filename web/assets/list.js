// The session list: rows from GET /sessions (host, agent state, cwd, last activity) and the ACP
// connections of GET /acp/connections beside them (their state, an "ACP" tag, a link to the
// chat view), grouped by host when a hub shows several; within a host, whatever needs you
// (a PTY at a question, an agent holding a permission request) comes first.

import { $, ago } from "/assets/dom.js";
import { api } from "/assets/api.js";
import { state } from "/assets/state.js";

export function sessionKey(s) { return s.address ?? s.session_id; }

function hostOf(s) { return s.connection_id ?? "local"; }

/** Whether a row waits on the person: a PTY's `needs_input`, an ACP connection's `needs_you`. */
function needsYou(r) { return r.state === "needs_input" || r.state === "needs_you"; }

function acpRow(c) {
  const li = document.createElement("li");
  li.className = "acp-row";
  const a = document.createElement("a");
  a.href = `#/acp/${encodeURIComponent(c.id)}`;
  a.dataset.acp = c.id;
  const name = document.createElement("span");
  name.className = "name";
  name.textContent = c.name;
  const badge = document.createElement("span");
  setStateBadge(badge, c.state);
  if (c.pending) badge.textContent = `${stateLabel(c.state)} (${c.pending})`;
  const meta = document.createElement("span");
  meta.className = "meta";
  meta.textContent = [c.host ?? "local", c.chat ? "ACP chat" : "ACP", c.agent, c.cwd].join(" · ");
  a.append(name, badge, meta);
  li.appendChild(a);
  return li;
}

/** The one state of a session as every view shows it (`needs_input` → "needs input"); the node
 *  computes it (`state` on the row), the page only words it. */
export function stateLabel(st) { return (st ?? "").replaceAll("_", " "); }

/** Puts `st` on a badge element: its text and its class (the colour). */
export function setStateBadge(el, st) {
  el.className = `badge state ${st ?? ""}`;
  el.textContent = stateLabel(st);
  el.dataset.state = st ?? "";
}

function sessionRow(s) {
  const li = document.createElement("li");
  const a = document.createElement("a");
  const key = sessionKey(s);
  a.href = `#/s/${encodeURIComponent(key)}`;
  a.dataset.session = key;
  if (state.current === key) a.setAttribute("aria-current", "true");
  if (s.state === "host_offline") li.classList.add("offline");
  const name = document.createElement("span");
  name.className = "name";
  name.textContent = `${s.alias ?? s.session_id}${s.display_name ? " — " + s.display_name : ""}`;
  const badge = document.createElement("span");
  setStateBadge(badge, s.state ?? s.agent_state ?? s.shell_state);
  const meta = document.createElement("span");
  meta.className = "meta";
  const last = ago(state.lastActivity.get(s.session_id));
  meta.textContent = [hostOf(s), s.agent_type, s.cwd, last].filter(Boolean).join(" · ");
  a.append(name, badge, meta);
  li.appendChild(a);
  return li;
}

/** The list, grouped by host (this machine first) with a count badge when several hosts show. */
export function renderList() {
  const ul = $("sessions");
  const groups = new Map();
  const add = (h, row) => {
    if (!groups.has(h)) groups.set(h, []);
    groups.get(h).push(row);
  };
  for (const s of state.sessions) add(hostOf(s), { pty: s });
  for (const c of state.acp) add(c.host ?? "local", { acp: c });
  const hosts = [...groups.keys()].sort((a, b) => (a === "local" ? -1 : b === "local" ? 1 : a.localeCompare(b)));
  const grouped = hosts.length > 1 || state.sessions.some((s) => s.connection_id);
  const items = [];
  for (const h of hosts) {
    if (grouped) {
      const li = document.createElement("li");
      li.className = "host";
      li.dataset.host = h;
      const n = document.createElement("span");
      n.textContent = h;
      const c = document.createElement("span");
      c.className = "badge";
      c.textContent = String(groups.get(h).length);
      li.append(n, c);
      items.push(li);
    }
    // A stable sort: the rest keep their order.
    const rows = groups.get(h).sort((a, b) => needsYou(b.pty ?? b.acp) - needsYou(a.pty ?? a.acp));
    for (const r of rows) items.push(r.pty ? sessionRow(r.pty) : acpRow(r.acp));
  }
  ul.replaceChildren(...items);
  $("empty").hidden = state.sessions.length + state.acp.length > 0;
  renderViewState();
}

/** The open session's state badge in the view, from the same row the list shows; an exit seen
 *  on the view's own stream wins (an exited session leaves the list). */
export function renderViewState() {
  const el = $("view-state");
  if (!state.current) return;
  const row = state.sessions.find((x) => sessionKey(x) === state.current);
  const st = state.view?.exited ? "exited" : row?.state;
  if (st) setStateBadge(el, st);
  el.hidden = !st;
  if (row && !state.view?.exited) state.view?.syncRow(row);
}

// Refreshes overlap (an event's and the timer's, or two events'), and their answers can come
// back out of order on a busy machine: an answer older than the one shown is dropped, so a
// stale list never replaces a newer one until the next refresh.
let asked = 0;
let shown = 0;

export async function refreshSessions() {
  const n = ++asked;
  try {
    const r = await api("/sessions");
    const rows = await r.json();
    if (n < shown) return;
    shown = n;
    state.sessions = rows;
    renderList();
    $("conn").textContent = "";
  } catch (e) {
    if (e.message !== "unauthorized") $("conn").textContent = "offline";
  }
}
