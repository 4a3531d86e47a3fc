// Markdown for the chat view's agent messages, rendered safely: the text becomes DOM nodes
// built with createElement and textContent only — never innerHTML — so HTML in a message
// (a <script>, an <img onerror>) shows as text. It covers what agents write: paragraphs,
// headings, lists, quotes, fenced code blocks (an unclosed fence, mid-stream, runs to the end),
// inline code, bold, italic and links (http, https and mailto only; any other scheme stays
// text). It deliberately does not do tables, images or raw HTML.

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([\s\S]+?)\*\*|(?<!\w)__(?!\s)([\s\S]+?)__(?!\w)|\*(?!\s)([^*]+?)\*|\b_(?!\s)([^_]+?)_\b|\[([^\]]+)\]\(([^)\s]+)\)/g;

function safeHref(url) {
  try {
    const u = new URL(url);
    return ["http:", "https:", "mailto:"].includes(u.protocol) ? u.href : null;
  } catch { return null; }
}

/** Inline markup of one block's text, appended to `parent`. */
function inline(parent, text) {
  let at = 0;
  // Its own cursor: the recursion into bold, italic and link text runs its own scan, which
  // must not move this one (a shared `lastIndex` would restart it: an endless loop).
  const re = new RegExp(INLINE.source, INLINE.flags);
  for (let m; (m = re.exec(text)); ) {
    if (m.index > at) parent.appendChild(document.createTextNode(text.slice(at, m.index)));
    at = re.lastIndex;
    if (m[1]) parent.appendChild(el("code", "", m[2].replace(/^ (.*) $/, "$1")));
    else if (m[3] !== undefined || m[4] !== undefined) inline(parent.appendChild(el("strong")), m[3] ?? m[4]);
    else if (m[5] !== undefined || m[6] !== undefined) inline(parent.appendChild(el("em")), m[5] ?? m[6]);
    else {
      const href = safeHref(m[8]);
      if (!href) { parent.appendChild(document.createTextNode(m[0])); continue; }
      const a = el("a");
      a.href = href;
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      inline(a, m[7]);
      parent.appendChild(a);
    }
  }
  if (at < text.length) parent.appendChild(document.createTextNode(text.slice(at)));
}

/** Lines joined inside one block keep their breaks. */
function lines(parent, ls) {
  ls.forEach((l, i) => {
    if (i) parent.appendChild(el("br"));
    inline(parent, l);
  });
}

/** Renders `text` as markdown into `target` (its children are replaced). */
export function renderMarkdown(target, text) {
  const out = [];
  const src = text.split("\n");
  let para = [];
  const flush = () => {
    if (para.length) { const p = el("p"); lines(p, para); out.push(p); para = []; }
  };
  for (let i = 0; i < src.length; i++) {
    const line = src[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+-]*)/);
    if (fence) {
      flush();
      const body = [];
      for (i++; i < src.length && !src[i].trim().startsWith(fence[1]); i++) body.push(src[i]);
      const pre = el("pre", "code");
      const code = el("code", "", body.join("\n"));
      if (fence[2]) code.dataset.lang = fence[2];
      pre.appendChild(code);
      out.push(pre);
      continue;
    }
    const h = line.match(/^(#{1,6})\s+(.*)$/);
    if (h) {
      flush();
      const e = el(`h${Math.min(6, h[1].length + 2)}`);
      inline(e, h[2]);
      out.push(e);
      continue;
    }
    const item = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
    if (item) {
      flush();
      const ordered = /\d/.test(item[1]);
      const tag = ordered ? "OL" : "UL";
      let list = out[out.length - 1];
      if (!list || list.tagName !== tag) { list = el(tag.toLowerCase()); out.push(list); }
      const li = el("li");
      inline(li, item[2]);
      list.appendChild(li);
      continue;
    }
    const quote = line.match(/^>\s?(.*)$/);
    if (quote) {
      flush();
      let q = out[out.length - 1];
      if (!q || q.tagName !== "BLOCKQUOTE") { q = el("blockquote"); out.push(q); }
      if (q.childNodes.length) q.appendChild(el("br"));
      inline(q, quote[1]);
      continue;
    }
    if (!line.trim()) { flush(); out.push(null); continue; }
    para.push(line);
  }
  flush();
  target.replaceChildren(...out.filter(Boolean));
}
