// The tuic web UI: one module for the phone (/mobile) and the desktop browser (/).
// Sessions from GET /sessions, kept fresh by /events with a 3 s polling fallback. A session
// view shows the node's emulated screen (screen sync, `screen.js`: DOM rows from
// `stream?mode=screen` frames); the History tab streams raw PTY bytes, renders ANSI colours and
// pages older output on scroll. Input goes through POST /sessions/{id}/write (the input line)
// or the screen socket (keys typed on the focused screen).

import { AnsiRenderer } from "/assets/ansi.js";
import { ScreenClient, keyBytes } from "/assets/screen.js";

const $ = (id) => document.getElementById(id);
const desktop = !location.pathname.startsWith("/mobile");

// Touch-capable iPads and Macs reporting a desktop UA get the phone layout.
if (desktop && navigator.maxTouchPoints > 1 && /Macintosh|iPad/.test(navigator.userAgent)) {
  location.replace("/mobile" + location.hash);
}
if (desktop) document.body.classList.add("desktop");

const state = { sessions: [], current: null, lastActivity: new Map() };

async function api(path, opts = {}) {
  const r = await fetch(path, { credentials: "same-origin", ...opts });
  if (r.status === 401) {
    location.href = "/mobile/login?next=" + encodeURIComponent(desktop ? "/" : "/mobile");
    throw new Error("unauthorized");
  }
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r;
}

function sessionKey(s) { return s.address ?? s.session_id; }

function ago(ms) {
  if (!ms) return "";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  return `${Math.round(s / 3600)}h ago`;
}

