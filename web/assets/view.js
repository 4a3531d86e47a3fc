// The session view: the node's screen (screen sync, `screen.js`) by default, the History tab's
// byte view (binary stream, ANSI colours, paged older output) on demand, quick-reply chips,
// the exit note, and input to the PTY in order over the screen socket.

import { $ } from "/assets/dom.js";
import { api } from "/assets/api.js";
import { AnsiRenderer } from "/assets/ansi.js";
import { ScreenClient, keyBytes } from "/assets/screen.js";
import { renderViewState } from "/assets/list.js";

const PAGE = 64 * 1024;
const CHIPS = [["1", "1\r"], ["2", "2\r"], ["y", "y\r"], ["n", "n\r"], ["Enter", "\r"], ["Ctrl-C", "\x03"]];
export class SessionView {
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
    // Size policy: viewing never resizes the PTY; Fit is the explicit claim (see screen.js).
    // Fit holds the PTY at this screen's size until pressed again or the view leaves (the node
    // then puts the size before back).
    $("fit").setAttribute("aria-pressed", "false");
    $("fit").onclick = () => {
      const on = $("fit").getAttribute("aria-pressed") !== "true";
      $("fit").setAttribute("aria-pressed", String(on));
      if (on) this.screen.fitToView(); else this.screen.unfit();
    };
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
      this.historyReady = this.start();
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

  /** Reconnects if the session still exists: a node that crashed or was restarted keeps its
   *  sessions (their holders do), one that was stopped ends them. */
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
    renderViewState();
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

  /** A question from the node: the whole question, then its answers — a numbered menu's
   *  choices as large separate buttons (the digit alone for a `❯` selector, digit + Enter
   *  otherwise), else the usual quick replies. */
  showChips(ev) {
    const box = $("chips");
    const q = document.createElement("div");
    q.className = "question";
    q.textContent = ev.text ?? "";
    const options = (ev.options ?? []).map((o, i) => [`${i + 1}. ${o}`, ev.select ? `${i + 1}` : `${i + 1}\r`, `${i + 1}`]);
    const answers = options.length ? options.concat(CHIPS.slice(4)) : CHIPS;
    const buttons = answers.map(([label, data, reply]) => {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.dataset.reply = reply ?? label;
      if (reply) b.className = "choice";
      b.onclick = () => { this.answered = ev.text ?? ""; this.send(data); this.hideChips(); };
      return b;
    });
    box.classList.toggle("menu", options.length > 0);
    box.replaceChildren(q, ...buttons);
    box.hidden = false;
    box.dataset.question = ev.text ?? "";
    this.chipsAt = Date.now();
  }

  hideChips() { $("chips").hidden = true; }

  /** The session's row (from the list): its pending question shows its answers although
   *  this page never saw the question appear (a reload, another device, a hub's row). */
  syncRow(row) {
    const q = row?.question;
    const box = $("chips");
    if (q && box.hidden && q.text !== this.answered) {
      this.showChips({ type: "question", ...q });
    } else if (!q && !box.hidden && row.state !== "needs_input" && Date.now() - (this.chipsAt ?? 0) > 2000) {
      // Answered elsewhere or gone from the screen.
      this.hideChips();
    }
  }

  /** Pasted text, once, in order with the keys (bracketed by the node when asked for). */
  paste(text) {
    if (!text) return;
    if (!this.screen.paste(text)) this.send(text);
  }

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

  /**
   * Finds `query` (case-insensitive) in the history, searching backwards from the last hit (or
   * the end), loading older retained output as needed (bounded); marks and shows the line.
   * Returns whether it was found.
   */
  async find(query) {
    const q = query.trim().toLowerCase();
    if (!q) return false;
    if (this.mode !== "history") this.showHistory();
    await this.historyReady;
    for (let pages = 0; pages < 64; pages++) {
      const lines = [...this.term.querySelectorAll(".ln")];
      const last = this.term.querySelector(".ln.hit");
      let from = last ? lines.indexOf(last) - 1 : lines.length - 1;
      for (let i = from; i >= 0; i--) {
        if (lines[i].textContent.toLowerCase().includes(q)) {
          last?.classList.remove("hit");
          lines[i].classList.add("hit");
          lines[i].scrollIntoView({ block: "center" });
          this.follow = false;
          $("jump").hidden = false;
          return true;
        }
      }
      if (this.oldest <= 0) break;
      const before = this.term.querySelectorAll(".ln").length;
      await this.loadOlder();
      // Older lines were prepended above: search again (above the last hit, when there is one).
      if (this.term.querySelectorAll(".ln").length === before) break;
    }
    return false;
  }

  /** The screen's rows as plain text (what the person sees), for the clipboard. */
  screenText() {
    return this.screen.text().join("\n").replace(/\n+$/, "\n");
  }

  close() {
    this.closed = true;
    this.ws?.close();
    this.screen.close();
  }
}

