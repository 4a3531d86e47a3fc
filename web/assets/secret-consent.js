// The consent form of `secret action=run` (the spec's consent templates): a person approves
// one exact run — the secret's name, the whole argv and the directory — before an agent may
// run it with the secret in its environment. The nonce in the address is the request's
// one-time capability. Approving stores a template that matches only that exact run.

const nonce = new URLSearchParams(location.hash.split("?")[1] ?? "").get("nonce") ?? "";

function el(tag, props = {}, ...kids) {
  const e = Object.assign(document.createElement(tag), props);
  e.append(...kids);
  return e;
}

const title = el("h1", { id: "consent-title", textContent: "Run with a secret?" });
const command = el("pre", { id: "consent-command", className: "consent-command" });
const where = el("p", { id: "consent-cwd" });
const who = el("p", { id: "consent-who" });
const allow = el("button", { id: "consent-allow", type: "button", textContent: "Allow this exact command" });
const deny = el("button", { id: "consent-deny", type: "button", textContent: "Deny" });
const error = el("p", { id: "consent-error", className: "error", role: "alert" });
const done = el("p", { id: "consent-done", role: "status", hidden: true });
document.body.replaceChildren(el("main", { className: "secret-form" }, title, command, where, who, allow, deny, error, done));

async function load() {
  const r = await fetch(`/secrets/consent?nonce=${encodeURIComponent(nonce)}`, { credentials: "same-origin" });
  if (r.status === 401) {
    location.href = "/mobile/login?next=" + encodeURIComponent("/mobile");
    return;
  }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    error.textContent = body.error ?? `refused (${r.status})`;
    allow.disabled = deny.disabled = true;
    return;
  }
  title.textContent = `Run with secret ${body.name}?`;
  command.textContent = body.command;
  where.textContent = `in ${body.cwd ?? "(the node's directory)"}`;
  who.textContent = `asked by ${body.requested_by}`;
}

async function answer(yes) {
  error.textContent = "";
  allow.disabled = deny.disabled = true;
  const r = await fetch("/secrets/consent", {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ nonce, allow: yes }),
  });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    error.textContent = body.error ?? `refused (${r.status})`;
    return;
  }
  allow.hidden = deny.hidden = true;
  done.hidden = false;
  done.textContent = yes
    ? `Allowed: the agent may run exactly this command with ${body.name}.`
    : "Denied.";
}

allow.onclick = () => answer(true);
deny.onclick = () => answer(false);
load();
