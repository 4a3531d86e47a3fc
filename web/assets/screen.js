// Screen sync client: renders the node's emulated screen from
// `WS /sessions/{id}/stream?mode=screen` frames (docs/http-api.md, "Screen sync") as DOM rows
// of styled spans. The first frame after `hello` is the whole screen; diffs replace changed
// rows (after an optional upward shift). Every applied frame is acknowledged, so a slow link
// gets fewer, newer frames. Text only ever goes in through textContent: hostile output (titles,
// OSC 52, markup in text) cannot run anything here.

const BASE16 = [
  "#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
  "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff",
];

const A = { BOLD: 1, ITALIC: 2, UNDERLINE: 4, INVERSE: 8, DIM: 16, STRIKE: 32, HIDDEN: 64 };

export function cssColor(c) {
  if (c == null) return null;
  if (typeof c === "string") return /^#[0-9a-fA-F]{6}$/.test(c) ? c : null;
  const n = c | 0;
  if (n < 16) return BASE16[n];
  if (n < 232) {
    const i = n - 16, r = Math.floor(i / 36), g = Math.floor(i / 6) % 6, b = i % 6;
    const v = (x) => (x === 0 ? 0 : 55 + x * 40);
    return `rgb(${v(r)},${v(g)},${v(b)})`;
  }
  const l = 8 + (n - 232) * 10;
  return `rgb(${l},${l},${l})`;
}

/** Applies a diff to a screen model (the same rules as tuic_proto::screen::apply_diff). */
export function applyDiff(s, d) {
  const k = Math.min(d.scroll_up ?? 0, s.lines.length);
  if (k) {
    s.lines.splice(0, k);
    for (let i = 0; i < k; i++) s.lines.push([]);
  }
  for (const r of d.rows ?? []) if (r.y < s.lines.length) s.lines[r.y] = r.runs;
  s.cursor = d.cursor;
  for (const f of ["alt_screen", "title", "scroll", "history"]) if (d[f] !== undefined) s[f] = d[f];
  return k;
}

function styleSpan(span, run) {
  const at = run.attrs ?? 0;
  let fg = cssColor(run.fg), bg = cssColor(run.bg);
  if (at & A.INVERSE) [fg, bg] = [bg ?? "var(--term-bg)", fg ?? "var(--term-fg)"];
  if (fg) span.style.color = fg;
  if (bg) span.style.backgroundColor = bg;
  if (at & A.BOLD) span.style.fontWeight = "bold";
  if (at & A.DIM) span.style.opacity = "0.7";
  if (at & A.ITALIC) span.style.fontStyle = "italic";
  const deco = [];
  if (at & A.UNDERLINE) deco.push("underline");
  if (at & A.STRIKE) deco.push("line-through");
  if (deco.length) span.style.textDecoration = deco.join(" ");
  if (at & A.HIDDEN) span.style.visibility = "hidden";
}

function runSpan(run, text) {
  const span = document.createElement("span");
  styleSpan(span, run);
  if (run.wide) {
    // Each double-width character takes exactly two columns.
    for (const ch of text) {
      const w = document.createElement("span");
      w.className = "w";
      w.textContent = ch;
      span.appendChild(w);
    }
  } else {
    span.textContent = text;
  }
  return span;
}

/** The nodes of one row; the cursor cell, when on this row, is wrapped in `.cursor`. */
function rowNodes(runs, cursorX) {
  const out = [];
  let col = 0;
  let placed = cursorX == null;
  for (const run of runs) {
    const chars = Array.from(run.text);
    const w = run.wide ? 2 : 1;
    if (!placed && cursorX < col + chars.length * w) {
      const i = Math.floor((cursorX - col) / w);
      if (i > 0) out.push(runSpan(run, chars.slice(0, i).join("")));
      const c = runSpan(run, chars[i]);
      c.classList.add("cursor");
      out.push(c);
      if (i + 1 < chars.length) out.push(runSpan(run, chars.slice(i + 1).join("")));
      placed = true;
    } else {
      out.push(runSpan(run, run.text));
    }
    col += chars.length * w;
  }
  if (!placed) {
    if (cursorX > col) out.push(document.createTextNode(" ".repeat(cursorX - col)));
    const c = document.createElement("span");
    c.className = "cursor";
    c.textContent = " ";
    out.push(c);
  }
  return out;
}

