// The page's one entry: the standalone secret form (`#/secret-form?nonce=`) mounts alone —
// no session list, event stream, terminal or logging starts (the spec's "Secret form
// security boundary"); every other address starts the app.

// `#/trust` (the audit log, share links, secrets) mounts alone the same way.
// `#/changes/<session>` (review an agent's changes) and `#/tab?…` (a tab an agent opened with
// `ui action=tab`) mount alone too.
const alone = ["#/secret-form", "#/secret-consent", "#/trust", "#/changes/", "#/tab"];
const isForm = () => alone.some((p) => location.hash.startsWith(p));
const mountedForm = isForm();
if (location.hash.startsWith("#/secret-form")) {
  import("/assets/secret-form.js");
} else if (location.hash.startsWith("#/secret-consent")) {
  import("/assets/secret-consent.js");
} else if (location.hash.startsWith("#/trust")) {
  import("/assets/trust.js");
} else if (location.hash.startsWith("#/changes/")) {
  import("/assets/changes.js");
} else if (location.hash.startsWith("#/tab")) {
  import("/assets/tabview.js");
} else {
  import("/assets/app.js");
}
// Moving between the app and a form (or between two forms) starts the page afresh, so each
// form mounts alone with its own nonce.
window.addEventListener("hashchange", () => {
  if (mountedForm || isForm()) location.reload();
});
