//! The web UI's screen view (screen sync) in Debian's headless Chromium at phone size
//! (390×844), against a real node over TCP: the rendered rows equal the node's
//! `terminal/lines` screen for a cursor-drawing program, for `vim` and for a curses program;
//! hostile output and a 64 MiB burst; the phone habits (special keys, re-attach, toasts, find
//! and copy, the on-screen keyboard keeping the input line and cursor row visible, an agent's
//! suspend performed by the page and resumed); a hub's list
//! grouped by host.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::NodeProc;
use tuic_tests::bed::{self, create, login, phone_node as remote_node};
use tuic_tests::webdriver::{Browser, artifacts_dir};

async fn node_screen(node: &NodeProc, id: &str) -> Vec<String> {
    bed::screen_lines(&node.socket, id).await
}

async fn page_rows(b: &Browser) -> Vec<String> {
    let v = b
        .eval(
            "return [...document.querySelectorAll('#screen .row')].map(r => r.textContent.replace(/\\s+$/, ''))",
            json!([]),
        )
        .await
        .unwrap();
    serde_json::from_value(v).unwrap()
}

/// Waits (bounded) until the page's rows equal the node's screen; returns them.
async fn rows_agree(b: &Browser, node: &NodeProc, id: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let want = node_screen(node, id).await;
        let got = page_rows(b).await;
        if got == want {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "page rows never matched the node's screen:\npage {got:#?}\nnode {want:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The rendered cursor: (column, row) of the `.cursor` cell.
async fn page_cursor(b: &Browser) -> Value {
    b.eval(
        "const rows = [...document.querySelectorAll('#screen .row')];
         const y = rows.findIndex(r => r.querySelector('.cursor'));
         if (y < 0) return null;
         const c = rows[y].querySelector('.cursor');
         let x = 0;
         const walk = (n) => {
           if (n === c) return true;
           if (n.nodeType === 3) { x += [...n.textContent].length; return false; }
           if (n.classList && n.classList.contains('w')) { if (n.contains(c)) return true; x += 2; return false; }
           for (const k of n.childNodes) if (walk(k)) return true;
           return false;
         };
         walk(rows[y]);
         return [x, y];",
        json!([]),
    )
    .await
    .unwrap()
}

const DRAW: &str = r#"stty -echo
printf '\033]2;<img src=x onerror=window.pwned=1>\007\033]52;c;aGVsbG8=\007'
printf '\033[?1049h\033[2J\033[H'
printf '\033[1;1H\033[1;32mTOP-LEFT\033[0m <b>not bold</b>'
printf '\033[5;10H\033[7mmiddle\033[0m'
printf '\033[12;1H-- status --'
printf '\033[3;1Hxxxxxxx\033[3;3H\033[K'
printf '\033[6;1H\346\227\245\346\234\254wide \377\376 bytes'
printf '\033[8;20HDONE-MARK'
read go
printf '\033[?1049l'
echo "after-alt:$go"
read again
"#;

#[tokio::test]
async fn phone_screen_view_matches_the_nodes_screen_for_a_drawing_program_and_vim() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create(
        &node,
        json!({"rows": 30, "cols": 60, "shell": "/bin/sh", "args": ["-c", DRAW], "cwd": "/tmp"}),
    )
    .await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('DONE-MARK')",
        15_000,
    )
    .await
    .unwrap();
    let rows = rows_agree(&b, &node, &sid).await;
    assert_eq!(rows.len(), 30);
    assert_eq!(rows[0], "TOP-LEFT <b>not bold</b>");
    assert_eq!(page_cursor(&b).await, json!([28, 7]));
    // Hostile output stays text: no element from markup, no script ran, the page title kept.
    let safe = b
        .eval(
            "return !window.pwned && !document.querySelector('#screen img, #screen b') && document.title === 'tuic'",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(safe, json!(true));
    // The 60 columns fit the phone's width (scaled), and nothing overflows the page.
    let fit = b
        .eval(
            "const s = document.getElementById('screen');
             return [s.scrollWidth <= s.clientWidth + 1, document.documentElement.scrollWidth <= window.innerWidth]",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(fit, json!([true, true]));
    b.screenshot(&artifacts_dir().join("screen-draw-phone.png"))
        .await
        .unwrap();
    // The input line reaches the PTY; the screen follows the program back to the shell rows.
    let line = b.find("#line").await.unwrap();
    b.type_text(&line, "from-phone\u{E007}").await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('after-alt:from-phone')",
        15_000,
    )
    .await
    .unwrap();
    rows_agree(&b, &node, &sid).await;

    // vim, in a fresh session: the rendered rows equal the node's, cursor included.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "first line\n\tindented\nlast 日本\n").unwrap();
    let vim = create(
        &node,
        json!({"rows": 20, "cols": 50, "shell": "vim",
               "args": ["-u", "NONE", "-N", "-n", "-i", "NONE", file.path().to_str().unwrap()],
               "cwd": "/tmp"}),
    )
    .await;
    b.goto(&format!("{base}/mobile#/s/{vim}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('first line')",
        15_000,
    )
    .await
    .unwrap();
    let rows = rows_agree(&b, &node, &vim).await;
    assert_eq!(rows[0], "first line");
    assert_eq!(rows[1], "        indented");
    assert!(rows[3].starts_with('~'), "{rows:#?}");
    assert_eq!(page_cursor(&b).await, json!([0, 0]));
    // Motion in vim moves the rendered cursor: `G` to the last line, `$` to its end.
    tuic_tests::ipc(
        &node.socket,
        "POST",
        &format!("/sessions/{vim}/write"),
        Some(json!({"data": "G$"})),
    )
    .await
    .unwrap();
    b.wait_for(
        "(() => { const rows = [...document.querySelectorAll('#screen .row')]; return rows.findIndex(r => r.querySelector('.cursor')) === 2; })()",
        10_000,
    )
    .await
    .unwrap();
    rows_agree(&b, &node, &vim).await;
    // "last 日本": the cursor sits on the last wide character, column 7.
    assert_eq!(page_cursor(&b).await, json!([7, 2]));
    b.screenshot(&artifacts_dir().join("screen-vim-phone.png"))
        .await
        .unwrap();
    tuic_tests::ipc(
        &node.socket,
        "POST",
        &format!("/sessions/{vim}/write"),
        Some(json!({"data": "\x1b:q!\r"})),
    )
    .await
    .unwrap();
    b.wait_for("!document.getElementById('exit-note').hidden", 10_000)
        .await
        .unwrap();
}

/// A real curses program (Python's `curses`, on ncurses): a border, a boxed and coloured menu
/// window, bold and reverse text, the cursor parked on purpose; a key moves the selection and
/// prints the pick (ncurses sends only the cells that changed, with its own cursor motion);
/// a second key ends it.
const CURSES: &str = r#"
import curses
def main(s):
    curses.start_color()
    curses.init_pair(1, curses.COLOR_YELLOW, curses.COLOR_BLUE)
    s.border()
    s.addstr(1, 2, "curses-menu", curses.A_BOLD)
    s.addstr(10, 2, "press a key")
    s.refresh()
    w = curses.newwin(5, 24, 3, 4)
    w.bkgd(" ", curses.color_pair(1))
    w.box()
    w.addstr(1, 2, "1. open")
    w.addstr(2, 2, "2. save", curses.A_REVERSE)
    w.addstr(3, 2, "3. quit")
    w.refresh()
    s.move(12, 5)
    s.refresh()
    s.getch()
    w.addstr(2, 2, "2. save")
    w.addstr(3, 2, "3. quit", curses.A_REVERSE)
    w.refresh()
    s.addstr(10, 2, "picked: 3  ")
    s.move(10, 11)
    s.refresh()
    s.getch()
curses.wrapper(main)
"#;

/// The node's cursor: `[column, row]` from its terminal snapshot.
async fn node_cursor(node: &NodeProc, id: &str) -> Value {
    let v = tuic_tests::ipc(
        &node.socket,
        "GET",
        &format!("/sessions/{id}/terminal/snapshot"),
        None,
    )
    .await
    .unwrap()
    .json();
    json!([v["cursor"]["col"], v["cursor"]["row"]])
}

/// Waits (bounded) until the page's rows and cursor equal the node's; returns the rows.
async fn screen_and_cursor_agree(b: &Browser, node: &NodeProc, id: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows = rows_agree(b, node, id).await;
        let (want, got) = (node_cursor(node, id).await, page_cursor(b).await);
        if want == got && node_screen(node, id).await == rows {
            return rows;
        }
        assert!(
            Instant::now() < deadline,
            "the page's cursor {got} never matched the node's {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn phone_screen_view_matches_the_nodes_screen_for_a_curses_program() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create(
        &node,
        json!({"rows": 16, "cols": 40, "shell": "python3", "args": ["-c", CURSES], "cwd": "/tmp"}),
    )
    .await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('press a key')",
        15_000,
    )
    .await
    .unwrap();
    let rows = screen_and_cursor_agree(&b, &node, &sid).await;
    assert_eq!(rows.len(), 16);
    assert!(rows[1].contains("curses-menu"), "{rows:#?}");
    assert!(rows[5].contains("2. save"), "{rows:#?}");
    assert_eq!(page_cursor(&b).await, json!([5, 12]));
    b.screenshot(&artifacts_dir().join("screen-curses-phone.png"))
        .await
        .unwrap();
    // A key: ncurses redraws only what changed; the page follows, cursor included.
    tuic_tests::ipc(
        &node.socket,
        "POST",
        &format!("/sessions/{sid}/write"),
        Some(json!({"data": "j"})),
    )
    .await
    .unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('picked: 3')",
        15_000,
    )
    .await
    .unwrap();
    let rows = screen_and_cursor_agree(&b, &node, &sid).await;
    assert!(rows[10].contains("picked: 3"), "{rows:#?}");
    assert_eq!(page_cursor(&b).await, json!([11, 10]));
    b.screenshot(&artifacts_dir().join("screen-curses-after-key-phone.png"))
        .await
        .unwrap();
    tuic_tests::ipc(
        &node.socket,
        "POST",
        &format!("/sessions/{sid}/write"),
        Some(json!({"data": "q"})),
    )
    .await
    .unwrap();
    b.wait_for("!document.getElementById('exit-note').hidden", 10_000)
        .await
        .unwrap();
}

