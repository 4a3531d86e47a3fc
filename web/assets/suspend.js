// The tab's side of an agent's `session action=suspend`: on `session-suspend-requested` this
// page ends the session's PTY (DELETE /sessions/{id}), keeps what a restart would restore — the
// working directory, the name and the TUIC session id — in localStorage, lists it under
// "Suspended" with a Resume button, and answers the waiting call through
// POST /mcp/suspend-response. Resume creates the session again in the same directory under the
// same TUIC session id. With several pages open, the one whose DELETE ends the PTY answers; the
// others find it gone and stay silent. Text only ever goes in through textContent.

import { $ } from "/assets/dom.js";
import { api } from "/assets/api.js";
import { state } from "/assets/state.js";

const KEY = "tuic.suspended";

/** The suspended sessions this browser keeps, oldest first. */
export function suspended() {
  try {
    const v = JSON.parse(localStorage.getItem(KEY) ?? "[]");
    return Array.isArray(v) ? v : [];
  } catch {
    return [];
  }
}

function keep(list) { localStorage.setItem(KEY, JSON.stringify(list)); }

async function answer(request_id, ok, reason) {
  try {
    await api("/mcp/suspend-response", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ request_id, ok, reason }),
    });
  } catch {
    // Answered by another page, or the call's window closed: nothing left to do.
  }
}

async function rowOf(id) {
  const known = state.sessions.find((s) => s.session_id === id);
  if (known) return known;
  const r = await fetch(`/sessions/${encodeURIComponent(id)}`, { credentials: "same-origin" });
  return r.ok ? r.json() : null;
}

/** Performs one suspend request from the node's event stream. */
export async function onSuspendRequested(d, refresh) {
  let row;
  try {
    row = await rowOf(d.session_id);
  } catch (e) {
    return answer(d.request_id, false, `the page could not read the session: ${e.message}`);
  }
  if (!row) return; // Gone already: another page performed it and answers.
  const r = await fetch(`/sessions/${encodeURIComponent(d.session_id)}`, {
    method: "DELETE",
    credentials: "same-origin",
  }).catch(() => null);
  if (r && r.status === 404) return;
  if (!r || !r.ok) {
    return answer(d.request_id, false, `the page could not end the PTY (${r ? r.status : "network error"})`);
  }
  const entry = {
    tuic_session: row.tuic_session,
    cwd: row.cwd,
    name: row.display_name ?? null,
    label: row.alias ?? row.session_id,
    at: Date.now(),
  };
  keep([...suspended().filter((x) => x.tuic_session !== entry.tuic_session), entry]);
  renderSuspended(refresh);
  await answer(d.request_id, true);
}

/** Creates a suspended session again and opens it. */
async function resume(entry, refresh) {
  const body = { cwd: entry.cwd, tuic_session: entry.tuic_session };
  if (entry.name) body.name = entry.name;
  const r = await api("/sessions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const made = await r.json();
  keep(suspended().filter((x) => x.tuic_session !== entry.tuic_session));
  renderSuspended(refresh);
  await refresh();
  location.hash = `#/s/${encodeURIComponent(made.session_id)}`;
}

/** The "Suspended" group under the session list. */
export function renderSuspended(refresh) {
  const ul = $("suspended");
  const items = suspended().map((entry) => {
    const li = document.createElement("li");
    li.className = "suspended";
    li.dataset.tuicSession = entry.tuic_session;
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = entry.name ? `${entry.label} — ${entry.name}` : entry.label;
    const meta = document.createElement("span");
    meta.className = "meta";
    meta.textContent = `suspended · ${entry.cwd}`;
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = "Resume";
    b.className = "resume";
    b.onclick = () => resume(entry, refresh).catch((e) => { meta.textContent = `resume failed: ${e.message}`; });
    li.append(name, b, meta);
    return li;
  });
  ul.replaceChildren(...items);
  ul.hidden = items.length === 0;
}
