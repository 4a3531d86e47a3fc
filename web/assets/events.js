// Live updates from GET /events (SSE): list changes refresh the list; `pty-parsed` events mark
// activity and reach the open view (questions become quick replies); agents' toasts and
// confirm dialogs go to `notices.js`; an agent's suspend request to `suspend.js`.

import { $ } from "/assets/dom.js";
import { refreshSessions } from "/assets/list.js";
import { state } from "/assets/state.js";
import { bindNotices } from "/assets/notices.js";
import { onSuspendRequested } from "/assets/suspend.js";
import { refreshAcp } from "/assets/acp.js";
import { rememberTab } from "/assets/tabview.js";

export function startEvents() {
  const es = new EventSource("/events");
  const bump = () => refreshSessions();
  for (const t of ["session-created", "session-closed", "session-renamed", "term-alias-assigned", "pty-exit"]) {
    es.addEventListener(t, bump);
  }
  es.addEventListener("pty-parsed", (ev) => {
    const d = JSON.parse(ev.data);
    state.lastActivity.set(d.session_id, Date.now());
    if (d.parsed?.type === "agent_state" || d.parsed?.type === "state") bump();
    if (state.view && state.view.key === d.session_id) state.view.onParsed(d.parsed);
  });
  es.addEventListener("lagged", bump);
  es.addEventListener("acp-notice", () => refreshAcp());
  bindNotices(es);
  es.addEventListener("session-suspend-requested", (ev) => onSuspendRequested(JSON.parse(ev.data), refreshSessions));
  es.onerror = () => { $("conn").textContent = "reconnecting…"; };
  es.onopen = () => { $("conn").textContent = ""; document.body.dataset.events = "open"; };
  // An agent's `ui action=tab`: a focused tab opens here at once; a background one is offered.
  es.addEventListener("mcp-tab", (ev) => {
    const t = JSON.parse(ev.data);
    const q = new URLSearchParams({ kind: t.kind });
    if (t.path) q.set("path", t.path);
    if (t.url && t.kind === "url") q.set("url", t.url);
    const href = `#/tab?${q}`;
    if (t.focus) { location.hash = href; return; }
    // A background tab is remembered too (the tab view lists it after a reload).
    rememberTab(href);
    const b = $("banner");
    b.hidden = false;
    b.replaceChildren(Object.assign(document.createElement("a"), { href, textContent: `Agent opened ${t.title}` }));
  });
}
