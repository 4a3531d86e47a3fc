// The owner's trust page (`#/trust`, phone and desktop): the audit log (newest first), share
// links with their viewers (revoke), stored secret names (delete) and open secret forms.
// Mounted alone by entry.js, like the secret form.

function el(tag, props = {}, ...kids) {
  const { dataset, ...rest } = props;
  const e = Object.assign(document.createElement(tag), rest);
  Object.assign(e.dataset, dataset ?? {});
  e.append(...kids);
  return e;
}

async function json(path, opts = {}) {
  const r = await fetch(path, { credentials: "same-origin", ...opts });
  if (r.status === 401) {
    location.href = "/mobile/login?next=" + encodeURIComponent("/mobile");
    throw new Error("unauthorized");
  }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error ?? `${path}: ${r.status}`);
  return body;
}

const audit = el("ol", { id: "audit", className: "audit" });
const shares = el("ul", { id: "shares", className: "sessions" });
const secrets = el("ul", { id: "secrets", className: "sessions" });
const forms = el("ul", { id: "secret-forms", className: "sessions" });
const templates = el("ul", { id: "secret-templates", className: "sessions" });
const summary = el("p", { id: "audit-summary", className: "empty" });
document.body.replaceChildren(
  el("header", { className: "top" },
    el("a", { href: "/mobile", className: "icon", ariaLabel: "Back to sessions", textContent: "‹" }),
    el("h1", { textContent: "Audit and sharing" })),
  el("main", { className: "trust" },
    el("h2", { textContent: "Secret requests" }), forms,
    el("h2", { textContent: "Secrets" }), secrets,
    el("h2", { textContent: "Approved commands" }), templates,
    el("h2", { textContent: "Share links" }), shares,
    el("h2", { textContent: "Audit log" }), summary, audit));

function when(ms) {
  return new Date(ms).toLocaleString();
}

async function refresh() {
  const [a, s, k] = await Promise.all([json("/audit?limit=200"), json("/shares"), json("/secrets")]);
  // On a hub the page holds every connected node's entries too, each with its host.
  const down = (a.hosts ?? []).filter((h) => h.error).map((h) => `${h.host}: ${h.error}`);
  summary.textContent = `${a.total} entries held (bound ${a.max_entries}, ${a.max_age_days} days), ${a.dropped} dropped`
    + (a.hosts ? ` · hosts ${a.hosts.map((h) => h.host).join(", ")}` : "")
    + (down.length ? ` · unavailable: ${down.join("; ")}` : "");
  audit.replaceChildren(...a.entries.map((e) => el("li", { className: "audit-entry", dataset: { kind: e.kind, host: e.host ?? "" } },
    e.host ? el("b", { className: "audit-host", textContent: `[${e.host}] ` }) : "",
    `${when(e.at_ms)} ${e.kind} · ${e.who} (${e.via}${e.address ? " " + e.address : ""})${e.session ? " · " + e.session : ""}`,
    e.detail ? el("code", { textContent: " " + JSON.stringify(e.detail) }) : "")));
  shares.replaceChildren(...s.shares.map((l) => {
    // On a hub, a node's links are named `<host>/<id>` and revoked on that node.
    const li = el("li", { className: "share-link", dataset: { id: l.id, host: l.host ?? "" } },
      l.host ? el("b", { className: "audit-host", textContent: `[${l.host}] ` }) : "",
      `${l.session_id} · ${l.scope} · ${l.state} · viewers ${l.viewers.length} `);
    if (l.state === "active") {
      li.append(el("button", {
        type: "button", textContent: "Revoke", className: "revoke",
        onclick: () => json(`/shares/${encodeURIComponent(l.id)}`, { method: "DELETE" }).then(refresh),
      }));
    }
    return li;
  }));
  secrets.replaceChildren(...k.secrets.map((x) => el("li", { className: "secret-name", dataset: { name: x.name } },
    `${x.name} · ${when(x.stored_ms)} `,
    el("button", {
      type: "button", textContent: "Delete", className: "delete",
      onclick: () => json(`/secrets/${encodeURIComponent(x.name)}`, { method: "DELETE" }).then(refresh),
    }))));
  forms.replaceChildren(...k.forms.map((f) => el("li", {},
    el("a", { href: f.path, textContent: `${f.name}: ${f.reason || "(no reason)"} — answer` }))),
    ...(k.consents ?? []).map((c) => el("li", { className: "secret-consent" },
      el("a", { href: c.path, textContent: `${c.name}: run ${c.argv.join(" ")} — approve or deny` }))));
  templates.replaceChildren(...(k.templates ?? []).map((t) => el("li", { className: "secret-template", dataset: { id: t.id } },
    `${t.name} · ${t.argv.join(" ")}${t.cwd ? " · in " + t.cwd : ""} `,
    el("button", {
      type: "button", textContent: "Delete", className: "delete",
      onclick: () => json(`/secrets/templates/${encodeURIComponent(t.id)}`, { method: "DELETE" }).then(refresh),
    }))));
}

refresh();
setInterval(refresh, 3000);
