//! Browser tests: Debian's headless Chromium, phone-sized, against a real node over TCP.

use serde_json::json;
use tuic_tests::NodeProc;
use tuic_tests::bed::{self, PASSWORD, login, login_to};
use tuic_tests::webdriver::{Browser, artifacts_dir};

fn remote_node() -> (tempfile::TempDir, NodeProc) {
    remote_node_on("0", &[])
}

/// A node with remote access on loopback, asked for `port`, with `extra` flags.
fn remote_node_on(port: &str, extra: &[&str]) -> (tempfile::TempDir, NodeProc) {
    bed::remote_proc("tuic-node", json!({"secret_store": "file"}), port, extra)
}

#[tokio::test]
async fn login_wrong_then_right_password_lands_on_mobile() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let b = Browser::launch(390, 844).await.unwrap();
    b.goto(&format!("{base}/mobile")).await.unwrap();
    assert!(
        b.url()
            .await
            .unwrap()
            .contains("/mobile/login?next=%2Fmobile"),
        "{}",
        b.url().await.unwrap()
    );
    let pw = b.find("#password").await.unwrap();
    b.type_text(&pw, "wrong").await.unwrap();
    b.click(&b.find("button[type=submit]").await.unwrap())
        .await
        .unwrap();
    b.wait_for("document.getElementById('error') && document.getElementById('error').textContent.includes('Wrong')", 10_000)
        .await
        .unwrap();
    b.screenshot(&artifacts_dir().join("login-error-phone.png"))
        .await
        .unwrap();
    let pw = b.find("#password").await.unwrap();
    b.clear(&pw).await.unwrap();
    b.type_text(&pw, PASSWORD).await.unwrap();
    b.click(&b.find("button[type=submit]").await.unwrap())
        .await
        .unwrap();
    b.wait_for(
        "location.pathname === '/mobile' && document.getElementById('sessions')",
        10_000,
    )
    .await
    .unwrap();
    b.wait_for(
        "document.getElementById('empty') && !document.getElementById('empty').hidden",
        10_000,
    )
    .await
    .unwrap();
    b.screenshot(&artifacts_dir().join("sessions-empty-phone.png"))
        .await
        .unwrap();
    // The page is usable at phone width: nothing overflows horizontally.
    let overflow = b
        .eval(
            "return document.documentElement.scrollWidth > window.innerWidth",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(overflow, json!(false));
}

/// A node on a taken port (the spec's retry bound the next one): its login page names the node
/// (host name and instance) and says which port was asked for and which serves, so a bookmark
/// that reaches another node's page is not mistaken for this one; the header of every page
/// (phone and desktop, list and session view) names the node too.
#[tokio::test]
async fn a_taken_port_and_the_node_are_named_on_the_login_page_and_in_every_header() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let asked = taken.local_addr().unwrap().port();
    let (_d, node) = remote_node_on(&asked.to_string(), &["--instance", "pagecheck"]);
    let served = node.tcp.unwrap().port();
    assert_ne!(served, asked);
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let base = format!("http://{}", node.tcp.unwrap());
    let b = Browser::launch(390, 844).await.unwrap();
    b.goto(&format!("{base}/mobile")).await.unwrap();
    let named = |id: &str| {
        format!(
            "(document.getElementById('{id}')?.textContent ?? '').includes({host:?}) && document.getElementById('{id}').textContent.includes('pagecheck')"
        )
    };
    b.wait_for(&named("node"), 10_000).await.unwrap();
    let note = b
        .eval(
            "return document.getElementById('port-note')?.textContent ?? ''",
            json!([]),
        )
        .await
        .unwrap();
    let note = note.as_str().unwrap();
    assert!(
        note.contains(&format!("port {asked}")) && note.contains(&format!("port {served}")),
        "{note}"
    );
    b.screenshot(&artifacts_dir().join("login-taken-port-phone.png"))
        .await
        .unwrap();
    let pw = b.find("#password").await.unwrap();
    b.type_text(&pw, PASSWORD).await.unwrap();
    b.click(&b.find("button[type=submit]").await.unwrap())
        .await
        .unwrap();
    b.wait_for("location.pathname === '/mobile'", 10_000)
        .await
        .unwrap();
    b.wait_for(&named("node-name"), 10_000).await.unwrap();
    // The session view keeps the same header; the desktop page names the node as well.
    let sid = create_session(&node).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    view_ready(&b).await;
    b.wait_for(&named("node-name"), 10_000).await.unwrap();
    b.goto(&format!("{base}/")).await.unwrap();
    b.wait_for(&named("node-name"), 10_000).await.unwrap();
    drop(taken);
}