/// Hostile output, as `screen::screen_mode_stays_bounded_and_exact_under_hostile_output` sends
/// it, here to the phone page: a 1 MB line, 10,000 colour changes in one cell, a row of 2,000
/// true-colour cells, invalid UTF-8, an OSC 52 clipboard write and titles carrying markup and
/// script.
const HOSTILE: &str = r#"stty -echo; printf READY; read go
head -c 1000000 /dev/zero | tr '\0' 'A'; printf '\n'
i=0; while [ $i -lt 10000 ]; do printf '\033[3%dm\033[4%dmx\r' $((i%8)) $(((i+3)%8)); i=$((i+1)); done
i=0; while [ $i -lt 2000 ]; do printf '\033[38;2;%d;%d;%dmc' $((i%256)) $((i*7%256)) $((i*13%256)); i=$((i+1)); done
printf '\033[0m\n\377\376\300\200 bad bytes <img src=x onerror=window.pwned=1>\n'
printf '\033]52;c;aGVsbG8=\007\033]0;<script>window.pwned=2</script>\007\033]2;tuic - Login\007'
printf 'HOSTILE-END'; read done"#;

#[tokio::test]
async fn phone_page_survives_hostile_output_and_runs_nothing_from_it() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create(
        &node,
        json!({"rows": 24, "cols": 48, "shell": "/bin/sh", "args": ["-c", HOSTILE], "cwd": "/tmp"}),
    )
    .await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('READY')",
        15_000,
    )
    .await
    .unwrap();
    tuic_tests::ipc(
        &node.socket,
        "POST",
        &format!("/sessions/{sid}/write"),
        Some(json!({"data": "go\n"})),
    )
    .await
    .unwrap();
    // The page keeps answering while it arrives.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut worst: f64 = 0.0;
    loop {
        let v = b
            .eval(
                "return await new Promise(r => { const t = performance.now(); setTimeout(() => r([performance.now() - t, document.getElementById('screen').textContent.includes('HOSTILE-END')]), 0); })",
                json!([]),
            )
            .await
            .unwrap();
        worst = worst.max(v[0].as_f64().unwrap());
        if v[1] == json!(true) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the hostile output never ended on the page"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows = rows_agree(&b, &node, &sid).await;
    assert!(
        rows.iter().any(|r| r.contains('\u{FFFD}')
            && r.contains("bad bytes <img src=x onerror=window.pwned=1>")),
        "{rows:#?}"
    );
    // Nothing ran, nothing became markup, the page's title and the clipboard are untouched,
    // and the screen is only rows of text runs.
    let safe = b
        .eval(
            "const s = document.getElementById('screen');
             const odd = [...s.querySelectorAll('*')].filter(e => !['DIV', 'SPAN'].includes(e.tagName));
             return [window.pwned === undefined, document.title, odd.length, s.querySelectorAll('.row').length];",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(safe, json!([true, "tuic", 0, 24]));
    println!("hostile output on the page: slowest page task {worst:.1} ms while it arrived");
    assert!(worst < 500.0, "the page stalled {worst:.0} ms");
    b.screenshot(&artifacts_dir().join("screen-hostile-phone.png"))
        .await
        .unwrap();
}

#[tokio::test]
async fn phone_page_stays_responsive_during_a_64_mib_burst_and_ends_on_the_nodes_screen() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let script = "stty -echo; printf READY; read go; \
                  seq -f '%.0f abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz' 1 950000; \
                  printf 'BURST-END'; read done";
    let sid = create(
        &node,
        json!({"rows": 30, "cols": 60, "shell": "/bin/sh", "args": ["-c", script], "cwd": "/tmp"}),
    )
    .await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('READY')",
        15_000,
    )
    .await
    .unwrap();
    let bytes_before: u64 = b
        .eval(
            "return Number(document.getElementById('screen').dataset.bytes || 0)",
            json!([]),
        )
        .await
        .unwrap()
        .as_u64()
        .unwrap();
    // Each tap's handling delay as the page sees it: from the event's creation to its handler.
    b.eval(
        "window.__tapLag = []; document.getElementById('tab-screen').addEventListener('click', e => window.__tapLag.push(performance.now() - e.timeStamp)); return true",
        json!([]),
    )
    .await
    .unwrap();
    tuic_tests::ipc(
        &node.socket,
        "POST",
        &format!("/sessions/{sid}/write"),
        Some(json!({"data": "go\n"})),
    )
    .await
    .unwrap();
    // While the burst runs, a tap on the page is handled promptly: the time from a click
    // event dispatched by the page to its handler running, and the page's task latency.
    let mut worst: f64 = 0.0;
    let mut samples = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = b
            .eval(
                "return document.getElementById('screen').textContent.includes('BURST-END')",
                json!([]),
            )
            .await
            .unwrap();
        if done == json!(true) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the burst never ended on the page"
        );
        let t0 = Instant::now();
        b.click(&b.find("#tab-screen").await.unwrap())
            .await
            .unwrap();
        let lag = b
            .eval(
                "return await new Promise(r => { const t = performance.now(); setTimeout(() => r(performance.now() - t), 0); })",
                json!([]),
            )
            .await
            .unwrap()
            .as_f64()
            .unwrap();
        let tap = t0.elapsed().as_secs_f64() * 1e3;
        worst = worst.max(tap);
        samples += 1;
        assert!(
            lag < 500.0,
            "page task latency {lag:.0} ms during the burst"
        );
    }
    let rows = rows_agree(&b, &node, &sid).await;
    assert!(rows.iter().any(|r| r.contains("BURST-END")));
    let page_bytes = b
        .eval(
            "return Number(document.getElementById('screen').dataset.bytes || 0)",
            json!([]),
        )
        .await
        .unwrap()
        .as_u64()
        .unwrap()
        - bytes_before;
    let raw = tuic_tests::ipc(
        &node.socket,
        "GET",
        &format!("/sessions/{sid}/output?format=raw&limit=1"),
        None,
    )
    .await
    .unwrap()
    .json()["total_written"]
        .as_u64()
        .unwrap();
    let lags: Vec<f64> =
        serde_json::from_value(b.eval("return window.__tapLag", json!([])).await.unwrap()).unwrap();
    let slowest = lags.iter().copied().fold(0.0, f64::max);
    println!(
        "page burst: raw {raw} bytes, screen frames to the page {page_bytes} bytes ({:.3} %); \
         {samples} taps during the burst, slowest handled {slowest:.1} ms after the tap \
         (WebDriver click round trip, driver included: {worst:.0} ms)",
        page_bytes as f64 * 100.0 / raw as f64
    );
    assert!(raw > 60 << 20);
    assert!(page_bytes * 50 <= raw, "{page_bytes} of {raw}");
    assert_eq!(lags.len(), samples, "every tap was handled");
    assert!(slowest < 500.0, "a tap was handled {slowest:.0} ms late");
    b.screenshot(&artifacts_dir().join("screen-burst-phone.png"))
        .await
        .unwrap();
}

