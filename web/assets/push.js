// Notifications on this device: the service worker is registered on load (that asks nothing);
// permission is asked only from the settings panel (the bell), which then subscribes through
// the browser's push service with the node's VAPID key and posts the subscription to
// POST /notifications/subscriptions. "Send a test" asks the node for one on every channel.

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

export function bindNotifySettings() {
  $("notify-toggle").onclick = () => { $("notify-panel").hidden = !$("notify-panel").hidden; };
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
