//! Phone habits across clients, in Debian's headless Chromium at phone size (390×844):
//! - one state per session (working / idle / needs input / done / exited), computed once on the node and
//!   shown the same in the web list, the session view and `tuic ls`: a shell runs a command that
//!   asks a question, is answered, runs a silent command, and exits; each change reaches all
//!   three within 2 s;
//! - the size policy: a phone and a desktop-size browser attached at once do not resize each
//!   other; the phone's Fit button takes the PTY's size on demand;
//! - attaching a file from the phone into the session's directory (the upload path, bounded);
//! - the DOM renderer's frame cost against a minimal canvas renderer (recorded figures);
//! - a touch drag on the screen (W3C touch pointer actions) scrolling the history.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tuic_tests::bed::{
    PASSWORD, login, phone_node as remote_node, phone_node_with as remote_node_with,
};
use tuic_tests::fed::FedBed;
use tuic_tests::netns::Door;
use tuic_tests::webdriver::{Browser, artifacts_dir};
use tuic_tests::{NodeProc, bin};

/// Each change must be seen everywhere within this.
const BOUND: Duration = Duration::from_secs(2);

/// The `tuic ls` line of `alias`, if listed (stdin not a terminal).
fn cli_line(socket: &Path, alias: &str) -> Option<String> {
    let out = std::process::Command::new(bin("tuic"))
        .arg("ls")
        .env("TUIC_SOCKET", socket)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("running tuic ls");
    assert!(out.status.success(), "tuic ls failed: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(alias))
        .map(str::to_owned)
}

/// The state word of a `tuic ls` line (the line itself when it has none of them).
fn cli_state(line: &str) -> String {
    ["needs input", "working", "idle", "done", "host offline"]
        .into_iter()
        .find(|w| line.contains(&format!("  {w}  ")))
        .map_or_else(|| line.to_owned(), str::to_owned)
}

/// Wall-clock milliseconds: the page's `Date.now()` reads the same clock, so the page's own
/// timestamps and the test's compare directly.
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// One observer's record: an entry (wall ms, what it showed) each time what it shows changes
/// (`None`: the session is not shown). Each observer is recorded on its own, so a figure is that
/// observer's delay, not the test's polling round.
#[derive(Debug, Default, Clone)]
struct Log(Arc<Mutex<Vec<Seen>>>);

/// When (wall ms) an observer started showing what (`None`: not shown).
type Seen = (u64, Option<String>);

impl Log {
    fn push(&self, t: u64, v: Option<String>) {
        let mut g = self.0.lock().unwrap();
        if g.last().map(|(_, last)| last) != Some(&v) {
            g.push((t, v));
        }
    }

    fn last(&self) -> Option<Seen> {
        self.0.lock().unwrap().last().cloned()
    }
}

/// Records, in the page, every change of the session's badge in the list and in the view with
/// the page's own clock (a `MutationObserver`, so the time is when the page showed it).
const PAGE_RECORDER: &str = r#"
const sid = arguments[0];
const look = () => {
  const a = document.querySelector(`#sessions a[data-session='${sid}'] .badge`);
  const v = document.getElementById('view-state');
  return [a ? a.textContent : null, v.hidden ? null : v.textContent];
};
window.__stateLog = [];
let last = null;
const note = () => {
  const [list, view] = look();
  if (last && last[0] === list && last[1] === view) return;
  last = [list, view];
  window.__stateLog.push({ t: Date.now(), list, view });
};
note();
new MutationObserver(note).observe(document.body, {
  subtree: true, childList: true, characterData: true, attributes: true,
  attributeFilter: ['hidden', 'class'],
});
return true;
"#;

/// The four observers: the node's row `state` (`GET /sessions`, polled), the web list's badge
/// and the session view's badge (recorded in the page), and `tuic ls` (run in a loop; an entry
/// is timed when the command finished, so the command's own run time counts).
#[derive(Debug, Default, Clone)]
struct Observers {
    node: Log,
    list: Log,
    view: Log,
    cli: Log,
    stop: Arc<AtomicBool>,
}

impl Observers {
    /// Starts the node and CLI pollers and the page recorder.
    async fn start(b: &Browser, node: &NodeProc, sid: &str, alias: &str) -> Self {
        let o = Self::default();
        b.eval(PAGE_RECORDER, json!([sid])).await.unwrap();
        let (log, stop, socket, id) = (
            o.node.clone(),
            o.stop.clone(),
            node.socket.clone(),
            sid.to_owned(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let rows = tuic_tests::ipc(&socket, "GET", "/sessions", None)
                    .await
                    .unwrap()
                    .json();
                let st = rows
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|r| r["session_id"] == json!(id))
                    .map(|r| r["state"].as_str().unwrap().replace('_', " "));
                log.push(wall_ms(), st);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let (log, stop, socket, alias) = (
            o.cli.clone(),
            o.stop.clone(),
            node.socket.clone(),
            alias.to_owned(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let line = cli_line(&socket, &alias);
                log.push(wall_ms(), line.as_deref().map(cli_state));
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        o
    }

    /// Moves the page's recorded changes into the list and view logs.
    async fn drain_page(&self, b: &Browser) {
        let got = b
            .eval("return (window.__stateLog || []).splice(0);", json!([]))
            .await
            .unwrap();
        for e in got.as_array().unwrap() {
            let t = e["t"].as_f64().unwrap() as u64;
            self.list.push(t, e["list"].as_str().map(str::to_owned));
            self.view.push(t, e["view"].as_str().map(str::to_owned));
        }
    }

    /// Waits until every observer shows `want` (`exited`: the view says exited and the session
    /// left the list, the node's list and `tuic ls`, as exited rows do); returns, per observer,
    /// how long after `since` (wall ms) it started showing what it shows now.
    async fn all_show(&self, b: &Browser, want: &str, since: u64) -> Vec<(&'static str, u64)> {
        let expect = |who: &str| match (want, who) {
            ("exited", "view") => Some("exited".to_owned()),
            ("exited", _) => None,
            (w, _) => Some(w.to_owned()),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.drain_page(b).await;
            let now = [
                ("node", self.node.last()),
                ("list", self.list.last()),
                ("view", self.view.last()),
                ("cli", self.cli.last()),
            ];
            if now
                .iter()
                .all(|(who, l)| l.as_ref().is_some_and(|(_, v)| *v == expect(who)))
            {
                return now
                    .into_iter()
                    .map(|(who, l)| (who, l.unwrap().0.saturating_sub(since)))
                    .collect();
            }
            assert!(
                Instant::now() < deadline,
                "the observers never agreed on {want:?}: {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Observers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Writes `data` to the session; returns the wall-clock ms just before it was sent.
async fn write(node: &NodeProc, sid: &str, data: &str) -> u64 {
    let at = wall_ms();
    let r = tuic_tests::ipc(
        &node.socket,
        "POST",
        &format!("/sessions/{sid}/write"),
        Some(json!({"data": data})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    at
}

#[tokio::test]
async fn one_state_per_session_is_the_same_in_the_list_the_view_and_the_cli_within_2_s() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let r = tuic_tests::ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let created: Value = r.json();
    let sid = created["session_id"].as_str().unwrap().to_owned();
    let alias = created["alias"].as_str().unwrap().to_owned();

    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for("!document.getElementById('view-state').hidden", 15_000)
        .await
        .unwrap();
    let obs = Observers::start(&b, &node, &sid, &alias).await;
    // A quiet shell at its prompt is idle (done is an agent's: issue 42).
    obs.all_show(&b, "idle", wall_ms()).await;
    // MCP `session action=list` says the same.
    let (mut mcp, _) = tuic_tests::agent::Agent::new(&node.socket, "state-list").await;
    let (err, list) = mcp.tool("session", json!({"action": "list"})).await;
    assert!(!err, "{list}");
    let row = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["session_id"] == json!(sid));
    assert_eq!(
        row.map(|r| r["state"].clone()),
        Some(json!("idle")),
        "{list}"
    );
    // The idle badge has its own look, like every other state: its colours differ from each of
    // the others' (a badge of each state, styled by the page's own stylesheet).
    let looks = b
        .eval(
            "const look = (st) => { const e = document.createElement('span'); e.className = `badge state ${st}`;
               document.getElementById('sessions').appendChild(e); const c = getComputedStyle(e);
               const l = `${c.backgroundColor} ${c.color} ${c.borderColor}`; e.remove(); return l; };
             const idle = look('idle');
             return ['working', 'needs_input', 'done', 'exited', 'host_offline', ''].filter((st) => look(st) === idle);",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(looks, json!([]), "states that look like idle");

    let mut figures = Vec::new();
    // A command that asks and waits for an answer: needs input.
    let t = write(
        &node,
        &sid,
        "sh -c 'printf \"Proceed with the move? (y/n) \"; read a; echo got-$a'\n",
    )
    .await;
    figures.push(("needs input", obs.all_show(&b, "needs input", t).await));
    b.screenshot(&artifacts_dir().join("state-needs-input-phone.png"))
        .await
        .unwrap();
    // Answered, the command ends and the shell is back at its prompt: idle.
    let t = write(&node, &sid, "y\n").await;
    figures.push(("idle", obs.all_show(&b, "idle", t).await));
    // A silent command runs: working, then idle again when it ends (timed from its end).
    let t = write(&node, &sid, "sleep 4\n").await;
    figures.push(("working", obs.all_show(&b, "working", t).await));
    b.screenshot(&artifacts_dir().join("state-working-phone.png"))
        .await
        .unwrap();
    let after = obs.all_show(&b, "idle", t).await;
    for (who, ms) in &after {
        assert!(
            *ms >= 4_000,
            "{who} showed idle {ms} ms after `sleep 4` was sent"
        );
    }
    figures.push((
        "idle after sleep 4",
        after.into_iter().map(|(w, ms)| (w, ms - 4_000)).collect(),
    ));
    // The shell exits: the view says exited; the row leaves the list and `tuic ls`.
    let t = write(&node, &sid, "exit\n").await;
    figures.push(("exited", obs.all_show(&b, "exited", t).await));
    b.screenshot(&artifacts_dir().join("state-exited-phone.png"))
        .await
        .unwrap();

    for (what, per) in &figures {
        println!("state {what}: shown after (ms) {per:?}");
    }
    for (what, per) in figures {
        for (who, ms) in per {
            assert!(
                ms <= BOUND.as_millis() as u64,
                "{what} took {ms} ms to reach the {who} (bound {BOUND:?})"
            );
        }
    }
}

/// The PTY's size as the node's snapshot reports it: (rows, cols).
async fn pty_size(node: &NodeProc, sid: &str) -> (u64, u64) {
    let v = tuic_tests::ipc(
        &node.socket,
        "GET",
        &format!("/sessions/{sid}/terminal/snapshot"),
        None,
    )
    .await
    .unwrap()
    .json();
    (v["rows"].as_u64().unwrap(), v["cols"].as_u64().unwrap())
}

/// The size a page's screen shows (from its last whole screen frame).
async fn page_size(b: &Browser) -> Value {
    b.eval(
        "const s = document.getElementById('screen'); return [Number(s.dataset.rows), Number(s.dataset.cols)];",
        json!([]),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_phone_and_a_desktop_attached_at_once_do_not_resize_each_other_and_fit_takes_the_size() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let r = tuic_tests::ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 40, "cols": 120, "shell": "/bin/sh", "cwd": "/tmp"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let sid = r.json()["session_id"].as_str().unwrap().to_owned();

    let desk = Browser::launch(1280, 800).await.unwrap();
    login(&desk, &base).await;
    desk.goto(&format!("{base}/#/s/{sid}")).await.unwrap();
    desk.wait_for(
        "document.getElementById('screen').dataset.cols === '120'",
        15_000,
    )
    .await
    .unwrap();
    let phone = Browser::launch(390, 844).await.unwrap();
    login(&phone, &base).await;
    phone
        .goto(&format!("{base}/mobile#/s/{sid}"))
        .await
        .unwrap();
    phone
        .wait_for(
            "document.getElementById('screen').dataset.cols === '120'",
            15_000,
        )
        .await
        .unwrap();
    // The phone's viewport changes (rotation, the keyboard): still no resize.
    phone
        .eval(
            "window.dispatchEvent(new Event('resize')); return true;",
            json!([]),
        )
        .await
        .unwrap();
    // Both attached: the PTY keeps the owner's (creator's) size; the shell sees it too.
    write(&node, &sid, "stty size; echo size-one\n").await;
    desk.wait_for(
        "document.getElementById('screen').textContent.includes('40 120')",
        15_000,
    )
    .await
    .unwrap();
    phone
        .wait_for(
            "document.getElementById('screen').textContent.includes('40 120')",
            15_000,
        )
        .await
        .unwrap();
    assert_eq!(pty_size(&node, &sid).await, (40, 120));
    // The phone shows the 120 columns scaled to its width (down to the minimum font, then panned).
    let scaled = phone
        .eval(
            "const s = document.getElementById('screen');
             return [parseFloat(s.style.fontSize) < 13, parseFloat(s.style.fontSize) >= 6,
                     document.documentElement.scrollWidth <= window.innerWidth];",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(scaled, json!([true, true, true]));
    phone
        .screenshot(&artifacts_dir().join("size-phone-scaled.png"))
        .await
        .unwrap();

    // Fit on the phone: the PTY takes the phone's size; the desktop follows to the new size.
    phone
        .click(&phone.find("#fit").await.unwrap())
        .await
        .unwrap();
    let want = phone
        .eval(
            "const s = document.getElementById('screen');
             const rowH = Math.floor(13 * 1.15 * devicePixelRatio) / devicePixelRatio;
             return [Math.max(5, Math.floor((s.clientHeight - 8) / rowH)),
                     Math.max(20, Math.floor((s.clientWidth - 16) / (13 * s.__client.glyph())))];",
            json!([]),
        )
        .await
        .unwrap();
    let (rows, cols) = (want[0].as_u64().unwrap(), want[1].as_u64().unwrap());
    assert!(cols < 60 && rows > 10, "phone size {rows}x{cols}");
    phone
        .wait_for(
            &format!("document.getElementById('screen').dataset.cols === '{cols}'"),
            15_000,
        )
        .await
        .unwrap();
    desk.wait_for(
        &format!("document.getElementById('screen').dataset.cols === '{cols}'"),
        15_000,
    )
    .await
    .unwrap();
    assert_eq!(pty_size(&node, &sid).await, (rows, cols));
    assert_eq!(page_size(&desk).await, json!([rows, cols]));
    write(&node, &sid, "stty size; echo size-two\n").await;
    let seen = format!("{rows} {cols}");
    phone
        .wait_for(
            &format!("document.getElementById('screen').textContent.includes('{seen}')"),
            15_000,
        )
        .await
        .unwrap();
    phone
        .screenshot(&artifacts_dir().join("size-phone-fit.png"))
        .await
        .unwrap();
    desk.screenshot(&artifacts_dir().join("size-desktop-after-phone-fit.png"))
        .await
        .unwrap();
}

/// The page's frame-cost harness: `n` diff frames that each redraw the whole screen (every row,
/// eight coloured runs a row, bold on every other run, the cursor moving) applied by the page's
/// own DOM renderer (`applyDiff` + `renderDiff`, layout forced after each frame), and the same
/// frames drawn by a minimal canvas renderer (`fillRect` backgrounds, `fillText` runs, one
/// pixel read back after each frame so the drawing is flushed). Returns `[dom_ms, canvas_ms]`
/// per frame, medians of each frame's time.
const FRAME_COST: &str = r#"
const done = arguments[arguments.length - 1];
const n = arguments[0];
(async () => {
  const mod = await import('/assets/screen.js');
  const c = document.getElementById('screen').__client;
  const rows = c.screen.rows, cols = c.screen.cols;
  const frame = (i) => {
    const out = [];
    for (let y = 0; y < rows; y++) {
      const runs = [];
      const w = Math.floor(cols / 8);
      for (let k = 0; k < 8; k++) {
        runs.push({ text: String.fromCharCode(65 + ((i + y + k) % 26)).repeat(w), fg: (i + k) % 16, bg: (k % 3 === 0) ? (i + y) % 8 : undefined, attrs: k % 2 });
      }
      out.push({ y, runs });
    }
    return { type: 'diff', seq: i + 1, rows: out, cursor: { x: i % cols, y: i % rows, visible: true } };
  };
  const frames = Array.from({ length: n }, (_, i) => frame(i));
  const median = (a) => { a.sort((x, y) => x - y); return a[Math.floor(a.length / 2)]; };
  const dom = [];
  for (const f of frames) {
    const t = performance.now();
    const old = { ...c.screen.cursor };
    const k = mod.applyDiff(c.screen, f);
    c.renderDiff(f, k, old);
    void c.root.offsetHeight;
    dom.push(performance.now() - t);
  }
  const px = parseFloat(c.root.style.fontSize) || 13;
  const cw = px * 0.6, lh = Math.round(px * 1.25);
  const canvas = document.createElement('canvas');
  canvas.width = Math.ceil(cols * cw); canvas.height = rows * lh;
  document.body.appendChild(canvas);
  const ctx = canvas.getContext('2d', { alpha: false });
  ctx.textBaseline = 'top';
  const lines = c.screen.lines.map(() => []);
  const can = [];
  for (const f of frames) {
    const t = performance.now();
    const k = Math.min(f.scroll_up ?? 0, lines.length);
    for (const r of f.rows) lines[r.y] = r.runs;
    for (const r of f.rows) {
      const y = r.y * lh;
      ctx.fillStyle = '#000'; ctx.fillRect(0, y, canvas.width, lh);
      let x = 0;
      for (const run of r.runs) {
        const chars = run.text.length, wpx = chars * cw;
        const bg = mod.cssColor(run.bg);
        if (bg) { ctx.fillStyle = bg; ctx.fillRect(x, y, wpx, lh); }
        ctx.font = `${(run.attrs & 1) ? 'bold ' : ''}${px}px monospace`;
        ctx.fillStyle = mod.cssColor(run.fg) ?? '#e5e5e5';
        ctx.fillText(run.text, x, y);
        x += wpx;
      }
    }
    const cur = f.cursor;
    ctx.fillStyle = 'rgba(255,255,255,.5)'; ctx.fillRect(cur.x * cw, cur.y * lh, cw, lh);
    void k;
    ctx.getImageData(0, 0, 1, 1);
    can.push(performance.now() - t);
  }
  canvas.remove();
  return [median(dom), median(can), rows, cols];
})().then(done, (e) => done(String(e)));
"#;

#[tokio::test]
async fn dom_and_canvas_frame_costs_of_a_full_screen_redraw_at_phone_size() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let r = tuic_tests::ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 40, "cols": 48, "shell": "/bin/sh", "cwd": "/tmp"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let sid = r.json()["session_id"].as_str().unwrap().to_owned();
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').dataset.cols === '48'",
        15_000,
    )
    .await
    .unwrap();
    let n = 300;
    let v = b.eval_async(FRAME_COST, json!([n])).await.unwrap();
    let (dom, canvas) = (v[0].as_f64(), v[1].as_f64());
    let (Some(dom), Some(canvas)) = (dom, canvas) else {
        panic!("the harness failed: {v}");
    };
    println!(
        "frame cost, {n} full-screen diff frames at 390x844 ({}x{}): DOM p50 {dom:.3} ms, canvas p50 {canvas:.3} ms",
        v[2], v[3]
    );
    assert!(dom > 0.0 && canvas > 0.0, "{v}");
    // The page still shows the frames the DOM renderer applied: the last frame's first run.
    let first = b
        .eval(
            "return document.querySelector('#screen .row').textContent.slice(0, 3)",
            json!([]),
        )
        .await
        .unwrap();
    let last = (b'A' + ((n - 1) % 26) as u8) as char;
    assert_eq!(first, json!(last.to_string().repeat(3)));
    b.screenshot(&artifacts_dir().join("frame-cost-phone.png"))
        .await
        .unwrap();
}

/// Every path under `dir` (staging included) with its bytes, for before/after comparisons.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap().flatten() {
            let path = e.path();
            let rel = path.strip_prefix(dir).unwrap().display().to_string();
            if path.is_dir() {
                out.push((rel + "/", Vec::new()));
                stack.push(path);
            } else {
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_file_attached_on_the_phone_lands_in_the_sessions_directory_and_an_oversized_one_leaves_nothing()
 {
    let (_d, node) =
        remote_node_with(json!({"secret_store": "file", "tuning": {"upload_max_bytes": 65_536}}));
    let base = format!("http://{}", node.tcp.unwrap());
    let repo = tempfile::tempdir().unwrap();
    let work = repo.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let r = tuic_tests::ipc(
        &node.socket,
        "POST",
        "/repos",
        Some(json!({"path": repo.path()})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    let r = tuic_tests::ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 24, "cols": 48, "shell": "/bin/sh", "cwd": work})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let sid = r.json()["session_id"].as_str().unwrap().to_owned();

    let files = tempfile::tempdir().unwrap();
    let photo: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let photo_path = files.path().join("photo 1.jpg");
    std::fs::write(&photo_path, &photo).unwrap();
    let big_path = files.path().join("big.bin");
    std::fs::write(&big_path, vec![7u8; 200_000]).unwrap();

    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').dataset.cols === '48'",
        15_000,
    )
    .await
    .unwrap();
    // Choosing a file in the picker uploads it (the Attach button opens the same picker).
    let pick = b.find("#attach-file").await.unwrap();
    b.type_text(&pick, photo_path.to_str().unwrap())
        .await
        .unwrap();
    b.wait_for(
        "document.getElementById('upload-note').textContent.startsWith('Uploaded')",
        15_000,
    )
    .await
    .unwrap();
    let note = b
        .text(&b.find("#upload-note").await.unwrap())
        .await
        .unwrap();
    assert!(
        note.contains("photo_1.jpg") && note.contains("20000 bytes"),
        "{note}"
    );
    assert_eq!(std::fs::read(work.join("photo_1.jpg")).unwrap(), photo);
    // The shell in the session sees it in its directory.
    write(&node, &sid, "ls -l photo_1.jpg\n").await;
    b.wait_for(
        "document.getElementById('screen').textContent.includes('20000')",
        15_000,
    )
    .await
    .unwrap();
    b.screenshot(&artifacts_dir().join("upload-phone.png"))
        .await
        .unwrap();

    // Over the bound: refused with the bound named, and the repository is exactly as before.
    let before = tree(repo.path());
    b.type_text(&pick, big_path.to_str().unwrap())
        .await
        .unwrap();
    b.wait_for(
        "document.getElementById('upload-note').textContent.startsWith('Upload failed')",
        15_000,
    )
    .await
    .unwrap();
    let note = b
        .text(&b.find("#upload-note").await.unwrap())
        .await
        .unwrap();
    assert!(note.contains("413") && note.contains("65536"), "{note}");
    assert_eq!(
        tree(repo.path()),
        before,
        "a refused upload left something behind"
    );
    assert!(!work.join("big.bin").exists());
    b.screenshot(&artifacts_dir().join("upload-refused-phone.png"))
        .await
        .unwrap();
}

/// How soon a hub lists a down node's rows as `host_offline`, as documented (`docs/http-api.md`,
/// "Federation" in the API clarifications): a reset connection (the node killed) is down at
/// once and its routes answer 503 within 1 s; a silent one (the link cut) after 3 missed health
/// probes, one every 5 s with a 2 s deadline each: at most 5 + 5 + 5 + 2 = 17 s.
const DOWN_AFTER_RESET: Duration = Duration::from_secs(1);
const DOWN_AFTER_SILENCE: Duration = Duration::from_secs(17);

/// The hub's row of `address`, if listed.
async fn hub_row(hub: &NodeProc, address: &str) -> Option<Value> {
    let rows = tuic_tests::ipc(&hub.socket, "GET", "/sessions", None)
        .await
        .unwrap()
        .json();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["address"] == json!(address))
        .cloned()
}

/// Times, from `since`, until the hub's list, `tuic ls` on the hub, and the page (the list's
/// row and the open view's badge) each show `address` as host offline (`offline`) or as back
/// (`!offline`: listed with the node's own state, not dimmed, the view badge following). Each
/// observer is polled on its own, so a figure is that observer's delay, not a polling round.
async fn offline_shown(
    b: &Browser,
    hub: &NodeProc,
    address: &str,
    alias: &str,
    offline: bool,
    since: Instant,
) -> [(&'static str, Duration); 3] {
    let link = format!("#sessions a[data-session='{address}']");
    let page_js = format!(
        "return (() => {{ const a = document.querySelector(\"{link}\");
           if (!a) return false;
           const dim = a.closest('li').classList.contains('offline');
           const badge = a.querySelector('.badge').textContent;
           const view = document.getElementById('view-state');
           return {offline} ? dim && badge === 'host offline' && !view.hidden && view.textContent === 'host offline'
                            : !dim && badge !== 'host offline' && !view.hidden && view.textContent === badge; }})();"
    );
    let deadline = since + Duration::from_secs(40);
    let what = if offline { "host offline" } else { "back" };
    let rest = async {
        loop {
            if hub_row(hub, address)
                .await
                .is_some_and(|r| (r["state"] == json!("host_offline")) == offline)
            {
                return since.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "the hub never listed {address} as {what}: {:?}",
                hub_row(hub, address).await
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let cli = async {
        loop {
            let (sock, a) = (hub.socket.clone(), alias.to_owned());
            let line = tokio::task::spawn_blocking(move || cli_line(&sock, &a))
                .await
                .unwrap();
            if line
                .as_ref()
                .is_some_and(|l| l.contains("  host offline  ") == offline)
            {
                return since.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "tuic ls on the hub never showed {address} as {what}: {line:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let page = async {
        loop {
            if b.eval(&page_js, json!([])).await.unwrap() == json!(true) {
                return since.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {address} as {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let (rest, cli, page) = tokio::join!(rest, cli, page);
    [("hub list", rest), ("tuic ls", cli), ("page", page)]
}

/// The text of the page's screen rows (trailing blanks trimmed).
async fn page_rows(b: &Browser) -> Vec<String> {
    let v = b
        .eval(
            "return [...document.querySelectorAll('#screen .row')].map(r => r.textContent.trimEnd())",
            json!([]),
        )
        .await
        .unwrap();
    serde_json::from_value(v).unwrap()
}

/// Opens the phone page afresh on `address` and waits until its screen shows `text`.
async fn open_fresh(b: &Browser, base: &str, address: &str, text: &str) {
    let link = format!("#sessions a[data-session='{address}']");
    b.goto(&format!("{base}/mobile")).await.unwrap();
    b.wait_for(&format!("!!document.querySelector(\"{link}\")"), 15_000)
        .await
        .unwrap();
    b.click(&b.find(&link).await.unwrap()).await.unwrap();
    b.wait_for(
        &format!("document.getElementById('screen').textContent.includes('{text}')"),
        15_000,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_down_nodes_sessions_stay_listed_dimmed_as_host_offline_with_their_last_screen() {
    // Hub and node in their own network namespaces; the hub retries a lost node after at most
    // 2 s (jittered), so the node's return is seen promptly.
    let mut bed = FedBed::start_with_hub(
        1,
        json!({}),
        json!({"tuning": {"peer_reconnect_max_ms": 2_000}}),
        Some(PASSWORD),
    )
    .await
    .unwrap();
    let hub_port = bed.hub.tcp.expect("hub TCP").port();
    let door = Door::open(bed.net.hub(), ([127, 0, 0, 1], hub_port).into()).unwrap();
    let base = format!("http://{}", door.addr);
    // A program that draws, then writes each line it reads at row 4 (no echo).
    let draw = "stty -echo; printf '\\033[2J\\033[2;3Hlast-words-before-the-fall'; \
                while read x; do printf '\\033[4;3H\\033[Kgot-%s' \"$x\"; done";
    let remote = bed
        .create_on_node(
            0,
            json!({"rows": 12, "cols": 40, "shell": "/bin/sh", "args": ["-c", draw], "cwd": "/tmp"}),
        )
        .await
        .unwrap();
    let address = format!("nodeb/{remote}");
    let alias = bed
        .wait_listed(&address, Duration::from_secs(20))
        .await
        .unwrap()["alias"]
        .as_str()
        .unwrap()
        .to_owned();
    let link = format!("#sessions a[data-session='{address}']");

    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.wait_for(&format!("!!document.querySelector(\"{link}\")"), 20_000)
        .await
        .unwrap();
    b.click(&b.find(&link).await.unwrap()).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('last-words-before-the-fall')",
        15_000,
    )
    .await
    .unwrap();
    let live = page_rows(&b).await;

    // 1. The node is killed (-9): the hub's connection resets.
    bed.nodes[0].kill9();
    let t = Instant::now();
    let down = offline_shown(&b, &bed.hub, &address, &alias, true, t).await;
    println!("kill -9: host offline shown after {down:?}");
    b.screenshot(&artifacts_dir().join("offline-kill-phone.png"))
        .await
        .unwrap();
    // The open view still shows the last screen, row for row.
    assert_eq!(page_rows(&b).await, live);
    // Opened afresh, the row is dimmed and the session shows the last screen the hub relayed.
    open_fresh(&b, &base, &address, "last-words-before-the-fall").await;
    let dim = b
        .eval(
            &format!(
                "const a = document.querySelector(\"{link}\"); return [a.closest('li').classList.contains('offline'), getComputedStyle(a).opacity];"
            ),
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(dim, json!([true, "0.55"]));
    assert_eq!(page_rows(&b).await, live);
    b.screenshot(&artifacts_dir().join("offline-last-screen-phone.png"))
        .await
        .unwrap();
    // The node comes back (its holder kept the PTY): the row is live again everywhere and the
    // view follows the live screen.
    bed.nodes[0].restart().unwrap();
    let t = Instant::now();
    let back = offline_shown(&b, &bed.hub, &address, &alias, false, t).await;
    println!("node restarted: host offline cleared after {back:?}");
    let r = tuic_tests::ipc(
        &bed.hub.socket,
        "POST",
        &format!("/sessions/{}/write", address.replace('/', "%2F")),
        Some(json!({"data": "after-restart\n"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    b.wait_for(
        "document.getElementById('screen').textContent.includes('got-after-restart')",
        15_000,
    )
    .await
    .unwrap();
    let live = page_rows(&b).await;

    // 2. The link is cut: no reset reaches the hub; its health probes find the node gone.
    bed.net.set_link(0, false).unwrap();
    let t = Instant::now();
    let cut = offline_shown(&b, &bed.hub, &address, &alias, true, t).await;
    println!("link cut: host offline shown after {cut:?}");
    b.screenshot(&artifacts_dir().join("offline-cut-phone.png"))
        .await
        .unwrap();
    assert_eq!(page_rows(&b).await, live);
    // Opened afresh: the last screen is the newest one relayed, not an older one.
    open_fresh(&b, &base, &address, "got-after-restart").await;
    assert_eq!(page_rows(&b).await, live);
    // The link is back: cleared, and the view is live again.
    bed.net.set_link(0, true).unwrap();
    let t = Instant::now();
    let relinked = offline_shown(&b, &bed.hub, &address, &alias, false, t).await;
    println!("link restored: host offline cleared after {relinked:?}");
    let r = tuic_tests::ipc(
        &bed.hub.socket,
        "POST",
        &format!("/sessions/{}/write", address.replace('/', "%2F")),
        Some(json!({"data": "after-relink\n"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    b.wait_for(
        "document.getElementById('screen').textContent.includes('got-after-relink')",
        15_000,
    )
    .await
    .unwrap();

    // The hub within its documented bound; the page and `tuic ls` within the state bound of it.
    for (what, figures, hub_bound) in [
        ("kill -9", down, DOWN_AFTER_RESET),
        ("link cut", cut, DOWN_AFTER_SILENCE),
    ] {
        let hub = figures[0].1;
        assert!(
            hub <= hub_bound,
            "{what}: the hub listed host offline after {hub:?} (bound {hub_bound:?})"
        );
        for (who, d) in &figures[1..] {
            assert!(
                *d <= hub + BOUND,
                "{what}: the {who} showed host offline {d:?} after (the hub: {hub:?})"
            );
        }
    }
    drop(door);
}

#[tokio::test]
async fn a_touch_drag_on_the_phone_scrolls_the_history_and_latest_comes_back() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let r = tuic_tests::ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 20, "cols": 40, "shell": "/bin/sh",
                    "args": ["-c", "i=1; while [ $i -le 300 ]; do echo hist-$i; i=$((i+1)); done; echo END-MARK; read x"],
                    "cwd": "/tmp"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let sid = r.json()["session_id"].as_str().unwrap().to_owned();
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('END-MARK')",
        15_000,
    )
    .await
    .unwrap();
    let screen = b.find("#screen").await.unwrap();
    // Dragging the finger down shows older rows (the history), through `scroll` frames.
    b.touch_drag(&screen, 0, -150, 250, 10).await.unwrap();
    b.wait_for(
        "(() => { const c = document.getElementById('screen').__client;
           return c.offset > 0 && c.screen.scroll > 0 && !document.getElementById('jump').hidden
             && !document.getElementById('screen').textContent.includes('END-MARK'); })()",
        15_000,
    )
    .await
    .unwrap();
    let top = b
        .eval(
            "return document.querySelector('#screen .row').textContent.trim()",
            json!([]),
        )
        .await
        .unwrap();
    let n: u32 = top
        .as_str()
        .and_then(|t| t.strip_prefix("hist-"))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("top row after the drag: {top}"));
    assert!(
        n < 282,
        "the drag did not reach older rows: top row hist-{n}"
    );
    b.screenshot(&artifacts_dir().join("touch-history-phone.png"))
        .await
        .unwrap();
    // "↓ Latest" follows the live screen again. Pressed from script: a webdriver touch tap on
    // it reaches the page as pointerdown/touchstart/pointerup/touchend but headless Chromium
    // synthesizes no click from it (and a mouse click right after touch input is not
    // delivered either), which a phone's tap does.
    b.eval(
        "document.getElementById('jump').click(); return true;",
        json!([]),
    )
    .await
    .unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('END-MARK') && document.getElementById('jump').hidden",
        15_000,
    )
    .await
    .unwrap();
}