/// The input records (`dir == b'i'`) of a `.tcap` capture file, concatenated.
fn captured_input(path: &std::path::Path) -> Vec<u8> {
    let Ok(b) = std::fs::read(path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut at = 8;
    while at + 13 <= b.len() {
        let dir = b[at];
        let len = u32::from_le_bytes(b[at + 9..at + 13].try_into().unwrap()) as usize;
        let end = (at + 13 + len).min(b.len());
        if dir == b'i' {
            out.extend_from_slice(&b[at + 13..end]);
        }
        at = end;
    }
    out
}

#[tokio::test]
async fn phone_special_keys_bar_sends_the_right_bytes_to_the_pty() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create(
        &node,
        json!({"rows": 20, "cols": 40, "shell": "/bin/sh",
               "args": ["-c", "stty raw -echo; printf READY; exec cat >/dev/null"], "cwd": "/tmp"}),
    )
    .await;
    let cap = tuic_tests::ipc(
        &node.socket,
        "POST",
        "/diagnostics/capture",
        Some(json!({"enabled": true, "session_id": sid})),
    )
    .await
    .unwrap()
    .json();
    let file = std::path::Path::new(cap["dir"].as_str().unwrap()).join(format!("{sid}.tcap"));
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('READY')",
        15_000,
    )
    .await
    .unwrap();
    // The bar is on screen at phone width, with touch-sized keys.
    let sized = b
        .eval(
            "return [...document.querySelectorAll('#keys button')].every(k => k.getBoundingClientRect().height >= 40 && k.getBoundingClientRect().width >= 40)",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(sized, json!(true));
    let tap = |label: &'static str| {
        let b = &b;
        async move {
            b.click(
                &b.find(&format!("#keys button[data-key='{label}']"))
                    .await
                    .unwrap(),
            )
            .await
            .unwrap();
        }
    };
    let line = b.find("#line").await.unwrap();
    tap("Esc").await;
    tap("Tab").await;
    tap("Ctrl").await;
    b.type_text(&line, "c").await.unwrap();
    tap("Alt").await;
    b.type_text(&line, "x").await.unwrap();
    for k in ["←", "↑", "↓", "→", "PgUp", "PgDn", "|", "~", "/"] {
        tap(k).await;
    }
    tap("Ctrl").await;
    tap("Ctrl").await; // pressed twice: released, so the next key is plain
    tap("/").await;
    // Modified characters never stay in the input line.
    assert_eq!(
        b.eval("return document.getElementById('line').value", json!([]))
            .await
            .unwrap(),
        json!("")
    );
    // Keys typed on the focused screen (a desktop keyboard) go to the PTY as a terminal sends
    // them: text, Enter as CR, arrows as escape sequences.
    let screen = b.find("#screen").await.unwrap();
    b.click(&screen).await.unwrap();
    // Keys of an IME composition are the IME's, never sent on their own.
    b.eval(
        "const s = document.getElementById('screen');
         s.dispatchEvent(new KeyboardEvent('keydown', {key: 'k', isComposing: true, bubbles: true}));
         s.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', keyCode: 229, bubbles: true}));
         return true",
        json!([]),
    )
    .await
    .unwrap();
    b.type_text(&screen, "ab\u{E007}\u{E013}").await.unwrap();
    let want: &[u8] = b"\x1b\t\x03\x1bx\x1b[D\x1b[A\x1b[B\x1b[C\x1b[5~\x1b[6~|~//ab\r\x1b[A";
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = captured_input(&file);
        if got == want {
            break;
        }
        assert!(
            Instant::now() < deadline && got.len() <= want.len(),
            "PTY input {:?}, want {:?}",
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.screenshot(&artifacts_dir().join("screen-keys-phone.png"))
        .await
        .unwrap();
}

#[tokio::test]
async fn phone_view_reattaches_within_3_s_with_a_fresh_whole_screen() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create(
        &node,
        json!({"rows": 20, "cols": 40, "shell": "/bin/sh",
               "args": ["-c", "stty -echo; printf 'first\\n'; read a; echo \"gap:$a\"; read b; echo \"online:$b\"; read c"],
               "cwd": "/tmp"}),
    )
    .await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('first')",
        15_000,
    )
    .await
    .unwrap();
    let write = |data: &'static str| {
        let socket = node.socket.clone();
        let sid = sid.clone();
        async move {
            tuic_tests::ipc(
                &socket,
                "POST",
                &format!("/sessions/{sid}/write"),
                Some(json!({"data": data})),
            )
            .await
            .unwrap();
        }
    };
    // The link drops (as after a lock or a network change); output arrives meanwhile.
    b.eval(
        "document.getElementById('screen').__client.ws.close(); return true",
        json!([]),
    )
    .await
    .unwrap();
    let t0 = Instant::now();
    write("x\n").await;
    b.wait_for(
        "document.getElementById('screen').dataset.fulls === '2' && document.getElementById('screen').textContent.includes('gap:x')",
        3_000,
    )
    .await
    .unwrap();
    println!(
        "re-attached after a drop in {} ms",
        t0.elapsed().as_millis()
    );
    let rows = rows_agree(&b, &node, &sid).await;
    assert_eq!(rows.iter().filter(|r| r.contains("gap:x")).count(), 1);
    // Back online after a long backoff: the `online` event re-attaches at once.
    b.eval(
        "const c = document.getElementById('screen').__client; c.backoff = 60000; c.ws.close(); return true",
        json!([]),
    )
    .await
    .unwrap();
    b.wait_for(
        "document.getElementById('screen').__client.ws.readyState === WebSocket.CLOSED && !document.getElementById('banner').hidden",
        5_000,
    )
    .await
    .unwrap();
    write("y\n").await;
    let t1 = Instant::now();
    b.eval(
        "window.dispatchEvent(new Event('online')); return true",
        json!([]),
    )
    .await
    .unwrap();
    b.wait_for(
        "document.getElementById('screen').dataset.fulls === '3' && document.getElementById('screen').textContent.includes('online:y') && document.getElementById('banner').hidden",
        3_000,
    )
    .await
    .unwrap();
    println!("re-attached on `online` in {} ms", t1.elapsed().as_millis());
    rows_agree(&b, &node, &sid).await;
}

