// The node's REST API from the page: same-origin fetch with the login cookie; a 401 sends the
// person to the login page and comes back here afterwards.

import { desktop } from "/assets/dom.js";

export async function api(path, opts = {}) {
  const r = await fetch(path, { credentials: "same-origin", ...opts });
  if (r.status === 401) {
    location.href = "/mobile/login?next=" + encodeURIComponent(desktop ? "/" : "/mobile");
    throw new Error("unauthorized");
  }
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r;
}
