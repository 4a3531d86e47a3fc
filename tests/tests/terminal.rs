//! End-to-end tests of the terminal core: real `tuic-node`, real PTYs, HTTP and WebSocket
//! clients over the IPC socket.

use std::time::Duration;

use futures::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tuic_tests::records;
use tuic_tests::term::{Node, bin, drain_ws, read_until};

const T: Duration = Duration::from_secs(60);

/// A session running `script` under `sh` in raw mode with echo off. It prints `READY` once the
/// terminal is raw and then waits for "go\n", so a client sees exactly the script's bytes.
fn gated(script: &str) -> Value {
    json!({
        "rows": 24, "cols": 80, "shell": "/bin/sh",
        "args": ["-c", format!("stty raw -echo; printf READY; read go; {script}")],
        "cwd": "/tmp",
    })
}

/// Opens the stream from byte 0, waits for `READY`, and starts the gated script.
async fn start_gated(node: &Node, id: &str, query: &str) -> tuic_tests::term::Ws {
    let sep = if query.is_empty() { "?" } else { "&" };
    let mut ws = node
        .ws(id, &format!("{query}{sep}from_byte=0"))
        .await
        .unwrap();
    let got = read_until(&mut ws, b"READY", T).await.unwrap();
    assert_eq!(got, b"READY");
    node.write(id, "go\n").await.unwrap();
    ws
}

#[tokio::test]
async fn unknown_session_is_404_json_on_every_route() {
    let node = Node::start(None).await.unwrap();
    let routes = [
        ("POST", "/sessions/nope/write", Some(json!({"data": "x"}))),
        (
            "POST",
            "/sessions/nope/resize",
            Some(json!({"rows": 5, "cols": 5})),
        ),
        ("PUT", "/sessions/nope/name", Some(json!({"name": "n"}))),
        ("DELETE", "/sessions/nope", None),
        ("GET", "/sessions/nope/output", None),
        ("GET", "/sessions/nope/output?format=raw", None),
        ("GET", "/sessions/nope/raw-ring", None),
        ("GET", "/sessions/nope/terminal/scroll-info", None),
        ("GET", "/sessions/nope/terminal/lines?start=0&end=3", None),
        (
            "POST",
            "/sessions/nope/terminal/scroll-to-offset",
            Some(json!({"offset": 1})),
        ),
        ("GET", "/sessions/nope/stream", None),
    ];
    for (m, p, b) in routes {
        let a = node.http(m, p, b).await.unwrap();
        assert_eq!(a.status, 404, "{m} {p}");
        let v = a.json();
        assert!(
            v["error"].as_str().is_some_and(|e| e.contains("nope")),
            "{m} {p}: {v}"
        );
    }
    // A WebSocket handshake to an unknown session is refused too.
    assert!(node.ws("nope", "").await.is_err());
}

