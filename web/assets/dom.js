// Page basics shared by the UI modules: element lookup, the layout (phone or desktop), and
// small formatting helpers.

export const $ = (id) => document.getElementById(id);
export const desktop = !location.pathname.startsWith("/mobile");

// Touch-capable iPads and Macs reporting a desktop UA get the phone layout.
if (desktop && navigator.maxTouchPoints > 1 && /Macintosh|iPad/.test(navigator.userAgent)) {
  location.replace("/mobile" + location.hash);
}
if (desktop) document.body.classList.add("desktop");

export function ago(ms) {
  if (!ms) return "";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  return `${Math.round(s / 3600)}h ago`;
}
