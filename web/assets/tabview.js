// A tab an agent opened (`ui action=tab`, `#/tab?kind=file|edit|url&path=|url=`): a file view
// (markdown rendered, code highlighted), a simple editor that saves through the root-gated
// `POST /fs/write-external`, or a web page in a frame. Mounted alone by entry.js; also the
// shared helpers of `changes.js` (element builder, JSON fetch, highlighter).
//
// Open tabs are remembered in this browser (`localStorage`, at most MAX_TABS, newest last) so
// they survive a reload and a node restart: the tab view lists them in a strip to switch
// between or close. The contents are never stored here; each is read from the node when shown.

export function el(tag, props = {}, ...kids) {
  const { dataset, ...rest } = props;
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(rest)) {
    if (k.includes("-")) e.setAttribute(k, v); else e[k] = v;
  }
  Object.assign(e.dataset, dataset ?? {});
  e.append(...kids.filter((k) => k !== null && k !== undefined));
  return e;
}

export async function json(path, opts = {}) {
  const r = await fetch(path, { credentials: "same-origin", ...opts });
  if (r.status === 401) {
    location.href = "/mobile/login?next=" + encodeURIComponent("/mobile" + location.hash);
    throw new Error("unauthorized");
  }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error ?? `${path}: ${r.status}`);
  return body;
}

const KEYWORDS = new Set(("fn let mut pub use mod struct enum impl trait for while loop if else match return " +
  "async await const static type where self Self true false None Some Ok Err def class import from " +
  "function var new this null undefined export default package func go int string bool void").split(" "));