function renderList() {
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

async function refreshSessions() {
  try {
    const r = await api("/sessions");
    state.sessions = await r.json();
    renderList();
    $("conn").textContent = "";
  } catch (e) {
    if (e.message !== "unauthorized") $("conn").textContent = "offline";
  }
}

function startEvents() {
  const es = new EventSource("/events");
  const bump = () => refreshSessions();
  for (const t of ["session-created", "session-closed", "session-renamed", "term-alias-assigned", "pty-exit"]) {
    es.addEventListener(t, bump);
  }
  es.addEventListener("pty-parsed", (ev) => {
    const d = JSON.parse(ev.data);
    state.lastActivity.set(d.session_id, Date.now());
    if (d.parsed?.type === "agent_state") bump();
    if (view && view.key === d.session_id) view.onParsed(d.parsed);
  });
  es.addEventListener("lagged", bump);
  es.onerror = () => { $("conn").textContent = "reconnecting…"; };
  es.onopen = () => { $("conn").textContent = ""; };
}

// ---- session view -------------------------------------------------------------------------

const PAGE = 64 * 1024;
const CHIPS = [["1", "1\r"], ["2", "2\r"], ["y", "y\r"], ["n", "n\r"], ["Enter", "\r"], ["Ctrl-C", "\x03"]];
let view = null;

class SessionView {
  constructor(key) {
    this.key = key;
    this.path = `/sessions/${encodeURIComponent(key)}`;
    this.term = $("term");
    this.term.replaceChildren();
    this.renderer = new AnsiRenderer(this.term);
    this.decoder = new TextDecoder("utf-8");
    this.offset = 0; // next source byte the stream will send
    this.oldest = 0; // first source byte shown
    this.follow = true;
    this.closed = false;
    this.backoff = 1000;
    this.loadingOlder = false;
    this.historyStarted = false;
    this.term.onscroll = () => this.onScroll();
    $("jump").onclick = () => this.jump();
    $("tab-screen").onclick = () => this.showScreen();
    $("tab-history").onclick = () => this.showHistory();
    this.hideChips();
    $("exit-note").hidden = true;
    this.screen = new ScreenClient($("screen"), this.path, {
      onParsed: (ev) => this.onParsed(ev),
      onExit: (code) => this.showExit(code),
      onBanner: (t) => this.banner(t),
      onScroll: (o) => { if (this.mode === "screen") $("jump").hidden = o === 0; },
      onState: (s) => {
        if (this.mode === "screen") $("jump").hidden = (s.scroll ?? 0) === 0;
        if (s.title) $("screen").setAttribute("aria-label", `Terminal screen: ${s.title}`);
      },
    });
    $("screen").onkeydown = (e) => {
      const b = keyBytes(e);
      if (b == null) return;
      e.preventDefault();
      if (!this.screen.input(b)) this.send(b);
    };
    this.showScreen();
  }

  showScreen() {
    this.mode = "screen";
    $("screen").hidden = false;
    this.term.hidden = true;
    $("tab-screen").setAttribute("aria-selected", "true");
    $("tab-history").setAttribute("aria-selected", "false");
    $("jump").hidden = (this.screen.offset ?? 0) === 0;
    // The history stream is not needed while the screen shows: close it (reloaded on demand).
    if (this.historyStarted) {
      this.historyStarted = false;
      this.ws?.close();
      this.ws = null;
    }
  }

  showHistory() {
    this.mode = "history";
    $("screen").hidden = true;
    this.term.hidden = false;
    $("tab-screen").setAttribute("aria-selected", "false");
    $("tab-history").setAttribute("aria-selected", "true");
    if (!this.historyStarted) {
      this.historyStarted = true;
      this.term.replaceChildren();
      this.renderer = new AnsiRenderer(this.term);
      this.decoder = new TextDecoder("utf-8");
      this.start();
    } else {
      this.scrollToEnd();
    }
  }

  async start() {
    $("history-loading").hidden = false;
    try {
      const r = await api(`${this.path}/output?format=raw&limit=${PAGE}`);
      const page = await r.json();
      this.offset = page.total_written ?? 0;
      this.oldest = page.start_offset ?? Math.max(0, this.offset - (page.data_length ?? 0));
      this.renderer.write(page.data ?? "");
      if (page.exited) this.showExit(page.exit_code);
    } catch (e) {
      this.banner(`Could not load history: ${e.message}`);
    } finally {
      $("history-loading").hidden = true;
    }
    this.scrollToEnd();
    if (!this.exited) this.connect();
  }

  connect() {
    if (this.closed || !this.historyStarted) return;
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${proto}://${location.host}${this.path}/stream?binary=1&from_byte=${this.offset}`);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onopen = () => { this.backoff = 1000; this.banner(null); };
    ws.onmessage = (m) => {
      if (m.data instanceof ArrayBuffer) {
        this.offset += m.data.byteLength;
        this.renderer.write(this.decoder.decode(m.data, { stream: true }));
        if (this.follow) this.scrollToEnd(); else $("jump").hidden = false;
        return;
      }
      const f = JSON.parse(m.data);
      if (f.type === "parsed") this.onParsed(f.event);
      else if (f.type === "exit") this.showExit(f.exit_code);
      else if (f.type === "lagged") this.resync();
      else if (f.type === "output") { this.renderer.write(f.data); if (this.follow) this.scrollToEnd(); }
    };
    ws.onclose = () => {
      if (this.closed || this.exited || this.ws !== ws) return;
      this.banner("Connection lost — reconnecting…");
      setTimeout(() => this.reconnect(), this.backoff);
      this.backoff = Math.min(this.backoff * 2, 8000);
    };
  }

  /** Reconnects if the session still exists; a node restart ends its sessions. */
  async reconnect() {
    if (this.closed) return;
    try {
      const r = await fetch(`${this.path}/output?format=raw&limit=1`, { credentials: "same-origin" });
      if (r.status === 404) {
        this.banner("This session has ended.");
        this.exited = true;
        return;
      }
    } catch (e) {
      // The node is still unreachable: try again later.
      setTimeout(() => this.reconnect(), this.backoff);
      this.backoff = Math.min(this.backoff * 2, 8000);
      return;
    }
    this.connect();
  }

  resync() {
    // The node dropped bytes for this slow client: reload the retained tail.
    this.ws?.close();
    this.term.replaceChildren();
    this.renderer = new AnsiRenderer(this.term);
    this.decoder = new TextDecoder("utf-8");
    this.start();
  }

  showExit(code) {
    if (this.exitShown) return;
    this.exitShown = true;
    this.exited = true;
    const note = `[process exited${code != null ? " with code " + code : ""}]`;
    $("exit-note").textContent = note;
    $("exit-note").hidden = false;
    if (this.historyStarted) this.renderer.write(`\r\n\x1b[2m${note}\x1b[0m\r\n`);
    this.hideChips();
    if (this.mode === "history") this.scrollToEnd();
  }

  banner(text) {
    const b = $("banner");
    b.hidden = !text;
    b.textContent = text ?? "";
  }

  onParsed(ev) {
    if (!ev) return;
    if (ev.type === "question") this.showChips(ev);
    else if (ev.type === "agent_state" && ev.state !== "awaiting_input") this.hideChips();
  }

  showChips(ev) {
    const box = $("chips");
    const q = document.createElement("div");
    q.className = "question";
    q.textContent = ev.text ?? "";
    const options = (ev.options ?? []).map((o, i) => [String(o).slice(0, 24), `${i + 1}\r`]);
    const buttons = (options.length ? options.concat(CHIPS.slice(4)) : CHIPS).map(([label, data]) => {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.dataset.reply = label;
      b.onclick = () => { this.send(data); this.hideChips(); };
      return b;
    });
    box.replaceChildren(q, ...buttons);
    box.hidden = false;
  }

  hideChips() { $("chips").hidden = true; }

  /** Input in order with the screen's own keys: over the screen socket when it is open. */
  typeIn(data) {
    if (!data) return;
    if (!this.screen.input(data)) this.send(data);
  }

  async send(data) {
    try {
      await api(`${this.path}/write`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ data }),
      });
    } catch (e) {
      this.banner(`Input not sent: ${e.message}`);
    }
  }

  atBottom() {
    const t = this.term;
    return t.scrollHeight - t.scrollTop - t.clientHeight < 24;
  }

  scrollToEnd() {
    this.term.scrollTop = this.term.scrollHeight;
    this.follow = true;
    $("jump").hidden = true;
  }

  jump() {
    if (this.mode === "screen") { this.screen.follow(); $("jump").hidden = true; return; }
    this.scrollToEnd();
  }

  onScroll() {
    this.follow = this.atBottom();
    if (this.follow) $("jump").hidden = true;
    if (this.term.scrollTop < 40 && this.oldest > 0 && !this.loadingOlder) this.loadOlder();
  }

  async loadOlder() {
    this.loadingOlder = true;
    $("history-loading").hidden = false;
    try {
      const from = Math.max(0, this.oldest - PAGE);
      const r = await api(`${this.path}/output?format=raw&from_byte=${from}&limit=${this.oldest - from}`);
      const page = await r.json();
      const holder = document.createElement("div");
      new AnsiRenderer(holder).write(page.data ?? "");
      const before = this.term.scrollHeight;
      this.term.prepend(...Array.from(holder.children));
      // Keep what the reader was looking at in place.
      this.term.scrollTop += this.term.scrollHeight - before;
      this.oldest = page.start_offset ?? from;
      if ((page.data_length ?? 0) === 0) this.oldest = 0;
    } catch (e) {
      this.banner(`Could not load older output: ${e.message}`);
    } finally {
      this.loadingOlder = false;
      $("history-loading").hidden = true;
    }
  }

  close() {
    this.closed = true;
    this.ws?.close();
    this.screen.close();
  }
}