#[tokio::test]
async fn lifecycle_addresses_events_errors_and_tombstone() {
    let node = Node::start(Some(json!({"tuning": {"tombstone_secs": 2}})))
        .await
        .unwrap();
    let mut ev = node.events("").await.unwrap();
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path().join("my-cool_app");
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    let c = node
        .create(json!({
            "rows": 10, "cols": 40, "shell": "/bin/sh",
            "args": ["-c", "stty -echo; echo \"S=$TUIC_SESSION T=$TERM\"; read line; exit 7"],
            "cwd": dir.join(".git").display().to_string(), "name": "worker",
        }))
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let tuic = c["tuic_session"].as_str().unwrap().to_owned();
    assert_eq!(c["alias"], "mca-1");

    let (name, data) = ev.next(T).await.unwrap();
    assert_eq!(name, "session-created");
    assert_eq!(data["session_id"], id.as_str());
    assert_eq!(data["tuic_session"], tuic.as_str());
    assert_eq!(data["display_name"], "worker");
    assert!(data.get("agent_type").is_none(), "{data}");
    let (name, data) = ev.next(T).await.unwrap();
    assert_eq!(
        (name.as_str(), &data["alias"]),
        ("term-alias-assigned", &json!("mca-1"))
    );

    // Every route accepts all three addresses.
    for addr in [id.as_str(), tuic.as_str(), "mca-1"] {
        let info = node
            .ok(
                "GET",
                &format!("/sessions/{addr}/terminal/scroll-info"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(info["screen_lines"], 10);
    }
    let health = node.ok("GET", "/health", None).await.unwrap();
    assert_eq!(health["session_count"], 1);

    // Rename: validated, evented.
    let bad = node
        .http("PUT", "/sessions/mca-1/name", Some(json!({"name": "a\nb"})))
        .await
        .unwrap();
    assert_eq!(bad.status, 400);
    node.ok(
        "PUT",
        "/sessions/mca-1/name",
        Some(json!({"name": "renamed"})),
    )
    .await
    .unwrap();
    let (name, data) = ev.next(T).await.unwrap();
    assert_eq!(name, "session-renamed");
    assert_eq!(
        (data["name"].clone(), data["is_custom"].clone()),
        (json!("renamed"), json!(true))
    );

    // Resize to zero rows is refused.
    let a = node
        .http(
            "POST",
            "/sessions/mca-1/resize",
            Some(json!({"rows": 0, "cols": 80})),
        )
        .await
        .unwrap();
    assert_eq!(a.status, 400);
    assert!(a.json()["error"].is_string());

    // The child sees its identity and terminal type.
    let mut ws = node.ws(&id, "?format=text&from_byte=0").await.unwrap();
    node.write(&id, "bye\n").await.unwrap();
    let got = drain_ws(&mut ws, T).await.unwrap();
    let text = String::from_utf8_lossy(&got.bytes);
    assert!(
        text.contains(&format!("S={tuic} T=xterm-256color")),
        "{text}"
    );
    assert_eq!(got.exit.unwrap()["exit_code"], 7);

    let (name, data) = ev.next(T).await.unwrap();
    assert_eq!((name.as_str(), &data["exit_code"]), ("pty-exit", &json!(7)));
    let (name, _) = ev.next(T).await.unwrap();
    assert_eq!(name, "session-closed");

    // Exited: gone from the list, output still answers with the exit code, input refused.
    let rows = node.ok("GET", "/sessions", None).await.unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 0);
    let out = node
        .ok("GET", &format!("/sessions/{id}/output?format=text"), None)
        .await
        .unwrap();
    assert_eq!(out["exit_code"], 7);
    let w = node
        .http(
            "POST",
            &format!("/sessions/{id}/write"),
            Some(json!({"data": "x"})),
        )
        .await
        .unwrap();
    assert_eq!(w.status, 409);
    assert!(w.json()["error"].as_str().unwrap().contains("exited"));

    // The alias is free again; a restored alias is kept when free, replaced when malformed.
    let r = node
        .create(
            json!({"shell": "/bin/sh", "args": ["-c", "read x"], "cwd": "/tmp", "alias": "tm-9"}),
        )
        .await
        .unwrap();
    assert_eq!(r["alias"], "tm-9");
    let r2 = node
        .create(
            json!({"shell": "/bin/sh", "args": ["-c", "read x"], "cwd": "/tmp", "alias": "tm-9"}),
        )
        .await
        .unwrap();
    assert_eq!(r2["alias"], "tm-10");
    let r3 = node
        .create(
            json!({"shell": "/bin/sh", "args": ["-c", "read x"], "cwd": "/tmp", "alias": "../x"}),
        )
        .await
        .unwrap();
    assert_eq!(r3["alias"], "tm-11");
    // DELETE ends the process.
    let mut ws = node
        .ws(r3["session_id"].as_str().unwrap(), "")
        .await
        .unwrap();
    node.ok("DELETE", "/sessions/tm-11", None).await.unwrap();
    assert!(drain_ws(&mut ws, T).await.unwrap().exit.is_some());

    // After the tombstone period the exited session is unknown (bounded poll: expiry is a timer).
    let mut gone = false;
    for _ in 0..100 {
        if node
            .http("GET", &format!("/sessions/{id}/output"), None)
            .await
            .unwrap()
            .status
            == 404
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "tombstone did not expire");
}

#[tokio::test]
async fn records_survive_fragmentation_sync_frames_overwrites_resizes_and_scrolling() {
    let node = Node::start(None).await.unwrap();
    let n = 2000;
    let producer = bin("producer").display().to_string();
    let c = node
        .create(gated(&format!("exec {producer} records {n} 7")))
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut ws = start_gated(&node, &id, "?binary=1").await;

    // Resize and scroll every 20 ms while the producer runs.
    let stop = tokio_util_token();
    let n2 = node.client();
    let stop2 = stop.clone();
    let id2 = id.clone();
    let churn = tokio::spawn(async move {
        let mut rng = records::Rng::new(99);
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        let mut ops = 0;
        while !stop2.load(std::sync::atomic::Ordering::Acquire) && ops < 5000 {
            tick.tick().await;
            let rows = rng.range(5, 40);
            let cols = rng.range(50, 140);
            let _ = n2
                .http(
                    "POST",
                    &format!("/sessions/{id2}/resize"),
                    Some(json!({"rows": rows, "cols": cols})),
                )
                .await;
            let off = rng.range(0, 200);
            let _ = n2
                .http(
                    "POST",
                    &format!("/sessions/{id2}/terminal/scroll-to-offset"),
                    Some(json!({"offset": off})),
                )
                .await;
            ops += 1;
        }
        ops
    });
    let got = drain_ws(&mut ws, T * 3).await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::Release);
    let ops = churn.await.unwrap();
    assert!(got.exit.is_some());
    assert!(ops > 0);

    // Every byte reached the stream, and the raw ring holds all of it (< 2 MiB).
    let expected: Vec<u8> = records::record_fragments(n, 7).concat();
    assert_eq!(got.bytes.len(), expected.len());
    assert!(got.bytes == expected, "stream bytes differ");
    let ring = node
        .http("GET", &format!("/sessions/{id}/raw-ring"), None)
        .await
        .unwrap();
    assert_eq!(ring.status, 200);
    assert!(
        ring.body[..] == [b"READY".as_slice(), &expected].concat()[..],
        "raw ring differs"
    );

    // Terminal rows 0..total_lines: every record exactly once, whole.
    let info = node
        .ok("GET", &format!("/sessions/{id}/terminal/scroll-info"), None)
        .await
        .unwrap();
    let total = info["total_lines"].as_u64().unwrap();
    let mut rows = Vec::new();
    let mut start = 0;
    while start < total {
        let end = (start + 500).min(total);
        let page = node
            .ok(
                "GET",
                &format!("/sessions/{id}/terminal/lines?start={start}&end={end}"),
                None,
            )
            .await
            .unwrap();
        rows.extend(
            page["lines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap().to_owned()),
        );
        start = end;
    }
    let recs: Vec<&String> = rows.iter().filter(|r| r.contains("REC ")).collect();
    let want: Vec<String> = (0..n).map(records::record_text).collect();
    assert_eq!(recs.len(), n, "records on the grid: {}", recs.len());
    for (got, want) in recs.iter().zip(&want) {
        assert_eq!(*got, want);
    }
}

fn tokio_util_token() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false))
}

