// A small ANSI renderer for the live view: SGR colours and styles, CR/LF/BS, erase-in-line
// and clear-screen. Other control sequences (cursor addressing, modes, OSC titles) are
// consumed so they never show as garbage. It keeps parser state across chunks, so a
// sequence split between two WebSocket frames renders correctly.

const BASE16 = [
  "#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
  "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff",
];

function color256(n) {
  if (n < 16) return BASE16[n];
  if (n < 232) {
    const i = n - 16, r = Math.floor(i / 36), g = Math.floor(i / 6) % 6, b = i % 6;
    const v = (x) => (x === 0 ? 0 : 55 + x * 40);
    return `rgb(${v(r)},${v(g)},${v(b)})`;
  }
  const l = 8 + (n - 232) * 10;
  return `rgb(${l},${l},${l})`;
}

export class AnsiRenderer {
  /** @param {HTMLElement} root element that receives one <div> per line */
  constructor(root, maxLines = 5000) {
    this.root = root;
    this.maxLines = maxLines;
    this.style = {};
    this.state = "text"; // text | esc | csi | osc | osc_esc
    this.params = "";
    this.line = this.newLine();
    this.col = 0;
  }

  newLine() {
    const div = document.createElement("div");
    div.className = "ln";
    this.root.appendChild(div);
    while (this.root.childElementCount > this.maxLines) this.root.firstElementChild.remove();
    return div;
  }

  reset() {
    this.root.replaceChildren();
    this.line = this.newLine();
    this.col = 0;
  }

  /** Text of the current line, as cells (used for CR overwrite). */
  cells() {
    return this.line.textContent.length;
  }

  put(text) {
    if (!text) return;
    // After CR (or BS) new text overwrites the cells it covers and keeps the rest.
    let tail = [];
    if (this.col < this.cells()) {
      tail = this.segment(this.col + text.length, Infinity);
      this.line.replaceChildren(...this.segment(0, this.col));
    }
    const span = document.createElement("span");
    span.textContent = text;
    const s = this.style;
    let fg = s.fg, bg = s.bg;
    if (s.inverse) [fg, bg] = [bg ?? "var(--bg)", fg ?? "var(--fg)"];
    if (fg) span.style.color = fg;
    if (bg) span.style.backgroundColor = bg;
    if (s.bold) span.style.fontWeight = "bold";
    if (s.dim) span.style.opacity = "0.7";
    if (s.italic) span.style.fontStyle = "italic";
    if (s.underline) span.style.textDecoration = "underline";
    this.line.append(span, ...tail);
    this.col += text.length;
  }

  /** Copies of the current line's nodes covering characters [from, to). */
  segment(from, to) {
    const out = [];
    let pos = 0;
    for (const node of Array.from(this.line.childNodes)) {
      const t = node.textContent, end = pos + t.length;
      const a = Math.max(from, pos), b = Math.min(to, end);
      if (a < b) {
        const c = node.cloneNode(true);
        c.textContent = t.slice(a - pos, b - pos);
        out.push(c);
      }
      pos = end;
    }
    return out;
  }

  sgr(params) {
    const p = params === "" ? [0] : params.split(";").map((x) => parseInt(x || "0", 10));
    for (let i = 0; i < p.length; i++) {
      const n = p[i];
      if (n === 0) this.style = {};
      else if (n === 1) this.style.bold = true;
      else if (n === 2) this.style.dim = true;
      else if (n === 3) this.style.italic = true;
      else if (n === 4) this.style.underline = true;
      else if (n === 7) this.style.inverse = true;
      else if (n === 22) { this.style.bold = false; this.style.dim = false; }
      else if (n === 23) this.style.italic = false;
      else if (n === 24) this.style.underline = false;
      else if (n === 27) this.style.inverse = false;
      else if (n >= 30 && n <= 37) this.style.fg = BASE16[n - 30];
      else if (n >= 90 && n <= 97) this.style.fg = BASE16[n - 90 + 8];
      else if (n >= 40 && n <= 47) this.style.bg = BASE16[n - 40];
      else if (n >= 100 && n <= 107) this.style.bg = BASE16[n - 100 + 8];
      else if (n === 39) delete this.style.fg;
      else if (n === 49) delete this.style.bg;
      else if ((n === 38 || n === 48) && p[i + 1] === 5) {
        this.style[n === 38 ? "fg" : "bg"] = color256(p[i + 2] ?? 0); i += 2;
      } else if ((n === 38 || n === 48) && p[i + 1] === 2) {
        this.style[n === 38 ? "fg" : "bg"] = `rgb(${p[i + 2] ?? 0},${p[i + 3] ?? 0},${p[i + 4] ?? 0})`; i += 4;
      }
    }
  }

  csi(final, params) {
    if (final === "m") this.sgr(params);
    else if (final === "K") {
      const mode = params === "" ? 0 : parseInt(params, 10);
      if (mode === 0) this.line.replaceChildren(...this.segment(0, this.col));
      else if (mode === 2) { this.line.replaceChildren(); this.col = 0; }
    } else if (final === "J" && (params === "2" || params === "3")) this.reset();
    else if (final === "h" && (params === "?1049" || params === "?47" || params === "?1047")) this.reset();
    // Everything else (cursor moves, scroll regions, modes) is consumed silently.
  }

  write(str) {
    let text = "";
    const flush = () => { this.put(text); text = ""; };
    for (const ch of str) {
      switch (this.state) {
        case "text":
          if (ch === "\x1b") { flush(); this.state = "esc"; }
          else if (ch === "\n") { flush(); this.line = this.newLine(); this.col = 0; }
          else if (ch === "\r") { flush(); this.col = 0; }
          else if (ch === "\b") { flush(); this.col = Math.max(0, this.col - 1); }
          else if (ch === "\x07" || ch < " ") { /* bell and other C0 controls */ }
          else text += ch;
          break;
        case "esc":
          if (ch === "[") { this.state = "csi"; this.params = ""; }
          else if (ch === "]") this.state = "osc";
          else this.state = "text"; // two-byte escapes (charset, keypad) are dropped
          break;
        case "csi":
          if (ch >= "@" && ch <= "~") { this.csi(ch, this.params); this.state = "text"; }
          else this.params += ch;
          break;
        case "osc":
          if (ch === "\x07") this.state = "text";
          else if (ch === "\x1b") this.state = "osc_esc";
          break;
        case "osc_esc":
          this.state = ch === "\\" ? "text" : "osc";
          break;
      }
    }
    flush();
  }
}
