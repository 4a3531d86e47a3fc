// The secret form: a person types a credential an agent asked for (`secret action=request`).
// The nonce in the address is the form's one-time capability; the value goes to the node's
// vault and is never shown, logged or sent anywhere else.

const nonce = new URLSearchParams(location.hash.split("?")[1] ?? "").get("nonce") ?? "";

function el(tag, props = {}, ...kids) {
  const e = Object.assign(document.createElement(tag), props);
  e.append(...kids);
  return e;
}

const title = el("h1", { id: "secret-title", textContent: "Secret requested" });
const reason = el("p", { id: "secret-reason" });
const input = el("input", {
  id: "secret-value", type: "password", autocomplete: "off", required: true,
  spellcheck: false, ariaLabel: "Secret value",
});
const submit = el("button", { id: "secret-submit", type: "submit", textContent: "Store secret" });
const error = el("p", { id: "secret-error", className: "error", role: "alert" });
const done = el("p", { id: "secret-done", role: "status", hidden: true });
const form = el("form", { id: "secret-form", className: "secret-form" }, title, reason, input, submit, error, done);

document.body.replaceChildren(form);

async function load() {
  const r = await fetch(`/secrets/form?nonce=${encodeURIComponent(nonce)}`, { credentials: "same-origin" });
  if (r.status === 401) {
    location.href = "/mobile/login?next=" + encodeURIComponent("/mobile");
    return;
  }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    error.textContent = body.error ?? `refused (${r.status})`;
    input.disabled = submit.disabled = true;
    return;
  }
  title.textContent = `Secret requested: ${body.name}`;
  reason.textContent = body.reason ? `Reason: ${body.reason}` : "";
}

form.onsubmit = async (e) => {
  e.preventDefault();
  error.textContent = "";
  submit.disabled = true;
  const r = await fetch("/secrets/form", {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ nonce, value: input.value }),
  });
  const body = await r.json().catch(() => ({}));
  input.value = "";
  if (!r.ok) {
    error.textContent = body.error ?? `refused (${r.status})`;
    submit.disabled = false;
    return;
  }
  input.hidden = submit.hidden = true;
  done.hidden = false;
  done.textContent = `Stored ${body.name}. The agent can use it now; it will never see it.`;
};

load();