#[tokio::test]
async fn bulk_cat_reaches_the_stream_byte_exact_including_the_tail_before_exit() {
    let node = Node::start(None).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Binary frames: 8 MiB (CI bound), byte-exact.
    let data = records::payload(8 << 20, false, 3);
    let f = dir.path().join("big.txt");
    std::fs::write(&f, &data).unwrap();
    let c = node
        .create(gated(&format!("cat {}; printf TAIL-END", f.display())))
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut ws = start_gated(&node, &id, "?binary=1").await;
    let got = drain_ws(&mut ws, T * 3).await.unwrap();
    let mut want = data.clone();
    want.extend_from_slice(b"TAIL-END");
    assert_eq!(got.bytes.len(), want.len());
    assert!(got.bytes == want, "bytes differ");
    assert!(!got.output_after_exit);
    assert!(
        got.other.iter().all(|v| v["type"] != "lagged"),
        "{:?}",
        got.other
    );
    assert_eq!(got.exit.unwrap()["exit_code"], 0);

    // JSON frames: UTF-8 decoded with state across reads, nothing mangled.
    let text = records::payload(1 << 20, true, 5);
    let f = dir.path().join("utf8.txt");
    std::fs::write(&f, &text).unwrap();
    let c = node
        .create(gated(&format!("cat {}", f.display())))
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut ws = node.ws(&id, "?from_byte=0").await.unwrap();
    read_until(&mut ws, b"READY", T).await.unwrap();
    ws.send(Message::Text("go\n".into())).await.unwrap();
    let got = drain_ws(&mut ws, T).await.unwrap();
    assert!(got.bytes == text, "utf-8 stream differs");
}

