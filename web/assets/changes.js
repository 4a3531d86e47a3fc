// "Changes" (`#/changes/<session>`, phone and desktop; issue 43): what an agent's worktree
// changed — file list with +/− counts, commits, a file's diff (syntax-coloured, wrapped so a
// 390 px screen never scrolls the page sideways), tap a line to comment, send the review as
// one message (the delivery — ACP, agent mail or a paste into the PTY — is shown before
// sending), and the Merge panel with the branch's integration proof. Mounted alone by entry.js.

import { el, json, highlight } from "/assets/tabview.js";

const key = decodeURIComponent(location.hash.replace(/^#\/changes\//, ""));
const base = `/sessions/${encodeURIComponent(key)}`;
let review = null; // the draft review being built (stored by the node)

const files = el("ul", { id: "files", className: "files" });
const commits = el("ul", { id: "commits", className: "commits" });
const diff = el("div", { id: "diff", className: "diff", role: "list" });
const status = el("p", { id: "review-status", className: "empty", role: "status" });
const delivery = el("span", { id: "delivery", className: "badge" });
const count = el("span", { id: "comment-count" }, "0 comments");
const send = el("button", { id: "send-review", type: "button", disabled: true }, "Send review");
const merge = el("section", { id: "merge", className: "merge", "aria-label": "Merge" });
const title = el("h1", { id: "title" }, "Changes");

document.body.replaceChildren(
  el("header", { className: "top" },
    el("a", { className: "icon", href: `#/s/${encodeURIComponent(key)}`, "aria-label": "Back to the session" }, "‹"),
    title),
  el("main", { className: "changes" },
    el("div", { className: "review-bar" }, count, delivery, send),
    status,
    el("h2", {}, "Files"), files,
    diff,
    el("h2", {}, "Commits"), commits,
    el("h2", {}, "Merge"), merge));

function stat(f) {
  return f.binary ? "bin" : `+${f.added} −${f.removed}`;
}

async function load() {
  const c = await json(`${base}/changes`);
  title.textContent = `Changes · ${c.branch ?? "HEAD"} → ${c.base}`;
  delivery.textContent = c.delivery ? `via ${c.delivery}` : "not live";
  delivery.title = { acp: "sent as a prompt to the ACP agent", mail: "sent as agent mail to the session's identity", pty: "typed into the terminal as one paste" }[c.delivery] ?? "";
  files.replaceChildren(...c.files.map((f) => fileRow(f, false)),
    ...c.uncommitted.map((f) => fileRow(f, true)));
  if (!c.files.length && !c.uncommitted.length) files.append(el("li", { className: "empty" }, "No changes."));
  commits.replaceChildren(...c.commits.map((k) => el("li", {},
    el("code", {}, k.sha.slice(0, 8)), " ", k.subject)));
  const rs = await json(`${base}/reviews`);
  review = rs.reviews.filter((r) => r.state !== "sent").pop() ?? null;
  showCount();
  loadMerge();
}

function fileRow(f, uncommitted) {
  const b = el("button", { type: "button", className: "file", dataset: { file: f.path, uncommitted: uncommitted ? "1" : "" } },
    el("span", { className: `st ${f.status}` }, f.status[0].toUpperCase()), " ",
    el("span", { className: "name" }, f.old_path ? `${f.old_path} → ${f.path}` : f.path), " ",
    el("span", { className: "stat" }, stat(f)),
    uncommitted ? el("span", { className: "badge" }, "uncommitted") : "");
  b.onclick = () => openFile(f.path, uncommitted);
  return el("li", {}, b);
}

async function openFile(file, uncommitted) {
  const q = `file=${encodeURIComponent(file)}${uncommitted ? "&uncommitted=true" : ""}`;
  const d = await json(`${base}/changes/file?${q}`);
  diff.dataset.file = d.file;
  if (d.summary) {
    diff.replaceChildren(el("p", { className: "summary" }, `${d.file}: ${d.summary}`));
    return;
  }
  const lang = d.file.split(".").pop();
  diff.replaceChildren(el("h3", {}, d.file), ...d.lines.map((l) => lineRow(l, lang, d.file)));
  if (d.next_offset) diff.append(el("p", { className: "empty" }, `… ${d.total_lines - d.lines.length} more lines`));
}

function lineRow(l, lang, file) {
  const row = el("div", { className: `dl ${l.kind}`, role: "listitem", dataset: { kind: l.kind } });
  if (l.old) row.dataset.old = l.old;
  if (l.new) row.dataset.new = l.new;
  const num = el("span", { className: "ln" }, String(l.new ?? l.old ?? ""));
  const code = el("span", { className: "code" });
  if (l.kind === "add" || l.kind === "del" || l.kind === "ctx") {
    code.append(l.text[0]);
    const body = l.text.slice(1);
    if (l.hl?.length) {
      const cs = Array.from(l.text);
      const [s, e] = l.hl[0];
      code.append(...highlight(cs.slice(1, s).join(""), lang),
        el("mark", {}, cs.slice(s, e).join("")), ...highlight(cs.slice(e).join(""), lang));
    } else code.append(...highlight(body, lang));
    row.onclick = () => commentOn(row, l, file);
  } else code.textContent = l.text;
  row.append(num, code);
  return row;
}

function commentOn(row, l, file) {
  if (row.nextSibling?.classList?.contains("comment-form")) return;
  const ta = el("textarea", { className: "comment-text", rows: 2, placeholder: "Comment on this line" });
  const add = el("button", { type: "button", className: "comment-add" }, "Add comment");
  const form = el("div", { className: "comment-form" }, ta, add);
  add.onclick = async () => {
    const text = ta.value.trim();
    if (!text) return;
    const c = { file, line: l.new ?? l.old, side: l.new ? "new" : "old", text, excerpt: l.text.slice(1, 200) };
    const opts = (body) => ({ method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    review = review
      ? await json(`${base}/reviews/${review.id}/comments`, opts(c))
      : await json(`${base}/reviews`, opts({ comments: [c] }));
    form.replaceWith(el("div", { className: "comment" }, `💬 ${text}`));
    showCount();
  };
  row.after(form);
  ta.focus();
}

function showCount() {
  const n = review?.comments.length ?? 0;
  count.textContent = `${n} comment${n === 1 ? "" : "s"}`;
  send.disabled = n === 0;
}

send.onclick = async () => {
  if (!review) return;
  send.disabled = true;
  try {
    const r = await json(`${base}/reviews/${review.id}/send`, { method: "POST" });
    status.textContent = `Review sent via ${r.delivered_via} (${r.comments.length} comments).`;
    review = null;
    showCount();
  } catch (e) {
    status.textContent = `Not sent: ${e.message}`;
    send.disabled = false;
  }
};

async function loadMerge() {
  let m;
  try {
    m = await json(`${base}/merge`);
  } catch (e) {
    merge.replaceChildren(el("p", { className: "empty" }, e.message));
    return;
  }
  const p = m.integration ?? {};
  const msg = el("input", { id: "merge-message", type: "text", placeholder: `Squash ${m.branch}` });
  const out = el("p", { id: "merge-status", role: "status" });
  const ops = ["squash", "ff", "rebase"].map((op) => {
    const o = m.operations[op];
    const b = el("button", { type: "button", id: `merge-${op}`, disabled: !o.allowed, title: o.reason ?? "" },
      { squash: "Squash", ff: "Fast-forward", rebase: "Rebase & merge" }[op]);
    b.onclick = async () => {
      try {
        const r = await json(`${base}/merge`, { method: "POST", headers: { "content-type": "application/json" },
          body: JSON.stringify({ method: op, message: msg.value || undefined }) });
        out.textContent = `Landed ${r.commits.length} commit(s) on ${r.default_branch} (${r.to.slice(0, 8)}). Remove the worktree from the worktree list when done.`;
      } catch (e) { out.textContent = `Refused: ${e.message}`; }
      loadMerge().catch(() => {});
    };
    return b;
  });
  const reasons = ["squash", "ff", "rebase"].map((op) => m.operations[op]).filter((o) => !o.allowed)
    .map((o) => el("li", {}, o.reason));
  merge.replaceChildren(
    el("p", { id: "proof" }, `${m.branch} → ${m.default_branch}: ${m.ahead} ahead, ${m.behind} behind · ${p.commit_status ?? "unknown"}${p.proof ? ` (${p.proof})` : ""}`),
    msg, el("div", { className: "merge-ops" }, ...ops), el("ul", { className: "reasons" }, ...reasons), out);
}

load().catch((e) => { status.textContent = e.message; });