#[tokio::test]
async fn phone_shows_agent_toasts_and_answers_confirm_dialogs() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.wait_for("document.getElementById('sessions')", 10_000)
        .await
        .unwrap();
    // Wait until the page's /events stream is open, so it sees the events that follow.
    b.wait_for("document.getElementById('conn').textContent === ''", 10_000)
        .await
        .unwrap();
    let (mut agent, _) = tuic_tests::agent::Agent::new(&node.socket, "asker").await;
    // A toast (markup stays text).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (err, v) = agent
            .tool(
                "ui",
                json!({"action": "toast", "title": "Build", "message": "<b>done</b> in 3s"}),
            )
            .await;
        assert!(!err, "{v}");
        // The page may still be connecting its event stream: toast again until it shows.
        if b
            .eval(
                "return !!document.querySelector('#notices .toast') && document.querySelector('#notices .toast').textContent.includes('<b>done</b> in 3s') && !document.querySelector('#notices b')",
                json!([]),
            )
            .await
            .unwrap()
            == json!(true)
        {
            break;
        }
        assert!(Instant::now() < deadline, "no toast on the page");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A confirm dialog: the question in full, Allow and Deny large and apart; Allow answers it.
    let sock = node.socket.clone();
    let asking = tokio::spawn(async move {
        let (mut a, _) = tuic_tests::agent::Agent::new(&sock, "confirmer").await;
        a.tool(
            "ui",
            json!({"action": "confirm", "title": "Permission", "message": "Run `rm -rf build/` in /repo?\nThis deletes 12 files."}),
        )
        .await
    });
    b.wait_for("!!document.querySelector('#notices .confirm')", 15_000)
        .await
        .unwrap();
    let layout = b
        .eval(
            "const d = document.querySelector('#notices .confirm');
             const [deny, allow] = [...d.querySelectorAll('button')].map(x => x.getBoundingClientRect());
             return [d.textContent.includes('This deletes 12 files.'), allow.height >= 44 && deny.height >= 44, allow.left - deny.right >= 16]",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(layout, json!([true, true, true]));
    b.screenshot(&artifacts_dir().join("confirm-phone.png"))
        .await
        .unwrap();
    b.click(
        &b.find("#notices .confirm button[data-answer='allow']")
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let (err, v) = tokio::time::timeout(Duration::from_secs(15), asking)
        .await
        .unwrap()
        .unwrap();
    assert!(!err, "{v}");
    assert_eq!(v["confirmed"], true, "{v}");
    b.wait_for("!document.querySelector('#notices .confirm')", 5_000)
        .await
        .unwrap();
}

/// An agent's `session action=suspend` (spec): refused while no UI holds `/events`; with the
/// phone page open, the page ends the PTY, keeps the session restorable (listed under
/// "Suspended", also after a reload) and answers, so the call returns `{ok: true}`; Resume
/// creates it again in the same directory under the same TUIC session id.
#[tokio::test]
async fn phone_performs_an_agents_suspend_and_resumes_the_session() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let work = tempfile::tempdir().unwrap();
    let sid = create(
        &node,
        json!({"shell": "/bin/sh", "cwd": work.path(), "name": "builder"}),
    )
    .await;
    let row = tuic_tests::ipc(&node.socket, "GET", &format!("/sessions/{sid}"), None)
        .await
        .unwrap()
        .json();
    let tuic = row["tuic_session"].as_str().unwrap().to_owned();
    let (mut agent, _) = tuic_tests::agent::Agent::new(&node.socket, "suspender").await;
    let (err, v) = agent
        .tool(
            "session",
            json!({"action": "wait", "session_id": sid, "until": "idle", "timeout_ms": 10_000}),
        )
        .await;
    assert!(!err, "{v}");
    let suspend = json!({"action": "suspend", "session_id": sid});
    let (err, v) = agent.tool("session", suspend.clone()).await;
    assert!(err && v.to_string().contains("no UI is attached"), "{v}");

    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.wait_for(
        &format!("!!document.querySelector('#sessions a[data-session=\"{sid}\"]')"),
        10_000,
    )
    .await
    .unwrap();
    // The page's event stream may still be connecting: the node then answers "no UI is
    // attached" and nothing changes, so ask again (bounded).
    let deadline = Instant::now() + Duration::from_secs(15);
    let v = loop {
        let (err, v) = agent.tool("session", suspend.clone()).await;
        if !err {
            break v;
        }
        assert!(v.to_string().contains("no UI is attached"), "{v}");
        assert!(Instant::now() < deadline, "the page never attached: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(v["ok"], true, "{v}");
    // The PTY has ended; the page keeps the session restorable.
    let gone = tuic_tests::ipc(&node.socket, "GET", &format!("/sessions/{sid}"), None)
        .await
        .unwrap();
    assert_eq!(gone.status, 404, "{:?}", gone.body);
    let kept = format!("#suspended li.suspended[data-tuic-session=\"{tuic}\"]");
    b.wait_for(&format!("!!document.querySelector('{kept}')"), 5_000)
        .await
        .unwrap();
    let text = b
        .eval(
            &format!("return document.querySelector('{kept}').textContent"),
            json!([]),
        )
        .await
        .unwrap();
    let text = text.as_str().unwrap();
    assert!(
        text.contains("builder") && text.contains("suspended"),
        "{text}"
    );
    assert!(text.contains(work.path().to_str().unwrap()), "{text}");
    b.screenshot(&artifacts_dir().join("suspended-phone.png"))
        .await
        .unwrap();
    // Restorable after a reload too.
    b.goto(&format!("{base}/mobile")).await.unwrap();
    b.wait_for(
        &format!("!!document.querySelector('{kept} button.resume')"),
        10_000,
    )
    .await
    .unwrap();
    b.click(&b.find(&format!("{kept} button.resume")).await.unwrap())
        .await
        .unwrap();
    b.wait_for(
        &format!("location.hash.startsWith('#/s/') && !document.querySelector('{kept}')"),
        10_000,
    )
    .await
    .unwrap();
    let rows = tuic_tests::ipc(&node.socket, "GET", "/sessions", None)
        .await
        .unwrap()
        .json();
    let back = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tuic_session"] == tuic.as_str())
        .unwrap_or_else(|| panic!("no resumed session with {tuic}: {rows}"));
    assert_eq!(back["cwd"], work.path().to_str().unwrap(), "{back}");
    let hash = b.eval("return location.hash", json!([])).await.unwrap();
    let opened = back["session_id"].as_str().unwrap();
    assert_eq!(hash, json!(format!("#/s/{opened}")));
}

#[tokio::test]
async fn phone_finds_text_in_older_history_and_copies_the_screen() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    // The needle is printed first, then ~150 KB: it lies beyond the first history page.
    let script = "stty -echo; echo NEEDLE-42 here; i=0; while [ $i -lt 4000 ]; do echo \"filler line $i ........\"; i=$((i+1)); done; echo END-OF-IT; read x";
    let sid = create(
        &node,
        json!({"rows": 20, "cols": 50, "shell": "/bin/sh", "args": ["-c", script], "cwd": "/tmp"}),
    )
    .await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('END-OF-IT')",
        20_000,
    )
    .await
    .unwrap();
    // Copy: the screen's rows as text.
    b.eval(
        "navigator.clipboard.writeText = async (t) => { window.__copied = t; }; return true",
        json!([]),
    )
    .await
    .unwrap();
    let rows = rows_agree(&b, &node, &sid).await;
    b.click(&b.find("#copy").await.unwrap()).await.unwrap();
    b.wait_for("typeof window.__copied === 'string'", 5_000)
        .await
        .unwrap();
    let copied = b.eval("return window.__copied", json!([])).await.unwrap();
    let want = rows.join("\n");
    assert_eq!(copied.as_str().unwrap().trim_end(), want.trim_end());
    // Find: typed in the search box, Enter; the older page is loaded and the line shown.
    let find = b.find("#find").await.unwrap();
    b.type_text(&find, "needle-42\u{E007}").await.unwrap();
    b.wait_for(
        "(() => { const h = document.querySelector('#term .ln.hit'); if (!h) return false;
                   const r = h.getBoundingClientRect(), t = document.getElementById('term').getBoundingClientRect();
                   return h.textContent.includes('NEEDLE-42 here') && r.top >= t.top && r.bottom <= t.bottom; })()",
        20_000,
    )
    .await
    .unwrap();
    b.screenshot(&artifacts_dir().join("find-phone.png"))
        .await
        .unwrap();
    // A query with no match says so and leaves the view usable.
    let find = b.find("#find").await.unwrap();
    b.clear(&find).await.unwrap();
    b.type_text(&find, "no-such-text-anywhere\u{E007}")
        .await
        .unwrap();
    b.wait_for(
        "document.getElementById('find').classList.contains('missing')",
        20_000,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn hub_list_groups_sessions_by_host_and_shows_a_remote_screen() {
    let (nd, node) = remote_node();
    let (_hd, hub) = bed::hub_connected_to(nd.path(), &node, "boxb");
    let draw = "stty -echo; printf '\\033[?1049h\\033[2J\\033[3;4Hremote-drawn'; read x";
    let remote = create(
        &node,
        json!({"rows": 12, "cols": 40, "shell": "/bin/sh", "args": ["-c", draw], "cwd": "/tmp"}),
    )
    .await;
    let local = create(
        &hub,
        json!({"rows": 12, "cols": 40, "shell": "/bin/sh", "args": ["-c", "read x"], "cwd": "/tmp"}),
    )
    .await;
    let b = Browser::launch(390, 844).await.unwrap();
    let base = format!("http://{}", hub.tcp.unwrap());
    login(&b, &base).await;
    let address = format!("boxb/{remote}");
    b.wait_for(
        &format!("!!document.querySelector(\"#sessions a[data-session='{address}']\")"),
        20_000,
    )
    .await
    .unwrap();
    // Headers per host, this machine first, each followed by its own sessions.
    let groups = b
        .eval(
            "const out = []; let cur = null;
             for (const li of document.querySelectorAll('#sessions li')) {
               if (li.classList.contains('host')) { cur = {host: li.dataset.host, count: li.querySelector('.badge').textContent, rows: []}; out.push(cur); }
               else cur.rows.push(li.querySelector('a').dataset.session);
             }
             return out",
            json!([]),
        )
        .await
        .unwrap();
    let hub_local = groups[0]["rows"].as_array().unwrap();
    assert_eq!(groups[0]["host"], "local", "{groups}");
    assert!(
        hub_local
            .iter()
            .any(|r| r.as_str().unwrap().ends_with(&local)),
        "{groups}"
    );
    assert_eq!(groups[1]["host"], "boxb", "{groups}");
    assert_eq!(groups[1]["rows"], json!([address]), "{groups}");
    assert_eq!(groups[1]["count"], "1", "{groups}");
    b.screenshot(&artifacts_dir().join("hub-groups-phone.png"))
        .await
        .unwrap();
    // The remote session's screen, through the hub, equals the owner's.
    b.click(
        &b.find(&format!("#sessions a[data-session='{address}']"))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('remote-drawn')",
        15_000,
    )
    .await
    .unwrap();
    let rows = rows_agree(&b, &node, &remote).await;
    assert_eq!(rows[2], "   remote-drawn");
}

/// Where the input line and the screen's cursor row are, against the visual viewport (the part
/// of the page on screen, above an on-screen keyboard). An element "is seen" when its box lies
/// inside the visual viewport — and, for a screen row, inside the screen's scrolled box — and
/// a hit test at its middle lands on it (nothing covers it).
const LAYOUT: &str = "
    const vv = window.visualViewport;
    const top = vv.offsetTop, bottom = vv.offsetTop + vv.height;
    const screen = document.getElementById('screen');
    const sr = screen.getBoundingClientRect();
    const clip = {top: sr.top + screen.clientTop, bottom: sr.top + screen.clientTop + screen.clientHeight};
    const inside = (r, c) => r.top >= c.top - 0.5 && r.bottom <= c.bottom + 0.5;
    const seen = (el, clipped) => {
      if (!el) return null;
      const r = el.getBoundingClientRect();
      const hit = document.elementFromPoint(r.left + Math.min(4, r.width / 2), (r.top + r.bottom) / 2);
      return {top: Math.round(r.top), bottom: Math.round(r.bottom),
              seen: inside(r, {top, bottom}) && (!clipped || inside(r, clip)) && !!hit && el.contains(hit)};
    };
    const rows = [...screen.querySelectorAll('.row')];
    const cursor = screen.querySelector('.cursor');
    const out = rows.find(r => r.textContent.includes(arguments[0]));
    return {
      vv_top: Math.round(top), vv_height: Math.round(vv.height), inner_height: window.innerHeight, inner_width: window.innerWidth,
      line: seen(document.querySelector('#session-view .input'), false),
      cursor_row: seen(cursor && cursor.closest('.row'), true),
      cursor_y: cursor ? rows.indexOf(cursor.closest('.row')) : null,
      output_row: seen(out, true),
      screen_height: screen.clientHeight,
      screen_fits: screen.scrollHeight <= screen.clientHeight + 1,
      line_focused: document.activeElement === document.getElementById('line'),
    }";

async fn layout(b: &Browser, output: &str) -> Value {
    b.eval(LAYOUT, json!([output])).await.unwrap()
}

/// Polls the layout (bounded) until `ok` holds; returns it.
async fn layout_until(b: &Browser, output: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let l = layout(b, output).await;
        if ok(&l) {
            return l;
        }
        assert!(Instant::now() < deadline, "{what} never held: {l:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The on-screen keyboard, modelled as Chrome on Android lays a page out that asks for
/// `interactive-widget=resizes-content`: the viewport shrinks from 844 to 480 px (the keyboard
/// takes the bottom), then grows back when it closes.
#[tokio::test]
async fn phone_keeps_the_input_line_and_cursor_row_visible_with_the_keyboard_open() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    // 40 rows of 60 columns: they fit a phone's 844 px, not the 480 px left above a keyboard.
    // Enough lines first that the prompt, and the cursor, are on the last row.
    let sid = create(
        &node,
        json!({"rows": 40, "cols": 60, "shell": "/bin/sh",
               "args": ["-c", "i=0; while [ $i -lt 80 ]; do i=$((i+1)); echo line-$i; done; PS1='kbd$ ' exec /bin/sh -i"],
               "cwd": "/tmp"}),
    )
    .await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.set_viewport(390, 844, true).await.unwrap();
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('kbd$')",
        15_000,
    )
    .await
    .unwrap();
    let rows = screen_and_cursor_agree(&b, &node, &sid).await;
    assert_eq!(rows.len(), 40);
    assert_eq!(rows[39], "kbd$");
    // Keyboard closed: the whole screen fits, the input line is at the bottom.
    let open_page = layout_until(&b, "line-80", "the phone layout", |l| {
        l["screen_fits"] == true && l["cursor_row"]["seen"] == true && l["line"]["seen"] == true
    })
    .await;
    assert_eq!(open_page["cursor_y"], 39, "{open_page:#}");
    assert_eq!(
        open_page["line"]["bottom"], open_page["vv_height"],
        "{open_page:#}"
    );
    // The page is the phone's width — no control sticks out and widens it — and each control
    // of the view can be brought on screen (the tab row scrolls sideways).
    assert_eq!(open_page["inner_width"], 390, "{open_page:#}");
    let unreachable = b
        .eval(
            "const vv = visualViewport;
             const all = [...document.querySelectorAll('#session-view .tabs > *, #session-view .input > *, #keys button')]
               .filter(e => e.getClientRects().length);
             const out = all.filter(e => {
               e.scrollIntoView({block: 'nearest', inline: 'nearest'});
               const r = e.getBoundingClientRect();
               return !(r.left >= vv.offsetLeft - 0.5 && r.right <= vv.offsetLeft + vv.width + 0.5);
             }).map(e => e.id || e.textContent);
             all[0].scrollIntoView({block: 'nearest', inline: 'nearest'});
             document.getElementById('keys').firstChild.scrollIntoView({block: 'nearest', inline: 'nearest'});
             return [all.length, out]",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(unreachable[1], json!([]), "{unreachable}");
    assert!(unreachable[0].as_u64().unwrap() >= 15, "{unreachable}");
    println!("keyboard closed: {open_page}");

    // Tapping the input line opens the keyboard: the viewport loses its bottom 364 px.
    let line = b.find("#line").await.unwrap();
    b.click(&line).await.unwrap();
    b.set_viewport(390, 480, true).await.unwrap();
    let kbd = layout_until(
        &b,
        "line-80",
        "input line and cursor row above the keyboard",
        |l| {
            l["vv_height"] == 480
                && l["line"]["seen"] == true
                && l["cursor_row"]["seen"] == true
                && l["line"]["bottom"] == 480
        },
    )
    .await;
    // The screen no longer fits: it scrolled to keep the cursor's row, not the top, in view.
    assert_eq!(kbd["screen_fits"], false, "{kbd:#}");
    assert!(
        kbd["screen_height"].as_i64().unwrap() < open_page["screen_height"].as_i64().unwrap(),
        "{kbd:#}"
    );
    println!("keyboard open: {kbd}");
    b.screenshot(&artifacts_dir().join("keyboard-open-phone.png"))
        .await
        .unwrap();

    // A command typed through the input line runs, and its output lands in view.
    b.type_text(&line, "echo typed-$((6*7))\u{E007}")
        .await
        .unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('typed-42')",
        15_000,
    )
    .await
    .unwrap();
    let rows = screen_and_cursor_agree(&b, &node, &sid).await;
    assert_eq!(
        &rows[37..],
        ["kbd$ echo typed-$((6*7))", "typed-42", "kbd$"]
    );
    let typed = layout_until(
        &b,
        "typed-42",
        "the command's output above the keyboard",
        |l| {
            l["line"]["seen"] == true
                && l["cursor_row"]["seen"] == true
                && l["output_row"]["seen"] == true
        },
    )
    .await;
    assert_eq!(typed["vv_height"], 480, "{typed:#}");
    assert_eq!(typed["line_focused"], true, "{typed:#}");
    println!("keyboard open, after a command: {typed}");
    b.screenshot(&artifacts_dir().join("keyboard-typed-phone.png"))
        .await
        .unwrap();

    // The keyboard closes: the screen gets its rows back, the input line returns to the bottom.
    b.set_viewport(390, 844, true).await.unwrap();
    let closed = layout_until(
        &b,
        "typed-42",
        "the rows given back after the keyboard closed",
        |l| {
            l["vv_height"] == 844
                && l["screen_fits"] == true
                && l["screen_height"] == open_page["screen_height"]
                && l["line"]["bottom"] == 844
                && l["cursor_row"]["seen"] == true
                && l["output_row"]["seen"] == true
        },
    )
    .await;
    println!("keyboard closed again: {closed}");
    // Pinch zoom shrinks the visual viewport too, but it is not a keyboard: the page keeps its
    // size. (Measured two frames after the zoom shows, when its `resize` has been handled.)
    b.cdp(
        "Emulation.setPageScaleFactor",
        json!({"pageScaleFactor": 2.0}),
    )
    .await
    .unwrap();
    let zoomed = b
        .eval_async(
            "const done = arguments[arguments.length - 1];
             const measure = () => done({
               scale: visualViewport.scale, vv_height: Math.round(visualViewport.height),
               line_bottom: Math.round(document.querySelector('#session-view .input').getBoundingClientRect().bottom),
               screen_height: document.getElementById('screen').clientHeight});
             const wait = () => visualViewport.scale === 2
               ? requestAnimationFrame(() => requestAnimationFrame(measure))
               : requestAnimationFrame(wait);
             wait();",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(
        zoomed,
        json!({"scale": 2, "vv_height": 422, "line_bottom": 844, "screen_height": open_page["screen_height"]})
    );
    b.cdp(
        "Emulation.setPageScaleFactor",
        json!({"pageScaleFactor": 1.0}),
    )
    .await
    .unwrap();
    b.screenshot(&artifacts_dir().join("keyboard-closed-phone.png"))
        .await
        .unwrap();

    // A desktop window: nothing of the above changes its layout — list and session side by
    // side, the input line at the bottom of the window, the cursor row in view.
    // (chromedriver applies its phone metrics again after a navigation, so the desktop size
    // is set once the page has loaded.)
    b.goto(&format!("{base}/#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.body.classList.contains('desktop') && document.getElementById('screen').textContent.includes('typed-42')",
        15_000,
    )
    .await
    .unwrap();
    b.set_viewport(1280, 800, false).await.unwrap();
    let desk = layout_until(&b, "typed-42", "the desktop layout", |l| {
        l["vv_height"] == 800
            && l["line"]["bottom"] == 800
            && l["line"]["seen"] == true
            && l["cursor_row"]["seen"] == true
    })
    .await;
    let side_by_side = b
        .eval(
            "const l = document.getElementById('list-view').getBoundingClientRect();
             const s = document.getElementById('session-view').getBoundingClientRect();
             return l.right <= s.left && l.width > 0 && s.width > 0 && s.right <= window.innerWidth",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(side_by_side, json!(true));
    println!("desktop: {desk}");
}

/// Waits until session `sid`'s PTY input (the `.tcap` capture `file`) is exactly `want`.
async fn input_becomes(file: &std::path::Path, want: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = captured_input(file);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline && got.len() <= want.len(),
            "PTY input {:?}, want {:?}",
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Turns on the `.tcap` input capture of session `sid`; returns its file.
async fn capture_file(node: &NodeProc, sid: &str) -> std::path::PathBuf {
    let cap = tuic_tests::ipc(
        &node.socket,
        "POST",
        "/diagnostics/capture",
        Some(json!({"enabled": true, "session_id": sid})),
    )
    .await
    .unwrap()
    .json();
    std::path::Path::new(cap["dir"].as_str().unwrap()).join(format!("{sid}.tcap"))
}

/// An IME composition on the typing input, as a phone keyboard produces one: the keys and the
/// composition text meanwhile are the IME's; only the committed `text` is input.
const COMPOSE: &str = "const t = document.getElementById('type'); const [reading, text] = arguments;
    t.dispatchEvent(new CompositionEvent('compositionstart', {data: '', bubbles: true}));
    t.dispatchEvent(new KeyboardEvent('keydown', {key: 'Process', keyCode: 229, isComposing: true, bubbles: true, cancelable: true}));
    t.dispatchEvent(new InputEvent('beforeinput', {inputType: 'insertCompositionText', data: reading, isComposing: true, bubbles: true, cancelable: true}));
    t.dispatchEvent(new CompositionEvent('compositionupdate', {data: reading, bubbles: true}));
    t.dispatchEvent(new InputEvent('input', {inputType: 'insertCompositionText', data: reading, isComposing: true, bubbles: true}));
    t.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', keyCode: 229, isComposing: true, bubbles: true, cancelable: true}));
    t.dispatchEvent(new CompositionEvent('compositionend', {data: text, bubbles: true}));
    return true;";

/// The phone's typing mode: a tap on the screen gives the keyboard to a hidden input and each
/// key goes to the PTY as typed — text, non-ASCII, an IME composition (committed once), Esc and
/// Enter as keys — so vim can be driven from the phone; the saved file holds exactly what was
/// typed. (Today's page has no typing mode: the tap leaves the focus on the screen, which drops
/// the composition and the non-ASCII text.)
#[tokio::test]
async fn phone_types_into_vim_through_the_screen_with_ime() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typed.txt");
    let sid = create(
        &node,
        json!({"rows": 24, "cols": 80, "shell": "/bin/sh",
               "args": ["-c", format!("exec vim -u NONE -N -n -i NONE {}", file.display())],
               "cwd": dir.path()}),
    )
    .await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('typed.txt')",
        15_000,
    )
    .await
    .unwrap();
    // The tap raises the keyboard: the typing input has the focus.
    b.click(&b.find("#screen").await.unwrap()).await.unwrap();
    assert_eq!(
        b.eval("return document.activeElement.id", json!([]))
            .await
            .unwrap(),
        json!("type")
    );
    let t = b.find("#type").await.unwrap();
    b.type_text(&t, "iHello ✓ ").await.unwrap();
    b.eval(COMPOSE, json!(["にほん", "日本"])).await.unwrap();
    b.type_text(&t, "\u{E00C}:wq\u{E007}").await.unwrap();
    // :wq ends vim and with it the session.
    b.wait_for("!document.getElementById('exit-note').hidden", 15_000)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "Hello ✓ 日本\n");
    // Nothing piles up in the hidden input.
    assert_eq!(
        b.eval("return document.getElementById('type').value", json!([]))
            .await
            .unwrap(),
        json!("")
    );
}

/// Paste on the phone's typing input: 2,000 characters reach the PTY exactly once, between
/// bracketed-paste markers because the program asked for them. The line input's "no ⏎" sends
/// the line without Enter.
#[tokio::test]
async fn phone_paste_reaches_the_pty_once_bracketed_and_the_line_can_skip_enter() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create(
        &node,
        json!({"rows": 20, "cols": 40, "shell": "/bin/sh",
               "args": ["-c", "stty raw -echo; printf '\\033[?2004hREADY'; exec cat >/dev/null"], "cwd": "/tmp"}),
    )
    .await;
    let file = capture_file(&node, &sid).await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('READY')",
        15_000,
    )
    .await
    .unwrap();
    b.click(&b.find("#screen").await.unwrap()).await.unwrap();
    let text: String = (0..2000)
        .map(|i| match i % 50 {
            49 => '\n',
            7 => 'é',
            _ => char::from(b'a' + (i % 26) as u8),
        })
        .collect();
    b.eval(
        "const dt = new DataTransfer(); dt.setData('text/plain', arguments[0]);
         document.getElementById('type').dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));
         return true",
        json!([text]),
    )
    .await
    .unwrap();
    let mut want = b"\x1b[200~".to_vec();
    want.extend_from_slice(text.as_bytes());
    want.extend_from_slice(b"\x1b[201~");
    input_becomes(&file, &want).await;
    // The line input without Enter.
    b.click(&b.find("#no-enter").await.unwrap()).await.unwrap();
    let line = b.find("#line").await.unwrap();
    b.type_text(&line, "ab\u{E007}").await.unwrap();
    want.extend_from_slice(b"ab");
    input_becomes(&file, &want).await;
}