const KEY_BODY: [&str; 6] = [
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
    "QyNTUxOQAAACBqZmVrZXlmYWtla2V5ZmFrZWtleWZha2VrZXlmYWtla2V5ZmFrZQAAAJgA",
    "AAAAc3NoLWVkMjU1MTkAAAAgamZla2V5ZmFrZWtleWZha2VrZXlmYWtla2V5ZmFrZWtleWZh",
    "a2UAAABAZmFrZWtleWZha2VrZXlmYWtla2V5ZmFrZWtleWZha2VrZXlmYWtla2V5ZmFrZWtl",
    "eWZha2VrZXlmYWtla2V5ZmFrZWtleWZha2VrZXlmYWtla2V5ZmFrZQAAAA5mYWtlQGV4YW1w",
    "bGUuY29tAQIDBAUGBwgJ",
];

fn reveals_key(s: &str) -> Option<String> {
    for line in KEY_BODY {
        for w in line.as_bytes().windows(6) {
            let w = std::str::from_utf8(w).unwrap();
            if s.contains(w) {
                return Some(w.to_owned());
            }
        }
    }
    s.contains("PRIVATE").then(|| "PRIVATE".to_owned())
}

#[tokio::test]
async fn agent_pages_never_leak_a_private_key_while_a_persons_views_show_the_terminal() {
    let node = Node::start(None).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = format!(
        "-----BEGIN OPENSSH PRIVATE KEY-----\n{}\n-----END OPENSSH PRIVATE KEY-----\n",
        KEY_BODY.join("\n")
    );
    let f = dir.path().join("id_test");
    std::fs::write(&f, format!("before the key\n{key}after the key\n")).unwrap();
    // Cooked output (onlcr): \r\n line ends like a real `cat`.
    let c = node
        .create(json!({"rows": 5, "cols": 80, "shell": "/bin/sh",
            "args": ["-c", format!("stty -echo; read go; cat {}", f.display())], "cwd": "/tmp"}))
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut ws = node.ws(&id, "?binary=1").await.unwrap();
    node.write(&id, "go\n").await.unwrap();
    let got = drain_ws(&mut ws, T).await.unwrap();
    assert!(got.exit.is_some());

    // The redaction rule (docs/http-api.md "Redaction"): what agents read — the MCP serializer
    // formats, `mcp_raw` and `mcp` — is masked at every page size.
    // Raw, one byte at a time, from the oldest offset.
    let first = node
        .ok(
            "GET",
            &format!("/sessions/{id}/output?format=mcp_raw&limit=1"),
            None,
        )
        .await
        .unwrap();
    let mut from = first["oldest_offset"].as_u64().unwrap();
    let mut all = String::new();
    let mut pages = 0;
    loop {
        let p = node
            .ok(
                "GET",
                &format!("/sessions/{id}/output?format=mcp_raw&from_byte={from}&limit=1"),
                None,
            )
            .await
            .unwrap();
        let d = p["data"].as_str().unwrap();
        assert!(reveals_key(d).is_none());
        all.push_str(d);
        pages += 1;
        assert!(pages < 10_000);
        match p["next_cursor"].as_u64() {
            Some(n) => from = n,
            None => break,
        }
    }
    assert!(
        all.contains("before the key") && all.contains("after the key"),
        "{all}"
    );
    assert_eq!(reveals_key(&all), None, "raw pages revealed key material");

    // The MCP text serializer, one line at a time.
    for format in ["mcp"] {
        let first = node
            .ok(
                "GET",
                &format!("/sessions/{id}/output?format={format}&from_line=0&limit=1"),
                None,
            )
            .await
            .unwrap();
        let mut from = first["oldest_offset"].as_u64().unwrap();
        let mut all = String::new();
        for _ in 0..1000 {
            let p = node
                .ok(
                    "GET",
                    &format!("/sessions/{id}/output?format={format}&from_line={from}&limit=1"),
                    None,
                )
                .await
                .unwrap();
            all.push_str(p["data"].as_str().unwrap());
            all.push('\n');
            match p["next_cursor"].as_u64() {
                Some(n) => from = n,
                None => break,
            }
        }
        assert!(all.contains("before the key"), "{all}");
        assert_eq!(
            reveals_key(&all),
            None,
            "{format} pages revealed key material: {all}"
        );
    }
    // The tail snapshot uses [REDACTED].
    let tail = node
        .ok("GET", &format!("/sessions/{id}/output?format=mcp"), None)
        .await
        .unwrap();
    let t = tail["data"].as_str().unwrap();
    assert_eq!(reveals_key(t), None, "{t}");
    assert!(t.contains("[REDACTED]"), "{t}");

    // A person's own views show the terminal as it was, all alike: the live stream, the raw
    // and text history pages, and the grid.
    let streamed = String::from_utf8_lossy(&got.bytes).into_owned();
    assert!(reveals_key(&streamed).is_some(), "stream: {streamed}");
    for format in ["raw", "text"] {
        let p = node
            .ok(
                "GET",
                &format!("/sessions/{id}/output?format={format}&from_line=0&from_byte=0"),
                None,
            )
            .await
            .unwrap();
        let d = p["data"].as_str().unwrap();
        assert!(reveals_key(d).is_some(), "{format}: {d}");
    }
}