/** A row's height for font size `px`: 1.15 em (box-drawing glyphs span about that, so
 *  vertical lines join), floored to whole device pixels so rows tile exactly. */
export function rowPx(px) {
  const dpr = window.devicePixelRatio || 1;
  return Math.max(1, Math.floor(px * 1.15 * dpr)) / dpr;
}

export class ScreenClient {
  /**
   * @param {HTMLElement} root receives one `.row` div per screen row
   * @param {string} path `/sessions/{id}`
   * @param {object} hooks onParsed(ev), onExit(code), onBanner(text|null), onState(screen)
   */
  constructor(root, path, hooks = {}) {
    this.root = root;
    this.path = path;
    this.hooks = hooks;
    this.screen = null;
    this.seq = 0;
    this.rowsEl = [];
    this.closed = false;
    this.exited = false;
    this.backoff = 1000;
    this.offset = 0; // rows this view is scrolled back
    this.pending = null; // a scroll offset to send on the next animation frame
    this.bytes = 0; // frame bytes received (diagnostics)
    this.frames = 0;
    this.fulls = 0; // whole-screen frames received (one per connection and resize)
    this.retry = null;
    this.root.replaceChildren();
    this.root.__client = this; // diagnostics: tests reach the live client here
    this.bindScroll();
    // The view changes size when the on-screen keyboard opens or closes (app.js sizes the page
    // to the visual viewport), the phone turns, or a banner comes and goes: refit the columns
    // and keep the cursor row on screen.
    this.resized = new ResizeObserver(() => {
      if (!this.screen) return;
      this.fit();
      this.keepCursorInView();
    });
    this.resized.observe(this.root);
    // Back from a lock screen or a network change: re-attach at once, not after the backoff.
    this.onWake = () => {
      if (document.visibilityState === "visible") this.reattach();
    };
    window.addEventListener("online", this.onWake);
    document.addEventListener("visibilitychange", this.onWake);
    this.connect();
  }

  /** Reconnects now when the socket is gone (a fresh whole screen follows). */
  reattach() {
    if (this.closed || this.exited) return;
    const st = this.ws?.readyState;
    if (st === WebSocket.OPEN || st === WebSocket.CONNECTING) return;
    clearTimeout(this.retry);
    this.backoff = 1000;
    this.reconnect();
  }

  connect() {
    if (this.closed) return;
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${proto}://${location.host}${this.path}/stream?mode=screen`);
    this.ws = ws;
    ws.onopen = () => {
      this.backoff = 1000;
      this.hooks.onBanner?.(null);
      // A Fit this view holds is claimed again on the new connection.
      if (this.fitted) this.fitToView();
    };
    ws.onmessage = (m) => {
      if (typeof m.data !== "string") return;
      this.bytes += m.data.length;
      let f;
      try { f = JSON.parse(m.data); } catch { return; }
      this.onFrame(f);
    };
    ws.onclose = () => {
      if (this.closed || this.exited) return;
      if (this.ws !== ws) return;
      this.hooks.onBanner?.("Connection lost — reconnecting…");
      clearTimeout(this.retry);
      // The first retry is quick (a dropped link comes back with a fresh screen within a
      // second); later ones back off.
      this.retry = setTimeout(() => this.reconnect(), this.backoff);
      this.backoff = Math.min(this.backoff * 2, 8000);
    };
  }

  async reconnect() {
    if (this.closed) return;
    try {
      const r = await fetch(`${this.path}/terminal/scroll-info`, { credentials: "same-origin" });
      if (r.status === 404) {
        this.hooks.onBanner?.("This session has ended.");
        this.exited = true;
        return;
      }
    } catch {
      clearTimeout(this.retry);
      this.retry = setTimeout(() => this.reconnect(), this.backoff);
      this.backoff = Math.min(this.backoff * 2, 8000);
      return;
    }
    this.connect();
  }

  onFrame(f) {
    switch (f.type) {
      case "screen":
        // A fresh whole screen (first frame, resize, or after a reconnect).
        this.seq = f.seq;
        this.fulls += 1;
        this.root.dataset.fulls = this.fulls;
        this.screen = { ...f, lines: f.lines.map((r) => r) };
        this.renderAll();
        this.ack();
        break;
      case "diff": {
        if (!this.screen || f.seq !== this.seq + 1) {
          // Out of step: start over with a fresh connection (a new whole screen).
          this.ws?.close();
          return;
        }
        const oldCursor = this.screen.cursor;
        const k = applyDiff(this.screen, f);
        this.seq = f.seq;
        this.renderDiff(f, k, oldCursor);
        this.ack();
        break;
      }
      case "parsed": this.hooks.onParsed?.(f.event); break;
      case "exit":
        this.exited = true;
        this.hooks.onExit?.(f.exit_code);
        break;
      default: break;
    }
  }