/// Typing latency in the page over 30 keys each: keydown → the screen's DOM updated, beside the
/// raw echo (keydown → the echo's bytes on a raw binary stream opened in the same page); first
/// on the focused screen (the desktop keyboard path, the same on older pages), then through the
/// phone's typing mode. Prints p50/p95 (`--no-capture`); asserts only that every key came back.
#[tokio::test]
async fn phone_typing_latency_keydown_to_dom_beside_the_raw_echo() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    for target in ["screen", "type"] {
        typing_latency(&b, &node, &base, target).await;
    }
}

async fn typing_latency(b: &Browser, node: &NodeProc, base: &str, target: &str) {
    // A session that echoes what is typed.
    let echo = create(
        node,
        json!({"rows": 20, "cols": 40, "shell": "/bin/sh",
               "args": ["-c", "stty raw; printf READY; exec cat >/dev/null"], "cwd": "/tmp"}),
    )
    .await;
    b.goto(&format!("{base}/mobile#/s/{echo}")).await.unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('READY')",
        15_000,
    )
    .await
    .unwrap();
    b.eval_async(
        "const done = arguments[arguments.length - 1]; const id = arguments[0];
         window.__lat = []; window.__raw = [];
         const t = document.getElementById(arguments[1]), s = document.getElementById('screen');
         let t0 = null, r0 = null;
         t.addEventListener('keydown', () => { t0 = r0 = performance.now(); }, true);
         new MutationObserver(() => { if (t0 != null) { __lat.push(performance.now() - t0); t0 = null; } })
           .observe(s, {subtree: true, childList: true, characterData: true});
         const ws = new WebSocket(`ws://${location.host}/sessions/${id}/stream?binary=1&from_byte=999999999`);
         ws.binaryType = 'arraybuffer';
         ws.onmessage = (m) => { if (m.data instanceof ArrayBuffer && r0 != null) { __raw.push(performance.now() - r0); r0 = null; } };
         ws.onopen = () => done(true);",
        json!([echo, target]),
    )
    .await
    .unwrap();
    b.click(&b.find("#screen").await.unwrap()).await.unwrap();
    let t = b.find(&format!("#{target}")).await.unwrap();
    for i in 0..30 {
        b.type_text(&t, "x").await.unwrap();
        b.wait_for(
            &format!("window.__lat.length > {i} && window.__raw.length > {i}"),
            10_000,
        )
        .await
        .unwrap();
    }
    let lat = b
        .eval("return [window.__lat, window.__raw]", json!([]))
        .await
        .unwrap();
    let mut page: Vec<f64> = serde_json::from_value(lat[0].clone()).unwrap();
    let mut raw: Vec<f64> = serde_json::from_value(lat[1].clone()).unwrap();
    let (p50, p95) = (
        tuic_tests::percentile(&mut page, 0.5),
        tuic_tests::percentile(&mut page, 0.95),
    );
    let (r50, r95) = (
        tuic_tests::percentile(&mut raw, 0.5),
        tuic_tests::percentile(&mut raw, 0.95),
    );
    println!(
        "typing latency ({target}) over {} keys: keydown → DOM p50 {p50:.1} / p95 {p95:.1} ms; keydown → raw echo p50 {r50:.1} / p95 {r95:.1} ms",
        page.len()
    );
}

