// A share link's page (`/share.html#<token>`): one session, read-only, or answer-only (its
// question's choices as buttons). The token stays in the fragment (never sent in a Referer or
// a request line) and goes to the node as `?share=` on the session's view routes only.

const token = location.hash.slice(1);
const q = `share=${encodeURIComponent(token)}`;
const $ = (id) => document.getElementById(id);
const MAX_CHARS = 200_000;

function ended(text) {
  $("state").textContent = text;
  $("state").dataset.ended = "1";
  $("question").hidden = true;
}

async function get(path) {
  const r = await fetch(`${path}${path.includes("?") ? "&" : "?"}${q}`);
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw Object.assign(new Error(body.error ?? `${r.status}`), { code: body.code });
  return body;
}

function append(text) {
  const s = $("screen");
  s.textContent = (s.textContent + text).slice(-MAX_CHARS);
  s.scrollTop = s.scrollHeight;
}

async function answer(sid, value) {
  const r = await fetch(`/sessions/${encodeURIComponent(sid)}/answer?${q}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ answer: value }),
  });
  if (!r.ok) $("state").textContent = (await r.json().catch(() => ({}))).error ?? "refused";
}

async function pollQuestion(sid) {
  if ($("state").dataset.ended) return;
  try {
    const row = await get(`/sessions/${encodeURIComponent(sid)}`);
    const box = $("question");
    const qn = row.question;
    box.hidden = !qn;
    box.replaceChildren();
    if (qn) {
      const choices = qn.options?.length ? qn.options.map((o, i) => [String(i + 1), o]) : [["y", "Yes"], ["n", "No"]];
      for (const [value, label] of choices) {
        const b = document.createElement("button");
        b.type = "button";
        b.className = "chip answer";
        b.dataset.answer = value;
        b.textContent = label;
        b.onclick = () => answer(sid, value);
        box.append(b);
      }
    }
  } catch (e) {
    if (e.code?.startsWith("share_")) return ended(`Link ended: ${e.message}`);
  }
  setTimeout(() => pollQuestion(sid), 1000);
}

async function start() {
  let info;
  try {
    info = await get("/share/info");
  } catch (e) {
    return ended(`This link does not open: ${e.message}`);
  }
  $("scope").textContent = info.scope === "answer" ? "answer only" : "read only";
  $("title").textContent = `Shared session ${info.session_id}`;
  const sid = encodeURIComponent(info.session_id);
  try {
    const hist = await get(`/sessions/${sid}/output?format=text`);
    append(hist.data ?? "");
  } catch { /* the stream still shows what comes */ }
  const proto = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${proto}://${location.host}/sessions/${sid}/stream?format=text&${q}`);
  ws.onopen = () => { $("state").textContent = "live"; };
  ws.onmessage = (m) => {
    let f;
    try { f = JSON.parse(m.data); } catch { return; }
    if (f.type === "output") append(f.data);
    if (f.type === "exit" || f.type === "closed") ended("The session ended");
  };
  ws.onclose = () => { if (!$("state").dataset.ended) ended("Link ended"); };
  if (info.scope === "answer") pollQuestion(info.session_id);
}

start();