// The special-keys bar: keys a phone keyboard lacks. Ctrl and Alt are sticky: they apply to
// the next key from the bar or the next character typed in the input line, then release.
const KEYS = [
  ["Esc", "\x1b"], ["Tab", "\t"], ["Ctrl", null], ["Alt", null],
  ["←", "\x1b[D"], ["↑", "\x1b[A"], ["↓", "\x1b[B"], ["→", "\x1b[C"],
  ["PgUp", "\x1b[5~"], ["PgDn", "\x1b[6~"], ["|", "|"], ["~", "~"], ["/", "/"],
];
const sticky = { ctrl: false, alt: false };

/** Applies the sticky modifiers to `data` (one character or a key's bytes) and releases them. */
function modified(data) {
  let out = data;
  if (sticky.ctrl && [...data].length === 1) {
    const c = data.toUpperCase().charCodeAt(0);
    if (c >= 64 && c <= 95) out = String.fromCharCode(c - 64);
    else if (data === " ") out = "\x00";
    else if (data === "?") out = "\x7f";
  }
  if (sticky.alt) out = "\x1b" + out;
  sticky.ctrl = sticky.alt = false;
  for (const b of document.querySelectorAll("#keys button[data-mod]")) b.setAttribute("aria-pressed", "false");
  return out;
}