/// A pending question is the session's state: a page opened after it appeared, and the same
/// page reloaded, show its answers (today they show only if the question arrives while the page
/// watches).
#[tokio::test]
async fn reload_shows_the_pending_questions_buttons() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create(
        &node,
        json!({"rows": 24, "cols": 60, "shell": "/bin/sh", "cwd": "/tmp", "args": ["-c",
            "printf '\\n Do you want to proceed?\\n  1. Yes\\n  2. No\\n'; read a; printf '\\033[2J\\033[H'; echo \"answered:$a\"; read z"]}),
    )
    .await;
    // The question is on the node's row before any page opens.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let rows = tuic_tests::ipc(&node.socket, "GET", "/sessions", None)
            .await
            .unwrap()
            .json();
        if rows[0]["question"]["options"] == json!(["Yes", "No"]) {
            break;
        }
        assert!(Instant::now() < deadline, "no question on the row: {rows}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    let shown = "!document.getElementById('chips').hidden && document.querySelectorAll('#chips button.choice').length === 2";
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(shown, 15_000).await.unwrap();
    b.eval("location.reload(); return true", json!([]))
        .await
        .unwrap();
    b.wait_for(
        "document.readyState === 'complete' && document.getElementById('screen').textContent.includes('proceed')",
        15_000,
    )
    .await
    .unwrap();
    b.wait_for(shown, 15_000).await.unwrap();
    b.screenshot(&artifacts_dir().join("phone-question-after-reload.png"))
        .await
        .unwrap();
    b.click(
        &b.find("#chips button.choice[data-reply='1']")
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('answered:1')",
        15_000,
    )
    .await
    .unwrap();
}

