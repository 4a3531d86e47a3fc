// Notifications on this device: the service worker is registered on load (that asks nothing);
// permission is asked only from the settings panel (the bell), which then subscribes through
// the browser's push service with the node's VAPID key and posts the subscription to
// POST /notifications/subscriptions. "Send a test" asks the node for one on every channel.
// Quiet hours and per-host/per-session mutes are the node's `notifications` settings, read
// from GET /config and saved with the three-way PUT /config {base, config}.

import { $ } from "/assets/dom.js";
import { api } from "/assets/api.js";

function keyBytes(b64) {
  const s = atob(b64.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (b64.length % 4)) % 4));
  return Uint8Array.from(s, (c) => c.charCodeAt(0));
}

export function registerWorker() {
  if (!("serviceWorker" in navigator)) return Promise.resolve(null);
  return navigator.serviceWorker.register("/sw.js", { scope: "/" }).catch(() => null);
}

function say(text) {
  $("notify-status").textContent = text;
}

/** Asks permission, subscribes, and hands the subscription to the node. */
export async function enablePush() {
  if (!("Notification" in window) || !("serviceWorker" in navigator)) {
    say("This browser cannot show notifications.");
    return false;
  }
  say("Asking permission…");
  const perm = await Notification.requestPermission();
  if (perm !== "granted") {
    say(`Notifications are ${perm === "denied" ? "blocked for this site" : "not allowed"}.`);
    return false;
  }
  const reg = await navigator.serviceWorker.ready;
  const { public_key } = await (await api("/notifications/vapid")).json();
  let sub;
  say("Subscribing…");
  try {
    // A browser whose push service cannot be reached may never answer: give up after 15 s.
    const late = new Promise((_, no) => setTimeout(() => no(new Error("no answer")), 15000));
    sub = await Promise.race([
      reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(public_key) }),
      late,
    ]);
  } catch (e) {
    say(`The browser's push service refused: ${e.message}`);
    return false;
  }
  const r = await api("/notifications/subscriptions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(sub.toJSON()),
  });
  const { id } = await r.json();
  localStorage.setItem("tuic-push-subscription", id);
  say("Notifications are on for this device.");
  return true;
}

async function disablePush() {
  const id = localStorage.getItem("tuic-push-subscription");
  const reg = await navigator.serviceWorker?.getRegistration("/");
  const sub = await reg?.pushManager.getSubscription();
  await sub?.unsubscribe().catch(() => {});
  if (id) await api(`/notifications/subscriptions/${encodeURIComponent(id)}`, { method: "DELETE" }).catch(() => {});
  localStorage.removeItem("tuic-push-subscription");
  say("Notifications are off for this device.");
}

// The config as last read (the base of a save) and the mutes being edited.
let base = null;
let mutes = { host: [], session: [] };

function drawMutes() {
  const ul = $("notify-mutes");
  ul.replaceChildren();
  for (const kind of ["session", "host"]) {
    for (const name of mutes[kind]) {
      const li = document.createElement("li");
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = `${kind} ${name} ✕`;
      b.setAttribute("aria-label", `Unmute ${kind} ${name}`);
      b.dataset.kind = kind;
      b.dataset.name = name;
      b.onclick = () => { mutes[kind] = mutes[kind].filter((m) => m !== name); drawMutes(); };
      li.append(b);
      ul.append(li);
    }
  }
}

/** Reads the node's notification settings into the form. */
export async function loadNotifySettings() {
  base = await (await api("/config")).json();
  const n = base.notifications || {};
  $("notify-quiet-from").value = n.quiet_hours?.from || "";
  $("notify-quiet-to").value = n.quiet_hours?.to || "";
  mutes = { host: [...(n.muted_hosts || [])], session: [...(n.muted_sessions || [])] };
  drawMutes();
}

/** Saves quiet hours and mutes (only those keys change). */
export async function saveNotifySettings() {
  if (!base) await loadNotifySettings();
  const config = structuredClone(base);
  const n = (config.notifications = { ...(config.notifications || {}) });
  const from = $("notify-quiet-from").value;
  const to = $("notify-quiet-to").value;
  if (from && to) {
    n.quiet_hours = { from, to, timezone: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC" };
  } else {
    delete n.quiet_hours;
  }
  n.muted_hosts = mutes.host;
  n.muted_sessions = mutes.session;
  const r = await fetch("/config", {
    method: "PUT",
    credentials: "same-origin",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ base, config }),
  });
  if (!r.ok) {
    const e = await r.json().catch(() => ({}));
    say(`Not saved: ${e.error || r.status}`);
    return false;
  }
  await loadNotifySettings();
  say("Settings saved.");
  return true;
}

export function bindNotifySettings() {
  $("notify-toggle").onclick = () => {
    $("notify-panel").hidden = !$("notify-panel").hidden;
    if (!$("notify-panel").hidden) loadNotifySettings().catch((e) => say(e.message));
  };
  $("notify-mute-add").onclick = () => {
    const kind = $("notify-mute-kind").value;
    const name = $("notify-mute-name").value.trim();
    if (name && !mutes[kind].includes(name)) mutes[kind].push(name);
    $("notify-mute-name").value = "";
    drawMutes();
  };
  $("notify-save").onclick = () => saveNotifySettings().catch((e) => say(e.message));
  $("notify-enable").onclick = () => enablePush().catch((e) => say(e.message));
  $("notify-disable").onclick = () => disablePush().catch((e) => say(e.message));
  $("notify-test").onclick = async () => {
    try {
      const r = await (await api("/notifications/test", { method: "POST" })).json();
      say(`Test sent (${r.notification.state}).`);
    } catch (e) {
      say(e.message);
    }
  };
}
