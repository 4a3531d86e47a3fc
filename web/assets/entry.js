// The page's one entry: the standalone secret form (`#/secret-form?nonce=`) mounts alone —
// no session list, event stream, terminal or logging starts (the spec's "Secret form
// security boundary"); every other address starts the app.

if (location.hash.startsWith("#/secret-form")) {
  import("/assets/secret-form.js");
} else {
  import("/assets/app.js");
}