/// Row geometry of the screen view: rows tile (each starts where the one above ends) and every
/// run's painted box is as tall as its row, so there are no thin lines between rows.
const ROWS_TILE: &str = "const rows = [...document.querySelectorAll('#screen .row')];
    const gaps = [];
    for (let i = 1; i < rows.length; i++) {
      const a = rows[i - 1].getBoundingClientRect(), b = rows[i].getBoundingClientRect();
      if (Math.abs(b.top - a.bottom) > 0.01) gaps.push(['row', i, a.bottom, b.top]);
    }
    for (const [i, r] of rows.entries()) {
      const h = r.getBoundingClientRect().height;
      for (const s of r.querySelectorAll(':scope > span')) {
        if (!s.style.backgroundColor) continue;
        const sh = s.getBoundingClientRect();
        if (Math.abs(sh.height - h) > 0.01 || Math.abs(sh.top - r.getBoundingClientRect().top) > 0.01) gaps.push(['run', i, h, sh.height]);
      }
    }
    return {rows: rows.length, gaps: gaps.slice(0, 5), n: gaps.length};";

/// The phone toolbar and key bar, and box drawing with no row gaps: Find and Copy are on screen
/// at 390 px (no "Finc", no off-screen Copy), the key bar has Enter, Home/End, PgUp/PgDn and an
/// F-key page and says when it scrolls; mc, htop (F-key page shown) and vim tile their rows.
/// Screenshots in `tests/artifacts/phone-{mc,htop,vim}.png`.
#[tokio::test]
async fn phone_toolbar_keys_and_box_drawing_without_row_gaps() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    let programs = [
        ("mc", "exec mc", "Left"),
        ("htop", "exec htop", "PID"),
        ("vim", "exec vim -u NONE -N -n -i NONE", "VIM"),
    ];
    let mut first = true;
    for (name, cmd, mark) in programs {
        if name != "vim"
            && std::process::Command::new("which")
                .arg(name)
                .output()
                .is_ok_and(|o| !o.status.success())
        {
            panic!("{name} is not installed (tests/run-all.sh installs it)");
        }
        let sid = create(
            &node,
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
                   "args": ["-c", cmd], "env": {"TERM": "xterm-256color"}}),
        )
        .await;
        b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
        b.wait_for(
            &format!("document.getElementById('screen').textContent.includes({mark:?})"),
            20_000,
        )
        .await
        .unwrap();
        let tile = b.eval(ROWS_TILE, json!([])).await.unwrap();
        assert_eq!(tile["rows"], 24, "{name}: {tile}");
        assert_eq!(tile["n"], 0, "{name}: rows do not tile: {tile}");
        if first {
            first = false;
            let bar = b
                .eval(
                    "const vw = innerWidth, r = (id) => document.getElementById(id).getBoundingClientRect();
                     const keys = [...document.querySelectorAll('#keys button')].map(k => k.dataset.key);
                     return {find: r('find').width, find_right: r('find').right, copy_left: r('copy').left,
                             copy_right: r('copy').right, vw, keys,
                             hint: document.getElementById('keys').classList.contains('more-right')}",
                    json!([]),
                )
                .await
                .unwrap();
            assert!(bar["find"].as_f64().unwrap() >= 80.0, "{bar}");
            assert!(
                bar["copy_right"].as_f64().unwrap() <= bar["vw"].as_f64().unwrap(),
                "Copy off screen: {bar}"
            );
            for k in ["Enter", "Home", "End", "PgUp", "PgDn", "Fn"] {
                assert!(
                    bar["keys"].as_array().unwrap().contains(&json!(k)),
                    "{k}: {bar}"
                );
            }
            assert_eq!(bar["hint"], true, "the bar scrolls and shows it: {bar}");
        }
        if name == "htop" {
            b.click(&b.find("#keys button[data-key='Fn']").await.unwrap())
                .await
                .unwrap();
            let keys = b
                .eval(
                    "return [...document.querySelectorAll('#keys button')].map(k => k.dataset.key)",
                    json!([]),
                )
                .await
                .unwrap();
            for i in 1..=10 {
                assert!(
                    keys.as_array().unwrap().contains(&json!(format!("F{i}"))),
                    "{keys}"
                );
            }
        }
        b.screenshot(&artifacts_dir().join(format!("phone-{name}.png")))
            .await
            .unwrap();
        if name == "htop" {
            // F10 from the F-key page quits htop.
            b.click(&b.find("#keys button[data-key='F10']").await.unwrap())
                .await
                .unwrap();
            b.wait_for("!document.getElementById('exit-note').hidden", 15_000)
                .await
                .unwrap();
            b.click(&b.find("#keys button[data-key='Fn']").await.unwrap())
                .await
                .unwrap();
        }
    }
}