// Splits one line of code into coloured spans: strings, comments, numbers, keywords.
export function highlight(text, lang) {
  const out = [];
  const re = /("(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?|\/\/.*$|#(?!\[).*$|\b\d[\d_.]*\b|\b[A-Za-z_]\w*\b)/g;
  let last = 0;
  for (const m of text.matchAll(re)) {
    const t = m[0];
    let cls = null;
    if (t[0] === '"' || t[0] === "'") cls = "s";
    else if (t.startsWith("//") || (t[0] === "#" && ["py", "sh", "rb", "toml", "yml", "yaml"].includes(lang))) cls = "c";
    else if (/^\d/.test(t)) cls = "n";
    else if (KEYWORDS.has(t)) cls = "k";
    if (!cls) continue;
    if (m.index > last) out.push(text.slice(last, m.index));
    out.push(el("span", { className: `hl-${cls}` }, t));
    last = m.index + t.length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

function inline(s) {
  const frag = [];
  const re = /(\*\*[^*]+\*\*|\*[^*]+\*|`[^`]+`)/g;
  let last = 0;
  for (const m of s.matchAll(re)) {
    if (m.index > last) frag.push(s.slice(last, m.index));
    const t = m[0];
    if (t.startsWith("**")) frag.push(el("strong", {}, t.slice(2, -2)));
    else if (t[0] === "`") frag.push(el("code", {}, t.slice(1, -1)));
    else frag.push(el("em", {}, t.slice(1, -1)));
    last = m.index + t.length;
  }
  if (last < s.length) frag.push(s.slice(last));
  return frag;
}

// A small markdown renderer (headings, paragraphs, lists, fenced code, emphasis); text only,
// never HTML from the file.
export function markdown(src) {
  const out = [];
  const lines = src.split("\n");
  let para = [];
  let list = null;
  const flush = () => {
    if (para.length) out.push(el("p", {}, ...inline(para.join(" "))));
    para = [];
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i];
    if (l.startsWith("```")) {
      flush();
      const lang = l.slice(3).trim();
      const code = [];
      while (++i < lines.length && !lines[i].startsWith("```")) code.push(lines[i]);
      out.push(el("pre", { className: "code" }, ...code.flatMap((c) => [...highlight(c, lang), "\n"])));
      continue;
    }
    const h = l.match(/^(#{1,6})\s+(.*)$/);
    if (h) { flush(); out.push(el(`h${h[1].length}`, {}, ...inline(h[2]))); continue; }
    const li = l.match(/^\s*[-*]\s+(.*)$/);
    if (li) {
      if (para.length) { out.push(el("p", {}, ...inline(para.join(" ")))); para = []; }
      if (!list) { list = el("ul"); out.push(list); }
      list.append(el("li", {}, ...inline(li[1])));
      continue;
    }
    if (!l.trim()) { flush(); continue; }
    para.push(l);
  }
  flush();
  return out;
}

const TABS_KEY = "tuic.tabs";
// Enough for a working set on a phone; older tabs drop off the front.
const MAX_TABS = 20;

export function storedTabs() {
  try {
    const v = JSON.parse(localStorage.getItem(TABS_KEY) ?? "[]");
    return Array.isArray(v) ? v.filter((h) => typeof h === "string" && h.startsWith("#/tab?")) : [];
  } catch { return []; }
}

function saveTabs(tabs) {
  try { localStorage.setItem(TABS_KEY, JSON.stringify(tabs.slice(-MAX_TABS))); } catch { /* private mode */ }
}

// Remembers a tab by its address (`#/tab?…`), once.
export function rememberTab(href) {
  saveTabs([...storedTabs().filter((h) => h !== href), href]);
}

function tabName(href) {
  const q = new URLSearchParams(href.replace(/^#\/tab\??/, ""));
  return (q.get("path") ?? "").split("/").pop() || q.get("url") || "tab";
}

function tabStrip(current) {
  const nav = el("nav", { id: "agent-tabs", className: "agent-tabs", "aria-label": "Open tabs" });
  for (const href of storedTabs()) {
    const a = el("a", { className: "agent-tab", href, dataset: { href } }, tabName(href));
    if (href === current) a.setAttribute("aria-current", "page");
    const close = el("button", { type: "button", className: "tab-close", "aria-label": `Close ${tabName(href)}` }, "×");
    close.onclick = () => {
      const rest = storedTabs().filter((h) => h !== href);
      saveTabs(rest);
      if (href === current) location.hash = rest.at(-1) ?? "";
      else mountTab();
    };
    nav.append(el("span", { className: "agent-tab-item" }, a, close));
  }
  return nav;
}

export async function mountTab() {
  const href = location.hash;
  rememberTab(href);
  const q = new URLSearchParams(href.replace(/^#\/tab\??/, ""));
  const kind = q.get("kind") ?? "file";
  const path = q.get("path") ?? "";
  const name = path.split("/").pop() || q.get("url") || "tab";
  const body = el("main", { id: "tab-body", className: "tab-body", dataset: { kind } });
  const back = el("a", { className: "icon", href: "#", "aria-label": "Back to sessions" }, "‹");
  back.onclick = (e) => { e.preventDefault(); location.hash = ""; };
  document.body.replaceChildren(el("header", { className: "top" }, back, el("h1", { id: "title" }, name)),
    tabStrip(href), body);
  if (kind === "url") {
    body.append(el("iframe", { src: q.get("url"), className: "tab-frame", title: name }));
    return;
  }
  let file;
  try {
    file = await json(`/fs/read-external?path=${encodeURIComponent(path)}`);
  } catch (e) {
    if (kind !== "edit") { body.append(el("p", { id: "tab-error", className: "empty" }, e.message)); return; }
    file = { content: "" };
  }
  if (kind === "edit") {
    const ta = el("textarea", { id: "editor", className: "editor", spellcheck: false });
    ta.value = file.content;
    const save = el("button", { id: "save", type: "button" }, "Save");
    const st = el("span", { id: "save-status", role: "status" });
    save.onclick = async () => {
      try {
        await json("/fs/write-external", { method: "POST", headers: { "content-type": "application/json" },
          body: JSON.stringify({ path, content: ta.value }) });
        st.textContent = "Saved";
      } catch (e) { st.textContent = `Not saved: ${e.message}`; }
    };
    body.append(el("div", { className: "review-bar" }, save, st), ta);
  } else if (/\.(md|markdown)$/i.test(path)) {
    body.append(el("article", { id: "file-view", className: "markdown" }, ...markdown(file.content)));
  } else {
    const lang = path.split(".").pop();
    body.append(el("pre", { id: "file-view", className: "code" },
      ...file.content.split("\n").flatMap((l) => [...highlight(l, lang), "\n"])));
  }
}

if (location.hash.startsWith("#/tab")) mountTab();