#[tokio::test]
async fn raw_capture_records_both_directions() {
    let node = Node::start(None).await.unwrap();
    let c = node.create(gated("echo captured-output")).await.unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let st = node
        .ok(
            "POST",
            "/diagnostics/capture",
            Some(json!({"enabled": true, "session_id": id})),
        )
        .await
        .unwrap();
    assert_eq!(st["enabled"], true);
    let mut ws = start_gated(&node, &id, "").await;
    drain_ws(&mut ws, T).await.unwrap();
    let st = node.ok("GET", "/diagnostics/capture", None).await.unwrap();
    assert_eq!(st["session_id"], id.as_str());
    assert!(st["bytes"][&id].as_u64().unwrap() > 8);
    let file = std::path::Path::new(st["dir"].as_str().unwrap()).join(format!("{id}.tcap"));
    let bytes = std::fs::read(file).unwrap();
    assert!(bytes.starts_with(b"TCAP"));
    let s = String::from_utf8_lossy(&bytes);
    assert!(s.contains("go\n") && s.contains("captured-output"));
    node.ok(
        "POST",
        "/diagnostics/capture",
        Some(json!({"enabled": false})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn agent_detection_state_and_questions_are_parsed() {
    let node = Node::start(None).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A fake agent CLI: its process name is `claude`.
    let agent = dir.path().join("claude");
    std::fs::write(&agent, "#!/bin/sh\nread z\nprintf 'thinking\\n'\nread a\nprintf 'Apply the change? (y/n) '\nread b\nprintf 'done\\nsuggest: [ \"run tests\" ]\\n> '\nread c\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = node
        .create(
            json!({"shell": agent.display().to_string(), "cwd": "/tmp", "rows": 10, "cols": 60}),
        )
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut ws = node.ws(&id, "?from_byte=0").await.unwrap();
    // The agent starts talking only once this client is subscribed.
    node.write(&id, "\n").await.unwrap();
    // Waits for a parsed frame matching `want`, bounded by T.
    async fn parsed(ws: &mut tuic_tests::term::Ws, want: impl Fn(&Value) -> bool) -> Value {
        use futures::StreamExt;
        let deadline = tokio::time::Instant::now() + T;
        loop {
            let m = tokio::time::timeout_at(deadline, ws.next())
                .await
                .expect("parsed frame in time")
                .unwrap()
                .unwrap();
            if let Message::Text(t) = m {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                if v["type"] == "parsed" && want(&v["event"]) {
                    return v["event"].clone();
                }
            }
        }
    }
    // The first idle may be published before this client subscribed: read it from the row.
    let deadline = tokio::time::Instant::now() + T;
    let rows = loop {
        let rows = node.ok("GET", "/sessions", None).await.unwrap();
        if rows[0]["agent_state"] == "idle" {
            break rows;
        }
        assert!(tokio::time::Instant::now() < deadline, "never idle: {rows}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(rows[0]["agent_type"], "claude");
    assert_eq!(rows[0]["foreground_process"], "claude");
    assert_eq!(rows[0]["shell_state"], "idle");
    node.write(&id, "\n").await.unwrap();
    let q = parsed(&mut ws, |e| e["type"] == "question").await;
    assert!(q["text"].as_str().unwrap().contains("(y/n)"));
    parsed(&mut ws, |e| e["state"] == "awaiting_input").await;
    node.write(&id, "y\n").await.unwrap();
    // Completion only with the explicit marker.
    parsed(&mut ws, |e| e["state"] == "completed").await;
}

/// Bulk plain text (held back and partly skipped by the screen's fast path) still leaves the
/// grid, its scrollback and the clean log exactly as if every line had been drawn.
#[tokio::test]
async fn bulk_plain_text_past_the_scrollback_leaves_exact_rows_and_log() {
    let node = Node::start(None).await.unwrap();
    let n = 30_000u64;
    let c = node
        .create(json!({
            "rows": 24, "cols": 80, "shell": "/bin/sh",
            "args": ["-c", format!("seq 1 {n}")], "cwd": "/tmp",
        }))
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let mut ws = node.ws(&id, "?binary=1&from_byte=0").await.unwrap();
    let got = drain_ws(&mut ws, T * 3).await.unwrap();
    assert_eq!(got.exit.unwrap()["exit_code"], 0);

    // 10,000 history rows plus 24 screen rows: the last 10,023 numbers, then the blank row
    // the final line feed opened.
    let info = node
        .ok("GET", &format!("/sessions/{id}/terminal/scroll-info"), None)
        .await
        .unwrap();
    let total = info["total_lines"].as_u64().unwrap();
    assert_eq!(total, 10_024);
    let page = node
        .ok(
            "GET",
            &format!("/sessions/{id}/terminal/lines?start=0&end={total}"),
            None,
        )
        .await
        .unwrap();
    let rows: Vec<&str> = page["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let first = n - 10_022;
    let mut want: Vec<String> = (first..=n).map(|i| i.to_string()).collect();
    want.push(String::new());
    assert_eq!(rows, want);

    // The clean log counted every line and retains the last 10,000 of them.
    let out = node
        .ok(
            "GET",
            &format!("/sessions/{id}/output?format=text&from_line=0&limit=10000"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(out["total_written"], n);
    assert_eq!(out["oldest_offset"], n - 10_000);
    let lines: Vec<&str> = out["data"].as_str().unwrap().split('\n').collect();
    let want: Vec<String> = (n - 10_000 + 1..=n).map(|i| i.to_string()).collect();
    assert_eq!(lines, want);
}

/// An agent's rate-limit and error lines become `parsed` events, background work keeps it
/// `working`, and `session-created` names the agent when the program is one.
#[tokio::test]
async fn agent_rate_limits_errors_background_work_and_created_agent_type() {
    let node = Node::start(None).await.unwrap();
    let mut ev = node.events("session-created").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("claude");
    std::fs::write(
        &agent,
        "#!/bin/sh\nread z\nprintf 'Claude usage limit reached|1767225600\\n'\nread a\n\
         printf '  \\342\\216\\277  API Error: 529 overloaded\\n'\nread b\n\
         sleep 60 &\nprintf 'started a job\\n> '\nread c\nkill $!\nprintf 'stopped\\n> '\nread d\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = node
        .create(
            json!({"shell": agent.display().to_string(), "cwd": "/tmp", "rows": 10, "cols": 60}),
        )
        .await
        .unwrap();
    let id = c["session_id"].as_str().unwrap().to_owned();
    let (name, data) = ev.next(T).await.unwrap();
    assert_eq!(name, "session-created");
    assert_eq!(data["session_id"], id.as_str());
    assert_eq!(data["agent_type"], "claude");

    let mut ws = node.ws(&id, "?from_byte=0").await.unwrap();
    async fn parsed(ws: &mut tuic_tests::term::Ws, want: impl Fn(&Value) -> bool) -> Value {
        use futures::StreamExt;
        let deadline = tokio::time::Instant::now() + T;
        loop {
            let m = tokio::time::timeout_at(deadline, ws.next())
                .await
                .expect("parsed frame in time")
                .unwrap()
                .unwrap();
            if let Message::Text(t) = m {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                if v["type"] == "parsed" && want(&v["event"]) {
                    return v["event"].clone();
                }
            }
        }
    }
    /// Polls the session row until `want` holds, bounded by T.
    async fn row_until(node: &Node, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + T;
        loop {
            let rows = node.ok("GET", "/sessions", None).await.unwrap();
            if want(&rows[0]) {
                return rows[0].clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "row never matched: {rows}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    node.write(&id, "\n").await.unwrap();
    let r = parsed(&mut ws, |e| e["type"] == "rate_limit").await;
    assert_eq!(r["text"], "Claude usage limit reached|1767225600");
    assert_eq!(r["reset_at"], 1_767_225_600_000u64);

    node.write(&id, "\n").await.unwrap();
    let e = parsed(&mut ws, |e| e["type"] == "error").await;
    assert_eq!(e["text"], "API Error: 529 overloaded");

    // A live `sleep` under the agent: working although the shell is idle.
    node.write(&id, "\n").await.unwrap();
    let row = row_until(&node, |r| {
        r["background_work"] == true && r["shell_state"] == "idle"
    })
    .await;
    assert_eq!(row["agent_state"], "working", "{row}");
    // Once it is gone: no flag, and the idle agent is idle again.
    node.write(&id, "\n").await.unwrap();
    let row = row_until(&node, |r| {
        r.get("background_work").is_none() && r["agent_state"] == "idle"
    })
    .await;
    assert_eq!(row["shell_state"], "idle");
}

/// STATE is true for what people run: a shell at its prompt is `idle`; `sleep 100` (started
/// from that shell, or as the session's own program) and a full-screen program are `working`
/// while silent; an exited session's row says `exited` with its code. `GET /sessions`,
/// `GET /sessions/{id}` and `tuic ls` carry the same value (MCP `session list` serializes the
/// same row).
#[tokio::test]
async fn state_is_idle_for_a_quiet_shell_working_for_sleep_and_full_screen_programs_and_exited() {
    let node = Node::start(None).await.unwrap();
    // Waits until the row of `id` satisfies `ready` (bounded by T), then returns it.
    async fn row_when(node: &Node, id: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + T;
        loop {
            let rows = node.ok("GET", "/sessions", None).await.unwrap();
            if let Some(r) = rows
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["session_id"] == id)
                .filter(|r| ready(r))
            {
                return r.clone();
            }
            assert!(tokio::time::Instant::now() < deadline, "{id}: {rows}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let quiet = |fg: &'static str| {
        move |r: &Value| r["foreground_process"] == fg && r["shell_state"] != "busy"
    };
    let ls_state = |alias: &str| -> String {
        let out = std::process::Command::new(bin("tuic"))
            .args(["ls"])
            .env("TUIC_SOCKET", &node.socket)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(alias))
            .unwrap_or_else(|| panic!("{alias} not in {text}"))
            .to_owned();
        ["idle", "working", "done", "needs input"]
            .into_iter()
            .find(|w| line.contains(&format!("  {w}  ")))
            .unwrap_or_else(|| panic!("no state in {line}"))
            .to_owned()
    };
    let id_alias = |v: &Value| {
        (
            v["session_id"].as_str().unwrap().to_owned(),
            v["alias"].as_str().unwrap().to_owned(),
        )
    };

    // A shell at its prompt: idle (not done: done is an agent's).
    let (sh, sh_alias) = id_alias(
        &node
            .create(json!({"shell": "/bin/sh", "args": ["-i"], "cwd": "/tmp",
                           "env": {"PS1": "$ ", "ENV": ""}}))
            .await
            .unwrap(),
    );
    let r = row_when(&node, &sh, |r| quiet("sh")(r) && r["shell_state"] == "idle").await;
    assert_eq!(r["state"], "idle", "{r}");
    assert_eq!(ls_state(&sh_alias), "idle");
    assert_eq!(
        node.ok("GET", &format!("/sessions/{sh}"), None)
            .await
            .unwrap()["state"],
        "idle"
    );

    // `sleep 100` typed at that prompt: working while it runs, silent or not.
    node.write(&sh, "sleep 100\n").await.unwrap();
    let r = row_when(&node, &sh, |r| {
        quiet("sleep")(r) && r["shell_state"] == "idle"
    })
    .await;
    assert_eq!(r["state"], "working", "{r}");
    assert_eq!(ls_state(&sh_alias), "working");

    // `sleep 100` as the session's own program: working too.
    let (sl, sl_alias) = id_alias(
        &node
            .create(json!({"shell": "sleep", "args": ["100"], "cwd": "/tmp"}))
            .await
            .unwrap(),
    );
    let r = row_when(&node, &sl, quiet("sleep")).await;
    assert_eq!(r["state"], "working", "{r}");
    assert_eq!(ls_state(&sl_alias), "working");

    // A full-screen program (vi on the alternate screen), quiet after drawing: working.
    let (vi, vi_alias) = id_alias(
        &node
            .create(
                json!({"shell": "vi", "args": ["/tmp/tuic-state-test-never-saved"],
                           "cwd": "/tmp"}),
            )
            .await
            .unwrap(),
    );
    let r = row_when(&node, &vi, |r| {
        r["foreground_process"]
            .as_str()
            .is_some_and(|f| f.starts_with("vi"))
            && r["shell_state"] == "idle"
    })
    .await;
    assert_eq!(r["state"], "working", "{r}");
    assert_eq!(ls_state(&vi_alias), "working");

    // MCP `session action=list` carries the same state.
    let (mut mcp, _) = tuic_tests::agent::Agent::new(&node.socket, "state-check").await;
    let (err, list) = mcp.tool("session", json!({"action": "list"})).await;
    assert!(!err, "{list}");
    let state_of = |id: &str| {
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["session_id"] == id)
            .map(|r| r["state"].clone())
    };
    assert_eq!(state_of(&sh), Some(json!("working")), "{list}");
    assert_eq!(state_of(&sl), Some(json!("working")), "{list}");

    // An exited session: its row (MCP `session action=status`) says exited, with the code.
    let (ex, _) = id_alias(
        &node
            .create(json!({"shell": "/bin/sh", "args": ["-c", "read x; exit 3"], "cwd": "/tmp"}))
            .await
            .unwrap(),
    );
    let mut ws = node.ws(&ex, "").await.unwrap();
    node.write(&ex, "go\n").await.unwrap();
    assert!(drain_ws(&mut ws, T).await.unwrap().exit.is_some());
    let (err, r) = mcp
        .tool("session", json!({"action": "status", "session_id": ex}))
        .await;
    assert!(!err, "{r}");
    assert_eq!(
        (r["state"].clone(), r["exit_code"].clone()),
        (json!("exited"), json!(3)),
        "{r}"
    );
}