  ack() {
    this.frames += 1;
    // Diagnostics for tests and the curious: what this view received.
    this.root.dataset.frames = this.frames;
    this.root.dataset.bytes = this.bytes;
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: "ack", seq: this.seq }));
    this.hooks.onState?.(this.screen);
  }

  cursorX(y) {
    const c = this.screen.cursor;
    return c.visible && c.y === y ? c.x : null;
  }

  renderRow(y) {
    const el = this.rowsEl[y];
    if (!el) return;
    el.replaceChildren(...rowNodes(this.screen.lines[y] ?? [], this.cursorX(y)));
  }

  renderAll() {
    const s = this.screen;
    this.rowsEl = s.lines.map(() => {
      const d = document.createElement("div");
      d.className = "row";
      return d;
    });
    this.root.replaceChildren(...this.rowsEl);
    this.root.dataset.cols = s.cols;
    this.root.dataset.rows = s.rows;
    this.fit();
    for (let y = 0; y < s.lines.length; y++) this.renderRow(y);
    this.offset = s.scroll ?? 0;
    this.keepCursorInView();
  }

  /** When the screen is taller than the view (a small phone, the keyboard open), keep the
   *  cursor row — where the program is asking — on screen. */
  keepCursorInView() {
    const c = this.screen?.cursor;
    const el = c?.visible ? this.rowsEl[c.y] : null;
    if (!el || this.root.scrollHeight <= this.root.clientHeight) return;
    const top = el.offsetTop - this.root.offsetTop;
    const bottom = top + el.offsetHeight;
    if (bottom > this.root.scrollTop + this.root.clientHeight) this.root.scrollTop = bottom - this.root.clientHeight + 8;
    else if (top < this.root.scrollTop) this.root.scrollTop = Math.max(0, top - 8);
  }

  renderDiff(d, k, oldCursor) {
    if (k) {
      // Shift: move row elements instead of re-rendering every row.
      const moved = this.rowsEl.splice(0, k);
      for (const el of moved) { el.replaceChildren(); this.root.appendChild(el); }
      this.rowsEl.push(...moved);
    }
    const dirty = new Set((d.rows ?? []).map((r) => r.y));
    const c = this.screen.cursor;
    if (oldCursor) {
      const oy = oldCursor.y - k;
      if (oy >= 0) dirty.add(oy);
    }
    dirty.add(c.y);
    if (k) for (let y = this.rowsEl.length - k; y < this.rowsEl.length; y++) dirty.add(y);
    for (const y of dirty) this.renderRow(y);
    if (d.scroll !== undefined) this.offset = d.scroll;
    this.keepCursorInView();
  }

  /** "Fit": takes the PTY's size for this view (the size policy's explicit claim): as many
   *  columns and rows as fit at the readable font size, sent with `apply: true`. The node
   *  resizes the PTY and every client gets a whole screen of the new size; when this view
   *  leaves (or `unfit`s) the node puts the size before back. Kept across reconnects. Returns
   *  the size asked for, or null when the socket is not open. */
  fitToView() {
    this.fitted = true;
    if (this.ws?.readyState !== WebSocket.OPEN) return null;
    const px = 13;
    const cols = Math.max(20, Math.floor((this.root.clientWidth - 16) / (px * this.glyph())));
    const rows = Math.max(5, Math.floor((this.root.clientHeight - 8) / rowPx(px)));
    this.ws.send(JSON.stringify({ type: "resize", rows, cols, apply: true }));
    return { rows, cols };
  }

  /** Gives the Fit back: a fresh connection, so the node restores the size before it. */
  unfit() {
    this.fitted = false;
    const ws = this.ws;
    this.ws = null;
    ws?.close();
    this.connect();
  }

  /** The monospace advance as a fraction of the font size, measured once (fonts differ:
   *  assuming 0.6 left a phone's grid narrower than its screen). */
  glyph() {
    if (!this.glyphRatio) {
      const c = document.createElement("canvas").getContext("2d");
      const fam = getComputedStyle(this.root).fontFamily || "monospace";
      c.font = `100px ${fam}`;
      const w = c.measureText("0".repeat(10)).width / 1000;
      this.glyphRatio = w > 0.3 && w < 1 ? w : 0.6;
    }
    return this.glyphRatio;
  }

  /** Scales the font so the PTY's columns fill the view's width (each viewer at its own
   *  width, the PTY untouched); past the minimum the view pans. Rows are whole device pixels
   *  and backgrounds fill them (app.css), so box drawing and coloured rows tile with no gaps. */
  fit() {
    const cols = this.screen?.cols ?? 80;
    const width = this.root.clientWidth - 16;
    if (width <= 0) return;
    const px = Math.max(6, Math.min(13, width / (cols * this.glyph())));
    this.root.style.fontSize = `${px.toFixed(2)}px`;
    this.root.style.setProperty("--row-h", `${rowPx(px)}px`);
  }

  bindScroll() {
    const lineH = () => rowPx(parseFloat(getComputedStyle(this.root).fontSize)) || 16;
    let acc = 0;
    const move = (dy) => {
      acc += dy;
      const rows = Math.trunc(acc / lineH());
      if (!rows) return;
      acc -= rows * lineH();
      const max = this.screen?.history ?? 0;
      this.scrollTo(Math.max(0, Math.min(max, this.offset - rows)));
    };
    this.root.addEventListener("wheel", (e) => { e.preventDefault(); move(e.deltaY); }, { passive: false });
    let ty = null;
    this.root.addEventListener("touchstart", (e) => { ty = e.touches[0]?.clientY ?? null; }, { passive: true });
    this.root.addEventListener("touchmove", (e) => {
      const y = e.touches[0]?.clientY;
      if (ty == null || y == null) return;
      // Dragging down shows older rows.
      move(ty - y);
      ty = y;
    }, { passive: true });
  }

  scrollTo(offset) {
    if (offset === this.offset && this.pending == null) return;
    this.offset = offset;
    this.hooks.onScroll?.(offset);
    if (this.pending != null) { this.pending = offset; return; }
    this.pending = offset;
    requestAnimationFrame(() => {
      const o = this.pending;
      this.pending = null;
      if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: "scroll", offset: o }));
    });
  }

  follow() { this.scrollTo(0); }

  /** Sends pasted text over the screen socket (the node brackets it when the program asked
   *  for bracketed paste); false when the socket is not open. */
  paste(text) {
    if (this.ws?.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify({ type: "paste", data: text }));
    return true;
  }

  /** Sends input bytes to the PTY over the screen socket; false when it is not open. */
  input(data) {
    if (this.ws?.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify({ type: "input", data }));
    return true;
  }

  /** The rendered rows' text, trailing blanks trimmed (what tests compare with the node). */
  text() {
    return this.rowsEl.map((el) => el.textContent.replace(/\s+$/, ""));
  }

  close() {
    this.closed = true;
    clearTimeout(this.retry);
    this.resized.disconnect();
    window.removeEventListener("online", this.onWake);
    document.removeEventListener("visibilitychange", this.onWake);
    this.ws?.close();
  }
}

/** Bytes for a key press on the screen (desktop keyboards); null for keys left to the page. */
export function keyBytes(e) {
  if (e.isComposing || e.keyCode === 229) return null;
  const map = {
    Enter: "\r", Backspace: "\x7f", Tab: "\t", Escape: "\x1b",
    ArrowUp: "\x1b[A", ArrowDown: "\x1b[B", ArrowRight: "\x1b[C", ArrowLeft: "\x1b[D",
    Home: "\x1b[H", End: "\x1b[F", PageUp: "\x1b[5~", PageDown: "\x1b[6~", Delete: "\x1b[3~", Insert: "\x1b[2~",
  };
  if (map[e.key]) return map[e.key];
  if (e.key.length !== 1 || e.metaKey) return null;
  // Ctrl+Shift+V is a terminal's paste: left to the page's paste event (sent once, bracketed).
  if (e.ctrlKey && e.shiftKey && e.key.toLowerCase() === "v") return null;
  if (e.ctrlKey) {
    const c = e.key.toUpperCase().charCodeAt(0);
    if (c >= 64 && c <= 95) return String.fromCharCode(c - 64);
    return null;
  }
  return e.altKey ? "\x1b" + e.key : e.key;
}
