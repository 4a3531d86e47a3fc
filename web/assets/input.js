// Input controls: the line input (Enter sends the line; an Enter that commits an IME
// composition does not; "no ⏎" sends it without Enter), the phone's typing mode (tap the screen:
// a hidden textarea takes the on-screen keyboard and each key goes to the PTY as typed), paste,
// and the special-keys bar with sticky Ctrl and Alt, Enter, Home/End, PgUp/PgDn and an F-key page.

import { $ } from "/assets/dom.js";
import { state } from "/assets/state.js";
import { keyBytes } from "/assets/screen.js";

// The special-keys bar: keys a phone keyboard lacks, on two pages ("Fn" flips). Ctrl and Alt
// are sticky: they apply to the next key from the bar or the next character typed, then release.
const KEYS = [
  ["Esc", "\x1b"], ["Tab", "\t"], ["Ctrl", null], ["Alt", null], ["Enter", "\r"],
  ["←", "\x1b[D"], ["↑", "\x1b[A"], ["↓", "\x1b[B"], ["→", "\x1b[C"],
  ["Home", "\x1b[H"], ["End", "\x1b[F"], ["PgUp", "\x1b[5~"], ["PgDn", "\x1b[6~"],
  ["|", "|"], ["~", "~"], ["/", "/"],
];
// xterm's function keys (what mc and htop read with TERM=xterm-256color).
const FKEYS = [
  ["F1", "\x1bOP"], ["F2", "\x1bOQ"], ["F3", "\x1bOR"], ["F4", "\x1bOS"], ["F5", "\x1b[15~"],
  ["F6", "\x1b[17~"], ["F7", "\x1b[18~"], ["F8", "\x1b[19~"], ["F9", "\x1b[20~"], ["F10", "\x1b[21~"],
  ["Esc", "\x1b"], ["Enter", "\r"],
];
const sticky = { ctrl: false, alt: false };

/** Applies the sticky modifiers to `data` (one character or a key's bytes) and releases them. */
export function modified(data) {
  if (!sticky.ctrl && !sticky.alt) return data;
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

function keyButton(label, data) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.dataset.key = label;
  if (data == null) {
    const mod = label.toLowerCase();
    b.dataset.mod = mod;
    b.setAttribute("aria-pressed", String(sticky[mod]));
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
}

/** Shows which ends of a sideways-scrolling row have more (a fade and an arrow, app.css). */
export function scrollHints(el) {
  const update = () => {
    el.classList.toggle("more-right", el.scrollLeft + el.clientWidth < el.scrollWidth - 2);
    el.classList.toggle("more-left", el.scrollLeft > 2);
  };
  el.addEventListener("scroll", update, { passive: true });
  new ResizeObserver(update).observe(el);
  return update;
}

export function keysBar() {
  const bar = $("keys");
  let page = "main";
  const hints = scrollHints(bar);
  const render = () => {
    const fn = document.createElement("button");
    fn.type = "button";
    fn.textContent = page === "main" ? "F1–10" : "Keys";
    fn.dataset.key = "Fn";
    fn.className = "page";
    fn.setAttribute("aria-label", page === "main" ? "Function keys F1 to F10" : "Back to the special keys");
    fn.addEventListener("pointerdown", (e) => e.preventDefault());
    fn.onclick = () => { page = page === "main" ? "fkeys" : "main"; render(); };
    const keys = (page === "main" ? KEYS : FKEYS).map(([l, d]) => keyButton(l, d));
    bar.replaceChildren(fn, ...keys);
    bar.dataset.page = page;
    bar.scrollLeft = 0;
    hints();
  };
  render();
  // A character typed in the line while a modifier is held goes to the PTY at once, modified.
  $("line").addEventListener("beforeinput", (e) => {
    if (!(sticky.ctrl || sticky.alt) || e.isComposing || e.inputType !== "insertText" || !e.data) return;
    e.preventDefault();
    state.view?.typeIn(modified(e.data));
  });
}

export function lineInput() {
  const input = $("line");
  const noEnter = $("no-enter");
  noEnter.addEventListener("pointerdown", (e) => e.preventDefault());
  noEnter.onclick = () => {
    const on = noEnter.getAttribute("aria-pressed") !== "true";
    noEnter.setAttribute("aria-pressed", String(on));
    input.placeholder = on ? "Type and send (no Enter)" : "Type and press Enter";
  };
  const submit = () => {
    if (!state.view) return;
    const enter = noEnter.getAttribute("aria-pressed") !== "true";
    state.view.typeIn(input.value + (enter ? "\r" : ""));
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

/**
 * The phone's typing mode. A tap on the screen focuses a hidden textarea, so the on-screen
 * keyboard opens over the terminal; what it produces goes to the PTY as it is typed:
 * - text through `beforeinput` (`insertText`), one send per event;
 * - an IME composition sends nothing until it ends, then the committed text once
 *   (`compositionend`); the keys pressed meanwhile are the IME's (`isComposing`, keyCode 229);
 * - Backspace, Enter, Esc, arrows and Ctrl/Alt chords from a hardware keyboard through
 *   `keydown` as a terminal sends them; a soft keyboard's Backspace/Enter through `beforeinput`
 *   (`deleteContentBackward`, `insertLineBreak`);
 * - paste sends the text once (`paste`; the node brackets it when the program asked for it).
 * The textarea is emptied after every event, so nothing accumulates and autocorrect has nothing
 * to rewrite.
 */
export function typingMode() {
  const t = $("type");
  const screen = $("screen");
  let composing = false;
  const send = (data) => { if (data) state.view?.typeIn(modified(data)); };
  const clear = () => { if (!composing) t.value = ""; };
  screen.addEventListener("click", () => {
    // A selection (to copy) is not a tap to type.
    if (String(window.getSelection?.() ?? "")) return;
    if (!state.view || state.view.mode !== "screen") return;
    t.focus({ preventScroll: true });
    screen.classList.add("typing");
  });
  t.addEventListener("blur", () => screen.classList.remove("typing"));
  t.addEventListener("compositionstart", () => { composing = true; });
  t.addEventListener("compositionend", (e) => {
    composing = false;
    send(e.data);
    t.value = "";
  });
  t.addEventListener("keydown", (e) => {
    if (composing || e.isComposing || e.keyCode === 229) return;
    // Printable characters arrive as text (beforeinput), so a soft keyboard's and a hardware
    // keyboard's letters take one path.
    if (e.key.length === 1 && !e.ctrlKey && !e.altKey && !e.metaKey) return;
    const b = keyBytes(e);
    if (b == null) return;
    e.preventDefault();
    send(b);
  });
  t.addEventListener("beforeinput", (e) => {
    if (composing || e.isComposing) return;
    switch (e.inputType) {
      case "insertText":
      case "insertReplacementText":
        send(e.data ?? e.dataTransfer?.getData("text/plain"));
        break;
      case "insertLineBreak":
      case "insertParagraph":
        send("\r");
        break;
      case "deleteContentBackward":
        send("\x7f");
        break;
      case "insertFromPaste":
      case "insertFromDrop":
        // The paste event below sends it.
        break;
      default:
        return;
    }
    e.preventDefault();
  });
  t.addEventListener("input", clear);
  const onPaste = (e) => {
    const text = e.clipboardData?.getData("text/plain");
    if (!text || !state.view) return;
    e.preventDefault();
    state.view.paste(text);
    clear();
  };
  t.addEventListener("paste", onPaste);
  // A desktop keyboard on the focused screen pastes the same way.
  screen.addEventListener("paste", onPaste);
}
