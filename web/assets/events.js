// Live updates from GET /events (SSE): list changes refresh the list; `pty-parsed` events mark
// activity and reach the open view (questions become quick replies); agents' toasts and
// confirm dialogs go to `notices.js`; an agent's suspend request to `suspend.js`.

import { $ } from "/assets/dom.js";
import { refreshSessions } from "/assets/list.js";
import { state } from "/assets/state.js";
import { bindNotices } from "/assets/notices.js";
import { onSuspendRequested } from "/assets/suspend.js";
import { refreshAcp } from "/assets/acp.js";

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
  es.onopen = () => { $("conn").textContent = ""; };
}
