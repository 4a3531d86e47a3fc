// Agents' `ui action=toast` and `ui action=confirm` in the page: toasts from `mcp-toast`
// events, yes/no dialogs from `mcp-confirm` answered with POST /mcp/confirm-response and
// dropped on `mcp-confirm-resolved` (another UI answered, or the window closed). Text only
// ever goes in through textContent.

import { $ } from "/assets/dom.js";
import { api } from "/assets/api.js";

const TOAST_MS = 8000;

function toast(d) {
  const box = document.createElement("div");
  box.className = `toast ${["info", "warn", "error", "success"].includes(d.level) ? d.level : "info"}`;
  box.setAttribute("role", "status");
  if (d.title) {
    const t = document.createElement("strong");
    t.textContent = d.title;
    box.appendChild(t);
  }
  const m = document.createElement("span");
  m.textContent = d.message ?? "";
  box.appendChild(m);
  box.onclick = () => box.remove();
  $("notices").appendChild(box);
  setTimeout(() => box.remove(), TOAST_MS);
}

function confirmDialog(d) {
  const box = document.createElement("div");
  box.className = "confirm";
  box.setAttribute("role", "alertdialog");
  box.dataset.request = d.request_id;
  const t = document.createElement("strong");
  t.textContent = d.title ?? "An agent asks";
  const m = document.createElement("p");
  m.textContent = d.message ?? "";
  const row = document.createElement("div");
  row.className = "answers";
  const answer = (confirmed) => async () => {
    box.remove();
    try {
      await api("/mcp/confirm-response", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ request_id: d.request_id, confirmed }),
      });
    } catch {
      // Answered elsewhere or timed out: nothing left to do.
    }
  };
  for (const [label, yes] of [["Deny", false], ["Allow", true]]) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.dataset.answer = yes ? "allow" : "deny";
    b.onclick = answer(yes);
    row.appendChild(b);
  }
  box.append(t, m, row);
  $("notices").appendChild(box);
}

/** Shows toasts and confirm dialogs from the page's `/events` stream. */
export function bindNotices(es) {
  es.addEventListener("mcp-toast", (ev) => toast(JSON.parse(ev.data)));
  es.addEventListener("mcp-confirm", (ev) => confirmDialog(JSON.parse(ev.data)));
  es.addEventListener("mcp-confirm-resolved", (ev) => {
    const d = JSON.parse(ev.data);
    for (const el of document.querySelectorAll("#notices .confirm")) {
      if (el.dataset.request === d.request_id) el.remove();
    }
  });
}
