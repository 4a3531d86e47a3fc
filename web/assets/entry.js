// The page's one entry: the standalone secret form (`#/secret-form?nonce=`) mounts alone —
// no session list, event stream, terminal or logging starts (the spec's "Secret form
// security boundary"); every other address starts the app.

// `#/trust` (the audit log, share links, secrets) mounts alone the same way.
const isForm = () => location.hash.startsWith("#/secret-form") || location.hash.startsWith("#/trust");
const mountedForm = isForm();
if (location.hash.startsWith("#/secret-form")) {
  import("/assets/secret-form.js");
} else if (location.hash.startsWith("#/trust")) {
  import("/assets/trust.js");
} else {
  import("/assets/app.js");
}
// Moving between the app and a form (or between two forms) starts the page afresh, so each
// form mounts alone with its own nonce.
window.addEventListener("hashchange", () => {
  if (mountedForm || isForm()) location.reload();
});
