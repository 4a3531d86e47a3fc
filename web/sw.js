// The service worker: shows the node's Web Push notifications (one tag per session, so a newer
// question replaces the older one), closes one when a "clear" message names its id (it was
// answered anywhere), answers a question from its action buttons through the authenticated
// POST /notifications/{id}/answer, and opens the session when the notification is tapped.
// Served at /sw.js so its scope is the whole app.

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("push", (event) => {
  let d;
  try {
    d = event.data ? event.data.json() : {};
  } catch {
    d = { op: "show", title: "tuic", body: event.data ? event.data.text() : "" };
  }
  event.waitUntil(handle(d));
});

async function handle(d) {
  if (d.op === "clear") {
    const shown = await self.registration.getNotifications(d.tag ? { tag: d.tag } : {});
    for (const n of shown) if (n.data && n.data.id === d.id) n.close();
    return;
  }
  const asks = d.kind === "question" || d.kind === "confirm";
  await self.registration.showNotification(d.title || "tuic", {
    body: d.body || "",
    tag: d.tag,
    renotify: !!d.tag,
    requireInteraction: asks,
    data: { id: d.id, url: d.url || "/", answer: d.answer },
    actions: (d.actions || []).slice(0, 3),
  });
}

self.addEventListener("notificationclick", (event) => {
  const n = event.notification;
  const data = n.data || {};
  n.close();
  if (event.action && data.answer) {
    event.waitUntil(fetch(data.answer, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ choice: Number(event.action) }),
    }));
    return;
  }
  event.waitUntil(openSession(data.url || "/"));
});

async function openSession(url) {
  const target = new URL(url, self.registration.scope).href;
  const wins = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const w of wins) {
    if ("focus" in w) {
      if ("navigate" in w) await w.navigate(target).catch(() => {});
      return w.focus();
    }
  }
  return self.clients.openWindow(target);
}
