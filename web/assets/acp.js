// ACP connections on the page: their rows (put in the one session list by list.js) and the chat
// view (#/acp/<id>) — streamed agent messages rendered as markdown (markdown.js: DOM nodes only), collapsible thoughts, the plan as a checklist, tool
// calls with their status and diffs, permission requests as cards whose buttons are the agent's
// own options, a prompt box with photo/file attach (ACP image / resource blocks), and cancel.
// The view reads the connection's journal stream (`WS /acp/connections/{id}/stream?after=`):
// on open from the oldest kept frame, after a drop from the last frame it rendered, so a
// reload or a locked phone shows every frame once, none twice.

import { $, desktop } from "/assets/dom.js";
import { api } from "/assets/api.js";
import { state } from "/assets/state.js";
import { renderList } from "/assets/list.js";
import { renderMarkdown } from "/assets/markdown.js";

export const acpState = { view: null };

function label(st) { return (st ?? "").replaceAll("_", " "); }

export async function refreshAcp() {
  try {
    const r = await api("/acp/connections");
    state.acp = await r.json();
  } catch { return; }
  renderList();
}

/** Shows or hides the chat view for the current hash; called by the router. */
export function routeAcp() {
  const m = location.hash.match(/^#\/acp\/(.+)$/);
  const id = m ? decodeURIComponent(m[1]) : null;
  if (acpState.view && acpState.view.id !== id) { acpState.view.close(); acpState.view = null; }
  $("acp-view").hidden = !id;
  if (!id) return false;
  $("list-view").hidden = !desktop;
  $("session-view").hidden = true;
  $("back").hidden = desktop;
  const row = state.acp.find((r) => r.id === id);
  $("title").textContent = row ? row.name : "Agent";
  if (!acpState.view) acpState.view = new AcpView(id);
  return true;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** A diff as lines: removed lines of the old text, then added lines of the new one. */
function diffBlock(c) {
  const pre = el("pre", "diff");
  const head = el("div", "path", c.path ?? "");
  pre.appendChild(head);
  for (const l of (c.oldText ?? "").split("\n").filter((x, i, a) => x !== "" || i < a.length - 1)) {
    pre.appendChild(el("div", "del", `- ${l}`));
  }
  for (const l of (c.newText ?? "").split("\n").filter((x, i, a) => x !== "" || i < a.length - 1)) {
    pre.appendChild(el("div", "add", `+ ${l}`));
  }
  return pre;
}

class AcpView {
  constructor(id) {
    this.id = id;
    this.cursor = null;
    this.closed = false;
    this.msg = null;
    this.tools = new Map();
    this.cards = new Map();
    this.log = $("acp-log");
    this.log.replaceChildren();
    $("acp-plan").replaceChildren();
    $("acp-plan").hidden = true;
    $("acp-prompt").onsubmit = (e) => { e.preventDefault(); this.send(); };
    $("acp-cancel").onclick = () => api(`/acp/connections/${encodeURIComponent(id)}/cancel`, { method: "POST" }).catch(() => {});
    $("acp-attach").onclick = () => $("acp-file").click();
    $("acp-file").onchange = () => this.attach();
    this.pending = [];
    this.open();
  }

  close() { this.closed = true; this.ws?.close(); }

  async open() {
    if (this.closed) return;
    if (this.cursor === null) {
      try {
        const r = await api(`/acp/connections/${encodeURIComponent(this.id)}`);
        const s = await r.json();
        this.cursor = Math.max(0, s.first_seq - 1);
      } catch { setTimeout(() => this.open(), 2000); return; }
    }
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${proto}://${location.host}/acp/connections/${encodeURIComponent(this.id)}/stream?after=${this.cursor}`);
    this.ws = ws;
    ws.onmessage = (ev) => {
      const f = JSON.parse(ev.data);
      if (f.type === "gap") { this.note(`Frames after ${f.after} are no longer kept.`); return; }
      if (f.seq <= this.cursor) return;
      this.cursor = f.seq;
      this.frame(f);
      $("acp-log").dataset.cursor = String(this.cursor);
    };
    ws.onclose = () => { if (!this.closed) setTimeout(() => this.open(), 1000); };
  }

  scroll() { this.log.scrollTop = this.log.scrollHeight; }

  note(text, cls = "note") { this.log.appendChild(el("div", cls, text)); this.msg = null; this.scroll(); }

  frame(f) {
    // Whatever follows a message shows it whole: its pending render runs first.
    if (this.msg?.timer && !(f.type === "update" && f.update?.sessionUpdate === "agent_message_chunk")) {
      clearTimeout(this.msg.timer);
      this.msg.timer = null;
      renderMarkdown(this.msg.el, this.msg.text);
    }
    switch (f.type) {
      case "started": this.note(`Starting ${f.agent} (#${f.generation})`); break;
      case "ready": this.note(f.loaded ? "Session resumed" : "Ready"); break;
      case "prompt": {
        const b = el("div", "bubble user");
        for (const c of f.content) {
          if (c.type === "text") b.appendChild(el("div", "", c.text));
          else b.appendChild(el("div", "attach-note", `Attached: ${c.name ?? c.resource?.uri ?? c.type}`));
        }
        this.log.appendChild(b);
        this.msg = null;
        break;
      }
      case "update": this.update(f.update); break;
      case "permission": this.permission(f); break;
      case "permission_outcome": {
        const card = this.cards.get(f.request_id);
        if (card) {
          card.classList.add("settled");
          for (const btn of card.querySelectorAll("button")) {
            btn.disabled = true;
            if (btn.dataset.option === f.option_id) btn.classList.add("chosen");
          }
          card.querySelector(".outcome").textContent = f.option_id ? `Answered by ${f.by}` : `Cancelled (${f.by})`;
        }
        break;
      }
      case "capability":
        if (!f.ok) this.note(`Refused ${f.method} ${f.target}: ${f.error}`, "note warn");
        break;
      case "agent_error": {
        const card = el("div", "card error");
        card.appendChild(el("div", "title", `The agent refused ${f.method}`));
        card.appendChild(el("div", "", `${f.message} (${f.code})`));
        if (f.auth_methods?.length) {
          card.appendChild(el("div", "", "Log it in with: " + f.auth_methods.map((m) => m.name ?? m.id).join(", ")));
        }
        this.log.appendChild(card);
        this.msg = null;
        break;
      }
      case "turn_end": this.note(f.error ? `Turn ended: ${f.stop_reason} — ${f.error}` : `Turn ended: ${label(f.stop_reason)}`); break;
      case "exit": this.note(`Agent ended: ${f.reason}`); break;
    }
    this.scroll();
  }

  update(u) {
    switch (u.sessionUpdate) {
      case "agent_message_chunk": {
        if (!this.msg || this.msg.kind !== "agent") {
          const b = el("div", "bubble agent");
          this.log.appendChild(b);
          this.msg = { kind: "agent", el: b, text: "" };
        }
        if (u.content?.type === "text") {
          this.msg.text += u.content.text;
          this.markdown(this.msg);
        }
        break;
      }
      case "agent_thought_chunk": {
        if (!this.msg || this.msg.kind !== "thought") {
          const d = el("details", "thought");
          d.appendChild(el("summary", "", "Thinking"));
          const body = el("div", "body");
          d.appendChild(body);
          this.log.appendChild(d);
          this.msg = { kind: "thought", el: body };
        }
        if (u.content?.type === "text") this.msg.el.textContent += u.content.text;
        break;
      }
      case "plan": {
        const ul = $("acp-plan");
        ul.replaceChildren(...(u.entries ?? []).map((e) => {
          const li = el("li", e.status);
          const box = el("input");
          box.type = "checkbox";
          box.disabled = true;
          box.checked = e.status === "completed";
          li.append(box, document.createTextNode(" " + e.content));
          return li;
        }));
        ul.hidden = false;
        break;
      }
      case "tool_call": {
        const card = el("div", "card tool");
        card.dataset.tool = u.toolCallId;
        const head = el("div", "title");
        head.append(el("span", "", u.title ?? u.toolCallId), el("span", `badge ${u.status ?? ""}`, u.status ?? ""));
        card.appendChild(head);
        card.appendChild(el("div", "content"));
        this.tools.set(u.toolCallId, card);
        this.log.appendChild(card);
        this.msg = null;
        this.toolContent(card, u.content);
        break;
      }
      case "tool_call_update": {
        const card = this.tools.get(u.toolCallId);
        if (!card) break;
        if (u.status) {
          const b = card.querySelector(".badge");
          b.className = `badge ${u.status}`;
          b.textContent = u.status;
        }
        this.toolContent(card, u.content);
        break;
      }
    }
  }

  /** Renders a message's markdown at most once per 30 ms while chunks stream in (a long
   *  message is re-parsed whole, so not once per chunk), and always after the last one. */
  markdown(m) {
    if (m.timer) return;
    m.timer = setTimeout(() => { m.timer = null; renderMarkdown(m.el, m.text); this.scroll(); }, m.el.childNodes.length ? 30 : 0);
  }

  toolContent(card, content) {
    if (!content) return;
    const box = card.querySelector(".content");
    box.replaceChildren();
    for (const c of content) {
      if (c.type === "diff") box.appendChild(diffBlock(c));
      else if (c.type === "content" && c.content?.type === "text") box.appendChild(el("pre", "out", c.content.text));
    }
  }

  permission(f) {
    const card = el("div", "card permission");
    card.dataset.request = f.request_id;
    card.appendChild(el("div", "title", f.tool_call?.title ?? "Permission requested"));
    const row = el("div", "options");
    for (const o of f.options) {
      const b = el("button", `option ${o.kind}`, o.name);
      b.type = "button";
      b.dataset.option = o.option_id;
      b.onclick = async () => {
        for (const x of row.querySelectorAll("button")) x.disabled = true;
        try {
          await api(`/acp/connections/${encodeURIComponent(this.id)}/interactions/${encodeURIComponent(f.request_id)}`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ option_id: o.option_id, by: desktop ? "browser" : "phone" }),
          });
        } catch (e) {
          card.querySelector(".outcome").textContent = String(e.message ?? e);
        }
      };
      row.appendChild(b);
    }
    card.appendChild(row);
    card.appendChild(el("div", "outcome"));
    this.cards.set(f.request_id, card);
    this.log.appendChild(card);
    this.msg = null;
  }

  async attach() {
    const file = $("acp-file").files[0];
    $("acp-file").value = "";
    if (!file) return;
    const buf = new Uint8Array(await file.arrayBuffer());
    let bin = "";
    for (let i = 0; i < buf.length; i += 0x8000) bin += String.fromCharCode(...buf.subarray(i, i + 0x8000));
    const data = btoa(bin);
    if (file.type.startsWith("image/")) {
      this.pending.push({ type: "image", mimeType: file.type, data });
    } else {
      this.pending.push({ type: "resource", resource: { uri: `file:///${file.name}`, mimeType: file.type || "application/octet-stream", blob: data } });
    }
    $("acp-attached").textContent = `${this.pending.length} attached`;
  }

  async send() {
    const text = $("acp-line").value.trim();
    if (!text && !this.pending.length) return;
    const content = [...this.pending];
    if (text) content.unshift({ type: "text", text });
    try {
      await api(`/acp/connections/${encodeURIComponent(this.id)}/prompt`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ content }),
      });
      $("acp-line").value = "";
      this.pending = [];
      $("acp-attached").textContent = "";
    } catch (e) {
      this.note(`Not sent: ${e.message ?? e}`, "note warn");
    }
  }
}
