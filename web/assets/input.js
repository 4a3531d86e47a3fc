// Input controls: the line input (Enter sends; an Enter that commits an IME composition does
// not) and the special-keys bar with sticky Ctrl and Alt.

import { $ } from "/assets/dom.js";
import { state } from "/assets/state.js";

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

export function keysBar() {
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
      b.onclick = () => state.view?.typeIn(modified(data));
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
    state.view?.typeIn(modified(e.data));
  });
}

export function lineInput() {
  const input = $("line");
  const submit = () => {
    if (!state.view) return;
    state.view.typeIn(input.value + "\r");
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
