//! Multi-host: MCP resources of a remote session through a hub (network namespaces, real
//! binaries). The hub's `resources/list` names the node's session with its host in the URI
//! (`tuic://hosts/{connection}/sessions/{alias}/screen|output`); `resources/read` answers the
//! owner's (redacted) screen and output under that URI; `resources/subscribe` sends
//! `notifications/resources/updated` when the remote screen changes; unknown hosts and
//! sessions are "not found", and a plain node refuses such URIs the same way.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tuic_tests::agent::rpc;
use tuic_tests::fed::FedBed;
use tuic_tests::ipc;

/// A legacy protocol session on `socket`: its id.
async fn initialize(socket: &std::path::Path) -> String {
    let r = rpc(
        socket,
        None,
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",
            "capabilities":{},"clientInfo":{"name":"hub-resources","version":"1"}}}),
    )
    .await;
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    rpc(
        socket,
        Some(&sid),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    )
    .await;
    sid
}

/// The messages of protocol session `sid`'s `GET /mcp` stream, with their arrival time.
async fn stream(socket: &std::path::Path, sid: &str) -> mpsc::UnboundedReceiver<(Instant, Value)> {
    let s = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (mut send, c) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s))
        .await
        .unwrap();
    tokio::spawn(c);
    let req = hyper::Request::get("/mcp")
        .header("host", "localhost")
        .header("accept", "text/event-stream")
        .header("mcp-session-id", sid)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _keep = send;
        let mut body = resp.into_body();
        let mut buf = String::new();
        while let Some(Ok(f)) = body.frame().await {
            let Ok(d) = f.into_data() else { continue };
            buf.push_str(&String::from_utf8_lossy(&d));
            while let Some(i) = buf.find('\n') {
                let line: String = buf.drain(..=i).collect();
                if let Some(m) = line
                    .trim_end()
                    .strip_prefix("data: ")
                    .and_then(|d| serde_json::from_str::<Value>(d).ok())
                {
                    let _ = tx.send((Instant::now(), m));
                }
            }
        }
    });
    rx
}

async fn call(socket: &std::path::Path, sid: &str, method: &str, params: Value) -> Value {
    rpc(
        socket,
        Some(sid),
        json!({"jsonrpc":"2.0","id":7,"method":method,"params":params}),
    )
    .await
    .json()
}

fn text(r: &Value) -> String {
    r["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_hub_lists_reads_and_subscribes_to_remote_sessions_with_the_host_in_the_uri() {
    let bed = FedBed::start(1).await.unwrap();
    let node_sock = bed.nodes[0].proc().socket.clone();
    let hub = bed.hub.socket.clone();
    let pty = bed
        .create_on_node(
            0,
            json!({"shell": "/bin/sh", "rows": 24, "cols": 80, "cwd": "/tmp"}),
        )
        .await
        .unwrap();
    let row = bed
        .wait_listed(&format!("nodeb/{pty}"), Duration::from_secs(20))
        .await
        .unwrap();
    let alias = row["alias"]
        .as_str()
        .filter(|a| !a.is_empty())
        .unwrap_or(&pty)
        .to_owned();
    let sid = initialize(&hub).await;

    // Listed with the host in the URI; the template says how to build one.
    let screen = format!("tuic://hosts/nodeb/sessions/{alias}/screen");
    let output = format!("tuic://hosts/nodeb/sessions/{alias}/output");
    let l = call(&hub, &sid, "resources/list", json!({})).await;
    let uris: Vec<&str> = l["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert!(
        uris.contains(&screen.as_str()) && uris.contains(&output.as_str()),
        "{l}"
    );
    let t = call(&hub, &sid, "resources/templates/list", json!({})).await;
    assert!(
        t.to_string()
            .contains("tuic://hosts/{host}/sessions/{alias}/screen"),
        "{t}"
    );

    // Subscribe, then output on the node: `updated` for the hub's URI, and the read shows it.
    let mut rx = stream(&hub, &sid).await;
    let r = call(&hub, &sid, "resources/subscribe", json!({"uri": screen})).await;
    assert_eq!(r["result"], json!({}), "{r}");
    let t0 = Instant::now();
    let w = ipc(
        &node_sock,
        "POST",
        &format!("/sessions/{pty}/write"),
        Some(json!({"data": "echo hub-mark-$((6*7))\n"})),
    )
    .await
    .unwrap();
    assert_eq!(w.status, 200, "{:?}", w.json());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let at = loop {
        let (at, m) = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("an update within 20 s")
            .expect("stream open");
        if m["method"] == "notifications/resources/updated" {
            assert_eq!(m["params"]["uri"], screen.as_str(), "{m}");
            break at;
        }
    };
    eprintln!(
        "remote screen updated through the hub {} ms after the write",
        (at - t0).as_millis()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = call(&hub, &sid, "resources/read", json!({"uri": screen})).await;
        assert_eq!(r["result"]["contents"][0]["uri"], screen.as_str(), "{r}");
        assert_eq!(r["result"]["contents"][0]["mimeType"], "text/plain", "{r}");
        if text(&r).contains("hub-mark-42") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the read never showed the output: {r}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = call(
        &hub,
        &sid,
        "resources/read",
        json!({"uri": format!("{output}?limit=20")}),
    )
    .await;
    assert!(text(&r).contains("hub-mark-42"), "{r}");
    assert_eq!(r["result"]["contents"][0]["mimeType"], "application/json");
    let r = call(&hub, &sid, "resources/unsubscribe", json!({"uri": screen})).await;
    assert_eq!(r["result"], json!({}), "{r}");

    // Unknown session, unknown host: not found (-32002), at read and at subscribe.
    for uri in [
        "tuic://hosts/nodeb/sessions/nope/screen".to_owned(),
        format!("tuic://hosts/nohost/sessions/{alias}/screen"),
    ] {
        for m in ["resources/read", "resources/subscribe"] {
            let r = call(&hub, &sid, m, json!({"uri": uri})).await;
            assert_eq!(r["error"]["code"], -32002, "{m} {uri}: {r}");
        }
    }
    // A plain node has no other hosts: the same URI is not found there.
    let nsid = initialize(&node_sock).await;
    let r = call(&node_sock, &nsid, "resources/read", json!({"uri": screen})).await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
}
