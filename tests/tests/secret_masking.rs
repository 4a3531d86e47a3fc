//! Redaction by value (issue 47): a stored secret's value that a program prints into a
//! terminal by another path than `secret run` (a `cat` of a file holding it, split across
//! reads too) never reaches an output page, a screen frame (WS stream, screen sync, the
//! snapshot), the log ring, the audit, the store (the journal lives there) or the secret
//! store file — before and after a restart (the set is published again from the vault).

use std::path::Path;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tuic_tests::bed::ipc_ok;
use tuic_tests::{NodeProc, config_dir, ipc};

const VALUE: &str = "tok-4b1d2c3e9f8a-PRINTED";

fn start(dir: &Path) -> NodeProc {
    NodeProc::start("tuic-node", &["--config-dir", dir.to_str().unwrap()], &[]).unwrap()
}

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::UnixStream>;

async fn ws(socket: &Path, id: &str, query: &str) -> Ws {
    let s = tokio::net::UnixStream::connect(socket).await.unwrap();
    let url = format!("ws://localhost/sessions/{id}/stream{query}");
    tokio_tungstenite::client_async(url, s).await.unwrap().0
}

/// Every frame of `ws` (text and binary, as bytes) until one contains `marker` (bounded).
async fn frames_until(ws: &mut Ws, marker: &str, screen: bool) -> Vec<u8> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut got = Vec::new();
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .unwrap_or_else(|_| panic!("{marker} never arrived: {}", String::from_utf8_lossy(&got)))
            .expect("stream open")
            .unwrap();
        let bytes = match msg {
            Message::Binary(b) => b.to_vec(),
            Message::Text(t) => {
                // A screen stream's frames are acknowledged, as a screen client does.
                let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                if screen && let Some(seq) = v["seq"].as_u64() {
                    let ack = json!({"type": "ack", "seq": seq}).to_string();
                    ws.send(Message::Text(ack.into())).await.unwrap();
                }
                t.as_bytes().to_vec()
            }
            _ => continue,
        };
        got.extend_from_slice(&bytes);
        // The marker is printed by an arithmetic expansion, so the typed command never holds it.
        if String::from_utf8_lossy(&got).contains(marker) {
            return got;
        }
    }
}

fn hits(hay: &[u8], needle: &str) -> usize {
    hay.windows(needle.len())
        .filter(|w| *w == needle.as_bytes())
        .count()
}

/// Prints the value three ways (whole, split across two writes with a pause, inside a line
/// with other text) and collects every surface.
async fn print_and_collect(n: &NodeProc, files: &Path, round: u32) -> Vec<(String, Vec<u8>)> {
    let socket = &n.socket;
    let id = ipc_ok(
        socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 24, "cols": 100, "shell": "/bin/sh"})),
    )
    .await["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut raw = ws(socket, &id, "").await;
    let mut screen = ws(socket, &id, "?mode=screen").await;
    let dir = files.to_str().unwrap();
    let marker = format!("done-{}", 40 + round);
    let cmd = format!(
        "cat {dir}/whole; cat {dir}/head; sleep 0.3; cat {dir}/tail; echo \"x=$(cat {dir}/whole)=y\"; echo done-$((40+{round}))\n"
    );
    ipc_ok(
        socket,
        "POST",
        &format!("/sessions/{id}/write"),
        Some(json!({"data": cmd})),
    )
    .await;
    let mut places = vec![
        (
            "ws raw".to_owned(),
            frames_until(&mut raw, &marker, false).await,
        ),
        (
            "ws screen".to_owned(),
            frames_until(&mut screen, &marker, true).await,
        ),
    ];
    for fmt in ["raw", "text", "log", "mcp"] {
        places.push((
            format!("output {fmt}"),
            ipc(
                socket,
                "GET",
                &format!("/sessions/{id}/output?format={fmt}"),
                None,
            )
            .await
            .unwrap()
            .body
            .to_vec(),
        ));
    }
    for path in [
        format!("/sessions/{id}/terminal/snapshot"),
        "/logs".to_owned(),
        "/audit?limit=1000".to_owned(),
        "/sessions".to_owned(),
    ] {
        let body = ipc(socket, "GET", &path, None).await.unwrap().body.to_vec();
        places.push((path, body));
    }
    // The masked bytes are there in the value's place (same length, so offsets hold).
    let text = String::from_utf8_lossy(&places[2].1).into_owned();
    assert!(
        text.contains(&format!("x={}=y", "*".repeat(VALUE.len()))),
        "{text}"
    );
    places
}

#[tokio::test]
async fn a_secret_value_printed_into_a_terminal_reaches_no_surface_even_after_a_restart() {
    let d = config_dir(json!({}));
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("whole"), format!("{VALUE}\n")).unwrap();
    let (head, tail) = VALUE.split_at(10);
    std::fs::write(files.path().join("head"), head).unwrap();
    std::fs::write(files.path().join("tail"), format!("{tail}\n")).unwrap();

    let mut n = start(d.path());
    ipc_ok(
        &n.socket,
        "PUT",
        "/secrets/DEPLOY_TOKEN",
        Some(json!({"value": VALUE})),
    )
    .await;
    let mut places = print_and_collect(&n, files.path(), 1).await;

    // A restart: the set comes back from the (encrypted) vault before any session reads.
    n.terminate().unwrap();
    let n = start(d.path());
    places.extend(print_and_collect(&n, files.path(), 2).await);

    for f in ["state.redb", "secrets.json", "config.json"] {
        places.push((f.to_owned(), std::fs::read(d.path().join(f)).unwrap()));
    }
    places.push(("stderr".to_owned(), n.log_text().into_bytes()));
    for (what, bytes) in &places {
        assert_eq!(hits(bytes, VALUE), 0, "the value appears in {what}");
        // Not even its longer pieces (a split read lets at most 3 leading bytes through).
        assert_eq!(hits(bytes, &VALUE[3..]), 0, "a piece appears in {what}");
    }

    // Removed: no longer a secret, so no longer masked.
    ipc_ok(&n.socket, "DELETE", "/secrets/DEPLOY_TOKEN", None).await;
    let id = ipc_ok(
        &n.socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 24, "cols": 100, "shell": "/bin/sh"})),
    )
    .await["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut raw = ws(&n.socket, &id, "").await;
    ipc_ok(
        &n.socket,
        "POST",
        &format!("/sessions/{id}/write"),
        Some(
            json!({"data": format!("cat {}/whole; echo done-$((6*7))\n", files.path().display())}),
        ),
    )
    .await;
    let got = frames_until(&mut raw, "done-42", false).await;
    assert!(hits(&got, VALUE) >= 1, "{}", String::from_utf8_lossy(&got));
}
