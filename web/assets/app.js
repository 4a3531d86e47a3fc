// The tuic web UI: one page for the phone (/mobile) and the desktop browser (/), as ES modules
// by job (no bundler): `dom` (lookup, layout), `api` (REST), `state`, `list` (session list),
// `events` (/events), `view` (the session view: screen sync from `screen.js`, History from
// `ansi.js`), `input` (input line, special keys), `upload` (attach a file into the session's directory), `suspend` (an agent's suspend request, Resume), `upstreams` (OAuth consent for upstream MCP
// servers), and this router. The list is kept fresh by
// /events with a 3 s polling fallback.

import { $, desktop } from "/assets/dom.js";
import { state } from "/assets/state.js";
import { api } from "/assets/api.js";
import { renderList, refreshSessions, sessionKey } from "/assets/list.js";
import { startEvents } from "/assets/events.js";
import { SessionView } from "/assets/view.js";
import { keysBar, lineInput, typingMode, scrollHints } from "/assets/input.js";
import { refreshUpstreams } from "/assets/upstreams.js";
import { bindUpload } from "/assets/upload.js";
import { renderSuspended } from "/assets/suspend.js";
import { refreshAcp, routeAcp } from "/assets/acp.js";
import { registerWorker, bindNotifySettings } from "/assets/push.js";

function route() {
  const m = location.hash.match(/^#\/s\/(.+)$/);
  const key = m ? decodeURIComponent(m[1]) : null;
  if (state.view && state.view.key !== key) { state.view.close(); state.view = null; }
  state.current = key;
  $("session-view").hidden = !key;
  $("list-view").hidden = !!key && !desktop;
  $("back").hidden = !key || desktop;
  const s = state.sessions.find((x) => sessionKey(x) === key);
  $("title").textContent = key ? (s ? `${s.alias ?? key}${s.display_name ? " — " + s.display_name : ""}` : key) : "tuic";
  if (key && !state.view) state.view = new SessionView(key);
  renderList();
  routeAcp();
}

// The on-screen keyboard takes the bottom of the screen: Android Chrome (asked for
// `interactive-widget=resizes-content` in index.html) shrinks the layout viewport and fires
// `resize`; iOS Safari shrinks only the visual viewport and may pan it (`offsetTop`). Either way
// the page is sized and placed to the visual viewport (`--vvh`, `--vvtop`, app.css), so the
// input line sits just above the keyboard; the screen keeps its cursor row in view on its own
// (a ResizeObserver in screen.js). Every signal either browser gives recomputes it — window
// `resize` and the visual viewport's `resize` and `scroll` — since a missed one would leave a
// stale height and keep the page short after the keyboard closed. Pinch zoom shrinks the
// visual viewport too and must not shrink the page: the height is taken at scale 1, and a
// zoomed page is not moved while the user pans.
function fitViewport() {
  const vv = window.visualViewport;
  if (!vv) return;
  const scale = vv.scale || 1;
  const root = document.documentElement.style;
  root.setProperty("--vvh", `${Math.round(vv.height * scale)}px`);
  root.setProperty("--vvtop", `${scale > 1.01 ? 0 : Math.round(vv.offsetTop)}px`);
}
window.addEventListener("resize", fitViewport);
window.visualViewport?.addEventListener("resize", fitViewport);
window.visualViewport?.addEventListener("scroll", fitViewport);
fitViewport();

// Search in the history (Enter finds the next older match) and copy the screen's text.
$("find-form").onsubmit = async (e) => {
  e.preventDefault();
  const found = await state.view?.find($("find").value);
  $("find").classList.toggle("missing", found === false);
};
$("copy").onclick = async () => {
  const text = state.view?.screenText() ?? "";
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // Without the async clipboard (plain http): copy through a selected textarea.
    const t = document.createElement("textarea");
    t.value = text;
    document.body.appendChild(t);
    t.select();
    document.execCommand("copy");
    t.remove();
  }
  $("copy").textContent = "Copied";
  setTimeout(() => { $("copy").textContent = "Copy"; }, 1500);
};

// The header names the node (host name and instance from /health) on every page, so one
// node's page is never mistaken for another's. (The tab title stays "tuic": the page never
// lets anything change it.)
api("/health").then((r) => r.json()).then((h) => {
  const name = `${h.host_name} · ${h.instance}`;
  $("node-name").textContent = name;
  $("node-name").title = h.tcp && h.tcp.requested_port && h.tcp.requested_port !== h.tcp.port
    ? `${name}, port ${h.tcp.port} (port ${h.tcp.requested_port} was asked for and is taken)`
    : name;
}).catch(() => {});

$("back").onclick = () => { location.hash = ""; };
// Share: a read-only link to this session for an hour, copied and shown; revoke it (and see
// its viewers) on the trust page (#/trust).
$("share").onclick = async () => {
  if (!state.current) return;
  const r = await api("/shares", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ session: state.current, scope: "read_only", ttl: "1h" }),
  });
  const link = await r.json();
  const url = link.url ?? new URL(link.path, location.href).href;
  try { await navigator.clipboard.writeText(url); } catch { /* shown below either way */ }
  const b = $("banner");
  b.hidden = false;
  b.textContent = `Read-only link for 1 h (revoke on the ⚿ page): ${url}`;
};
$("changes").onclick = () => {
  if (state.current) location.hash = `#/changes/${encodeURIComponent(state.current)}`;
};
window.addEventListener("hashchange", route);
lineInput();
keysBar();
typingMode();
scrollHints(document.querySelector(".tabs"));
bindUpload();
Promise.all([refreshSessions(), refreshAcp()]).then(route);
renderSuspended(refreshSessions);
startEvents();
setInterval(refreshSessions, 3000);
setInterval(refreshAcp, 3000);
setInterval(renderList, 15000);
refreshUpstreams();
setInterval(refreshUpstreams, 5000);
registerWorker();
bindNotifySettings();