function keysBar() {
  const bar = $("keys");
  const buttons = KEYS.map(([label, data]) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.dataset.key = label;
    if (data == null) {
      const mod = label.toLowerCase();
      b.dataset.mod = mod;
      b.setAttribute("aria-pressed", "false");
      b.onclick = () => {
        sticky[mod] = !sticky[mod];
        b.setAttribute("aria-pressed", String(sticky[mod]));
      };
    } else {
      b.onclick = () => view?.typeIn(modified(data));
    }
    // Keep the focus (and the on-screen keyboard) where it is.
    b.addEventListener("pointerdown", (e) => e.preventDefault());
    return b;
  });
  bar.replaceChildren(...buttons);
  // A character typed while a modifier is held goes to the PTY at once, modified.
  $("line").addEventListener("beforeinput", (e) => {
    if (!(sticky.ctrl || sticky.alt) || e.isComposing || e.inputType !== "insertText" || !e.data) return;
    e.preventDefault();
    view?.typeIn(modified(e.data));
  });
}

function lineInput() {
  const input = $("line");
  const submit = () => {
    if (!view) return;
    view.typeIn(input.value + "\r");
    input.value = "";
  };
  // Enter that commits an IME composition must not also send the line.
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.isComposing && e.keyCode !== 229) {
      e.preventDefault();
      submit();
    }
  });
  $("send").onclick = submit;
}

function route() {
  const m = location.hash.match(/^#\/s\/(.+)$/);
  const key = m ? decodeURIComponent(m[1]) : null;
  if (view && view.key !== key) { view.close(); view = null; }
  state.current = key;
  $("session-view").hidden = !key;
  $("list-view").hidden = !!key && !desktop;
  $("back").hidden = !key || desktop;
  const s = state.sessions.find((x) => sessionKey(x) === key);
  $("title").textContent = key ? (s ? `${s.alias ?? key}${s.display_name ? " — " + s.display_name : ""}` : key) : "tuic";
  if (key && !view) view = new SessionView(key);
  renderList();
}

// With the on-screen keyboard open the visual viewport is shorter than the layout viewport:
// size the page to it, so the input line and the screen's cursor row stay visible.
if (window.visualViewport) {
  const vv = window.visualViewport;
  const fitViewport = () => {
    document.documentElement.style.setProperty("--vvh", `${Math.round(vv.height)}px`);
    view?.screen?.keepCursorInView();
  };
  vv.addEventListener("resize", fitViewport);
  fitViewport();
}

$("back").onclick = () => { location.hash = ""; };
window.addEventListener("hashchange", route);
lineInput();
keysBar();
refreshSessions().then(route);
startEvents();
setInterval(refreshSessions, 3000);
setInterval(renderList, 15000);
