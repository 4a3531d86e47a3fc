// Attach a photo or file from the phone into the session's working directory, through the one
// upload path (`POST /fs/upload-copy`, docs/http-api.md): the file becomes a one-entry tar
// archive built here (ustar, no library), sent to the registered repository that holds the
// session's cwd. The node bounds it (`tuning.upload_max_bytes`, 413 with the bound named) and
// publishes it with a no-replace rename, so a refused upload leaves nothing behind; this
// module only words the answer.

import { state } from "/assets/state.js";
import { sessionKey } from "/assets/list.js";

/** A name safe in a tar header and in any directory: ASCII letters, digits, `._-`, ≤ 100 bytes. */
export function safeName(name) {
  let n = String(name).replace(/[^A-Za-z0-9._-]/g, "_").replace(/^\.+/, "_");
  if (!n) n = "upload";
  return n.slice(0, 100);
}

/** One regular file as a ustar archive (header, data padded to 512, two zero blocks). */
export function tarOf(name, data) {
  const enc = new TextEncoder();
  const h = new Uint8Array(512);
  const put = (off, len, s) => h.set(enc.encode(s).slice(0, len), off);
  const oct = (n, len) => n.toString(8).padStart(len - 1, "0") + "\0";
  put(0, 100, name);
  put(100, 8, "0000644\0");
  put(108, 8, oct(0, 8));
  put(116, 8, oct(0, 8));
  put(124, 12, oct(data.length, 12));
  put(136, 12, oct(Math.floor(Date.now() / 1000), 12));
  put(148, 8, "        ");
  put(156, 1, "0");
  put(257, 6, "ustar\0");
  put(263, 2, "00");
  let sum = 0;
  for (const b of h) sum += b;
  put(148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
  const padded = Math.ceil(data.length / 512) * 512;
  const out = new Uint8Array(512 + padded + 1024);
  out.set(h, 0);
  out.set(data, 512);
  return out;
}

/** The registered repository holding `cwd` (longest match) and the directory relative to it. */
export function placeIn(repos, cwd) {
  const inside = (root) => cwd === root || cwd.startsWith(root.endsWith("/") ? root : root + "/");
  const root = repos.map((r) => r.path).filter(inside).sort((a, b) => b.length - a.length)[0];
  if (!root) return null;
  return { root, dest: cwd.slice(root.length).replace(/^\/+/, "") };
}

/** Uploads `file` into the open session's cwd; resolves to a message for the person. */
export async function uploadToSession(file) {
  const row = state.sessions.find((s) => sessionKey(s) === state.current);
  if (!row) return "Upload failed: the session is not in the list.";
  if (row.connection_id) return "Upload failed: uploads go to this machine's sessions only.";
  const r = await fetch("/repos", { credentials: "same-origin" });
  if (!r.ok) return `Upload failed: could not list repositories (${r.status}).`;
  const place = placeIn((await r.json()).repos ?? [], row.cwd);
  if (!place) return `Upload failed: ${row.cwd} is not inside a registered repository (uploads go only there).`;
  const name = safeName(file.name);
  const body = tarOf(name, new Uint8Array(await file.arrayBuffer()));
  const q = `root=${encodeURIComponent(place.root)}&dest=${encodeURIComponent(place.dest)}`;
  const up = await fetch(`/fs/upload-copy?${q}`, {
    method: "POST", credentials: "same-origin", body,
    headers: { "content-type": "application/x-tar" },
  });
  let v = {};
  try { v = await up.json(); } catch { /* an empty or non-JSON answer: the status says it */ }
  if (up.ok) return `Uploaded ${v.name ?? name} (${v.bytes ?? file.size} bytes) to ${row.cwd}.`;
  return `Upload failed (${up.status}): ${v.error ?? up.statusText}`;
}

/** Binds the view's Attach button and file picker. */
export function bindUpload() {
  const pick = document.getElementById("attach-file");
  document.getElementById("attach").onclick = () => pick.click();
  pick.onchange = async () => {
    const f = pick.files?.[0];
    if (!f) return;
    const note = document.getElementById("upload-note");
    note.hidden = false;
    note.textContent = `Uploading ${f.name}…`;
    try {
      note.textContent = await uploadToSession(f);
    } catch (e) {
      note.textContent = `Upload failed: ${e.message}`;
    }
    pick.value = "";
  };
}