async fn create_session(node: &NodeProc) -> String {
    bed::create_shell(node).await
}

/// Waits until the session view shows and its history has loaded.
async fn view_ready(b: &Browser) {
    b.wait_for("!document.getElementById('session-view').hidden && document.getElementById('history-loading').hidden", 10_000)
        .await
        .unwrap();
}

/// Taps the answer `button` of a question, waits for the program's `answered` line on the
/// screen, and checks the answers are gone.
async fn tap_answer(b: &Browser, button: &str, answered: &str) {
    b.click(&b.find(button).await.unwrap()).await.unwrap();
    b.wait_for(
        &format!("document.getElementById('screen').textContent.includes({answered:?})"),
        10_000,
    )
    .await
    .unwrap();
    assert_eq!(
        b.eval("return document.getElementById('chips').hidden", json!([]))
            .await
            .unwrap(),
        json!(true)
    );
}

/// Types `data` into session `sid`'s PTY through the node's REST route.
async fn write(node: &NodeProc, sid: &str, data: &str) -> tuic_tests::Reply {
    tuic_tests::ipc(
        &node.socket,
        "POST",
        &format!("/sessions/{sid}/write"),
        Some(json!({ "data": data })),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn list_live_view_and_input_line() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create_session(&node).await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    let row = format!("#sessions a[data-session='{sid}']");
    b.wait_for(&format!("document.querySelector(\"{row}\")"), 10_000)
        .await
        .unwrap();
    b.screenshot(&artifacts_dir().join("sessions-list-phone.png"))
        .await
        .unwrap();
    b.click(&b.find(&row).await.unwrap()).await.unwrap();
    b.wait_for("!document.getElementById('session-view').hidden", 5_000)
        .await
        .unwrap();
    // Output produced before the page opened is in the history.
    write(&node, &sid, "printf '\\033[31mred-%s\\033[0m\\n' before\n").await;
    b.wait_for(
        "document.getElementById('screen').textContent.includes('red-before')",
        10_000,
    )
    .await
    .unwrap();
    // ANSI colours are rendered, not shown as escape codes.
    let coloured = b
        .eval(
            "return [...document.querySelectorAll('#screen span')].some(s => s.textContent.includes('red-before') && s.style.color !== '')",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(coloured, json!(true));
    assert_eq!(
        b.eval(
            "return document.getElementById('screen').textContent.includes('\\x1b')",
            json!([])
        )
        .await
        .unwrap(),
        json!(false)
    );
    // The input line writes to the PTY; the echo comes back live over the WebSocket.
    let line = b.find("#line").await.unwrap();
    b.type_text(&line, "echo typed-$((40+2))\u{E007}")
        .await
        .unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('typed-42')",
        10_000,
    )
    .await
    .unwrap();
    // Sent once: the command line appears exactly once in the output.
    let count = b
        .eval("return document.getElementById('screen').textContent.split('echo typed-$((40+2))').length - 1", json!([]))
        .await
        .unwrap();
    assert_eq!(count, json!(1));
    b.screenshot(&artifacts_dir().join("session-view-phone.png"))
        .await
        .unwrap();
    // The History tab keeps the byte view of the output, colours rendered.
    b.click(&b.find("#tab-history").await.unwrap())
        .await
        .unwrap();
    b.wait_for(
        "!document.getElementById('term').hidden && document.getElementById('screen').hidden && document.getElementById('term').textContent.includes('typed-42') && [...document.querySelectorAll('#term span')].some(s => s.textContent.includes('red-before') && s.style.color !== '')",
        10_000,
    )
    .await
    .unwrap();
    b.click(&b.find("#tab-screen").await.unwrap())
        .await
        .unwrap();
    // An Enter that commits an IME composition does not send the line.
    let kept = b
        .eval(
            "const i = document.getElementById('line'); i.value = 'ime-draft';
             i.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', isComposing: true, bubbles: true}));
             i.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', keyCode: 229, bubbles: true}));
             return i.value",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(kept, json!("ime-draft"));
}

#[tokio::test]
async fn desktop_layout_shows_list_and_session_side_by_side() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create_session(&node).await;
    let b = Browser::launch(1280, 800).await.unwrap();
    login_to(&b, &base, "/").await;
    b.wait_for("document.body.classList.contains('desktop')", 10_000)
        .await
        .unwrap();
    b.goto(&format!("{base}/#/s/{sid}")).await.unwrap();
    b.wait_for("!document.getElementById('session-view').hidden && !document.getElementById('list-view').hidden", 10_000)
        .await
        .unwrap();
    let side_by_side = b
        .eval(
            "const l = document.getElementById('list-view').getBoundingClientRect();
             const s = document.getElementById('session-view').getBoundingClientRect();
             return l.right <= s.left && l.width > 0 && s.width > 0",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(side_by_side, json!(true));
    b.screenshot(&artifacts_dir().join("desktop.png"))
        .await
        .unwrap();
}

#[tokio::test]
async fn view_reconnects_after_the_node_restarts() {
    let (d, mut node) = remote_node();
    let dir = d.path().to_str().unwrap().to_owned();
    let start = |port: &str| bed::start_remote("tuic-node", &dir, port, &[]);
    let port = node.tcp.unwrap().port().to_string();
    let base = format!("http://127.0.0.1:{port}");
    let sid = create_session(&node).await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    b.wait_for(
        "document.getElementById('term') && !document.getElementById('session-view').hidden",
        10_000,
    )
    .await
    .unwrap();
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    b.wait_for("!document.getElementById('banner').hidden && document.getElementById('banner').textContent.includes('reconnecting')", 15_000)
        .await
        .unwrap();
    b.screenshot(&artifacts_dir().join("reconnecting-phone.png"))
        .await
        .unwrap();
    // Output written while the node is down is kept by the session's holder.
    let late = "echo late-$((20+1))\n";
    let node = start(&port);
    // The session outlived the node: the view reconnects to it (the banner goes) and streams
    // on from its offset, the output written meanwhile included.
    b.wait_for("document.getElementById('banner').hidden", 30_000)
        .await
        .unwrap();
    let r = write(&node, &sid, late).await;
    assert_eq!(r.status, 200);
    b.wait_for(
        "document.getElementById('screen').textContent.includes('late-21')",
        15_000,
    )
    .await
    .unwrap();
    // The login survived the restart and the list recovers with the new node's sessions.
    let fresh = create_session(&node).await;
    b.goto(&format!("{base}/mobile")).await.unwrap();
    b.wait_for(
        &format!("document.querySelector(\"#sessions a[data-session='{fresh}']\")"),
        15_000,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn quick_reply_chip_answers_a_question() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create_session(&node).await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    view_ready(&b).await;
    // A script asks a question once the view is live.
    let script = "printf 'Deploy now? (y/n) '; read a; echo \"answered:$a\"\n";
    write(&node, &sid, script).await;
    b.wait_for("!document.getElementById('chips').hidden && document.querySelector('#chips button[data-reply=\"y\"]')", 15_000)
        .await
        .unwrap();
    b.screenshot(&artifacts_dir().join("quick-reply-phone.png"))
        .await
        .unwrap();
    tap_answer(&b, "#chips button[data-reply='y']", "answered:y").await;
}

/// An agent's approval menu (Claude Code's shape: a box, the question, `❯ 1.` choices): the
/// page shows the whole question and each numbered choice as a large button, well apart; the
/// tapped choice's digit reaches the PTY (alone: a `❯` selector answers on the key).
#[tokio::test]
async fn approval_menu_shows_the_whole_question_and_large_choices_and_the_answer_reaches_the_pty() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let sid = create_session(&node).await;
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{sid}")).await.unwrap();
    view_ready(&b).await;
    // The menu, then one key read raw (no Enter), as a selector does.
    let script = concat!(
        "printf '╭──────────────────────╮\\n│ Edit file src/foo.rs │\\n╰──────────────────────╯\\n",
        " Do you want to make this edit to foo.rs?\\n",
        " ❯ 1. Yes\\n   2. Yes, and don'\"'\"'t ask again this session\\n",
        "   3. No, and tell Claude what to do differently (esc)\\n'; ",
        "stty raw -echo; a=$(dd bs=1 count=1 2>/dev/null); stty sane; echo; echo \"answered:[$a]\"\n"
    );
    write(&node, &sid, script).await;
    b.wait_for(
        "!document.getElementById('chips').hidden && document.querySelectorAll('#chips button.choice').length === 3",
        15_000,
    )
    .await
    .unwrap();
    let shown = b
        .eval(
            "const box = document.getElementById('chips');
             const q = box.querySelector('.question');
             const r = [...box.querySelectorAll('button.choice')].map(x => x.getBoundingClientRect());
             const labels = [...box.querySelectorAll('button.choice')].map(x => x.textContent);
             const qr = q.getBoundingClientRect();
             return {question: q.textContent, labels,
                     tall: r.every(x => x.height >= 44), wide: r.every(x => x.width >= 300),
                     apart: r.slice(1).every((x, i) => x.top - r[i].bottom >= 8),
                     on_screen: [qr, ...r].every(x => x.top >= 0 && x.bottom <= innerHeight)}",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(
        shown["question"], "Do you want to make this edit to foo.rs?",
        "{shown}"
    );
    assert_eq!(
        shown["labels"],
        json!([
            "1. Yes",
            "2. Yes, and don't ask again this session",
            "3. No, and tell Claude what to do differently (esc)"
        ]),
        "{shown}"
    );
    for k in ["tall", "wide", "apart", "on_screen"] {
        assert_eq!(shown[k], true, "{k}: {shown}");
    }
    b.screenshot(&artifacts_dir().join("approval-menu-phone.png"))
        .await
        .unwrap();
    tap_answer(&b, "#chips button.choice[data-reply='2']", "answered:[2]").await;
}

#[tokio::test]
async fn hub_shows_a_remote_nodes_session_and_streams_it() {
    // Node B with remote access on loopback; the hub connects to it with B's token.
    let (nd, node) = remote_node();
    let (_hd, hub) = bed::hub_connected_to(nd.path(), &node, "boxb");
    let sid = create_session(&node).await;
    let address = format!("boxb/{sid}");
    let b = Browser::launch(390, 844).await.unwrap();
    let base = format!("http://{}", hub.tcp.unwrap());
    login(&b, &base).await;
    let row = format!("#sessions a[data-session='{address}']");
    b.wait_for(&format!("document.querySelector(\"{row}\") && document.querySelector(\"{row}\").textContent.includes('boxb')"), 20_000)
        .await
        .unwrap();
    b.screenshot(&artifacts_dir().join("hub-remote-row-phone.png"))
        .await
        .unwrap();
    b.click(&b.find(&row).await.unwrap()).await.unwrap();
    view_ready(&b).await;
    let line = b.find("#line").await.unwrap();
    b.type_text(&line, "echo remote-$((5*5))\u{E007}")
        .await
        .unwrap();
    b.wait_for(
        "document.getElementById('screen').textContent.includes('remote-25')",
        15_000,
    )
    .await
    .unwrap();
}