/// The size policy seen from a desktop: a phone's Fit shows on the desktop while the phone
/// stays (screenshot `tests/artifacts/desktop-with-phone.png`), and when the phone leaves the
/// desktop gets the size before back (today it stays phone-width).
#[tokio::test]
async fn desktop_gets_its_size_back_when_the_fitting_phone_leaves() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create(
        &node,
        json!({"rows": 30, "cols": 100, "shell": "/bin/sh", "cwd": "/tmp",
               "args": ["-c", "exec htop"], "env": {"TERM": "xterm-256color"}}),
    )
    .await;
    let desk = Browser::launch(1280, 800).await.unwrap();
    desk.set_viewport(1280, 800, false).await.unwrap();
    login(&desk, &base).await;
    desk.goto(&format!("{base}/#/s/{sid}")).await.unwrap();
    desk.wait_for(
        "document.getElementById('screen').dataset.cols === '100'",
        20_000,
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
            "document.getElementById('screen').dataset.cols === '100'",
            20_000,
        )
        .await
        .unwrap();
    phone
        .click(&phone.find("#fit").await.unwrap())
        .await
        .unwrap();
    desk.wait_for(
        "document.getElementById('screen').dataset.cols !== '100'",
        20_000,
    )
    .await
    .unwrap();
    let cols: u32 = desk
        .eval(
            "return document.getElementById('screen').dataset.cols",
            json!([]),
        )
        .await
        .unwrap()
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(cols < 60, "the phone's width: {cols}");
    desk.wait_for(
        "document.getElementById('screen').textContent.includes('PID')",
        10_000,
    )
    .await
    .unwrap();
    desk.screenshot(&artifacts_dir().join("desktop-with-phone.png"))
        .await
        .unwrap();
    phone
        .screenshot(&artifacts_dir().join("phone-fitted-htop.png"))
        .await
        .unwrap();
    drop(phone);
    desk.wait_for(
        "document.getElementById('screen').dataset.cols === '100' && document.getElementById('screen').dataset.rows === '30'",
        20_000,
    )
    .await
    .unwrap();
}
