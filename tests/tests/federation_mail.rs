//! Cross-host agent mail through a hub: real `tuic-node`s and a real `tuic-hub` in their own
//! network namespaces (or on loopback where no second host is needed), agents as MCP clients
//! on each process's IPC socket, the peer link over real TCP WebSockets.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::Full;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tuic_tests::netns::Net;
use tuic_tests::{NodeProc, config_dir, ipc, ipc_request, run_with_stdin};

fn s(d: &tempfile::TempDir) -> String {
    d.path().to_str().unwrap().to_owned()
}

/// An MCP client (one protocol session) on a process's IPC socket.
struct Agent {
    socket: PathBuf,
    sid: String,
    next: u64,
}

async fn rpc(socket: &Path, sid: Option<&str>, msg: Value) -> tuic_tests::Reply {
    let mut b = hyper::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(sid) = sid {
        b = b.header("mcp-session-id", sid);
    }
    ipc_request(
        socket,
        b.body(Full::new(Bytes::from(msg.to_string()))).unwrap(),
    )
    .await
    .unwrap()
}

impl Agent {
    /// Initializes a protocol session and registers under `name`.
    async fn new(socket: &Path, name: &str) -> (Self, String) {
        let r = rpc(
            socket,
            None,
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"federation-e2e","version":"1"}}}),
        )
        .await;
        let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
        rpc(
            socket,
            Some(&sid),
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        )
        .await;
        let mut a = Self {
            socket: socket.to_owned(),
            sid,
            next: 1,
        };
        let me = a.ok(json!({"action":"register","name":name})).await["tuic_session"]
            .as_str()
            .unwrap()
            .to_owned();
        (a, me)
    }

    /// Calls `agent`; returns (is_error, value).
    async fn call(&mut self, args: Value) -> (bool, Value) {
        self.next += 1;
        let r = rpc(
            &self.socket,
            Some(&self.sid),
            json!({"jsonrpc":"2.0","id":self.next,"method":"tools/call","params":{"name":"agent","arguments":args}}),
        )
        .await;
        let v = r.json();
        let text = v["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no tool result: {v}"));
        (
            v["result"]["isError"] == true,
            serde_json::from_str(text).unwrap(),
        )
    }

    async fn ok(&mut self, args: Value) -> Value {
        let (err, v) = self.call(args.clone()).await;
        assert!(!err, "agent {args} failed: {v}");
        v
    }

    async fn send(&mut self, to: &str, message: &str) -> Value {
        self.ok(json!({"action":"send","to":to,"message":message}))
            .await
    }

    /// Reads the inbox until `n` messages arrived in total (bounded).
    async fn collect(&mut self, n: usize, limit: Duration) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        let mut got: Vec<Value> = Vec::new();
        while got.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "only {} of {n} messages: {got:?}",
                got.len()
            );
            let w = self
                .ok(json!({"action":"wait","timeout_ms": left.as_millis().min(10_000) as u64}))
                .await;
            got.extend(w["new_messages"].as_array().cloned().unwrap_or_default());
        }
        got
    }

    /// `list_peers` until one entry has `address` (bounded).
    async fn sees(&mut self, address: &str, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let peers = self.ok(json!({"action":"list_peers"})).await;
            if let Some(p) = peers["peers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["address"] == address)
            {
                return p.clone();
            }
            assert!(Instant::now() < deadline, "{address} never listed: {peers}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A remote-access node in `ns` (or on loopback) with its config dir and token.
fn start_node(
    ns: Option<&str>,
    extra: Value,
    port: &str,
    bind: &str,
) -> (tempfile::TempDir, NodeProc, String) {
    let d = config_dir(extra);
    let (code, _, err) =
        run_with_stdin("tuic-node", &["set-password", "--config-dir", &s(&d)], "pw").unwrap();
    assert_eq!(code, 0, "{err}");
    let node = restart_node(ns, &d, port, bind);
    let (_, token, _) =
        run_with_stdin("tuic-node", &["token", "--config-dir", &s(&d)], "").unwrap();
    (d, node, token.trim().to_owned())
}

fn restart_node(ns: Option<&str>, d: &tempfile::TempDir, port: &str, bind: &str) -> NodeProc {
    NodeProc::start_in(
        ns,
        "tuic-node",
        &[
            "--config-dir",
            &s(d),
            "--remote-access",
            "--port",
            port,
            "--bind",
            bind,
        ],
        &[("TUIC_LOG", "info")],
    )
    .unwrap()
}

fn connect(hub_dir: &tempfile::TempDir, id: &str, url: &str, token: &str) {
    let (code, _, err) = run_with_stdin(
        "tuic-hub",
        &[
            "connect",
            "--config-dir",
            &s(hub_dir),
            "--id",
            id,
            "--url",
            url,
            "--token-stdin",
        ],
        token,
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
}

async fn connection(hub: &NodeProc, id: &str) -> Value {
    let r = ipc(&hub.socket, "GET", "/hub/connections", None)
        .await
        .unwrap();
    r.json()["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Waits (bounded) until the hub's peer link to `id` is `up`.
async fn wait_link(hub: &NodeProc, id: &str, up: bool, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let c = connection(hub, id).await;
        if c["peer_link_up"] == up {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "peer link {id} never up={up}: {c}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Hub in the centre, node B (`nodeb`) and node C (`nodec`) on their own links.
struct Star {
    net: Net,
    b_dir: tempfile::TempDir,
    b: NodeProc,
    _c_dir: tempfile::TempDir,
    _c: NodeProc,
    _hub_dir: tempfile::TempDir,
    hub: NodeProc,
    c_socket: PathBuf,
}

async fn star() -> Star {
    let net = Net::star(2).unwrap();
    let (b_dir, b, tb) = start_node(Some(net.node(0)), json!({}), "9876", "0.0.0.0");
    let (c_dir, c, tc) = start_node(Some(net.node(1)), json!({}), "9876", "0.0.0.0");
    let hub_dir = config_dir(json!({}));
    let hub = NodeProc::start_in(
        Some(net.hub()),
        "tuic-hub",
        &["--config-dir", &s(&hub_dir)],
        &[("TUIC_LOG", "info")],
    )
    .unwrap();
    connect(
        &hub_dir,
        "nodeb",
        &format!("http://{}:9876", net.node_addr(0)),
        &tb,
    );
    connect(
        &hub_dir,
        "nodec",
        &format!("http://{}:9876", net.node_addr(1)),
        &tc,
    );
    wait_link(&hub, "nodeb", true, Duration::from_secs(20)).await;
    wait_link(&hub, "nodec", true, Duration::from_secs(20)).await;
    let c_socket = c.socket.clone();
    Star {
        net,
        b_dir,
        b,
        _c_dir: c_dir,
        _c: c,
        _hub_dir: hub_dir,
        hub,
        c_socket,
    }
}

#[tokio::test]
async fn agents_on_two_nodes_exchange_mail_through_the_hub_exactly_once_in_order() {
    let st = star().await;
    let (mut bob, tbob) = Agent::new(&st.b.socket, "bob").await;
    let (mut carol, tcarol) = Agent::new(&st.c_socket, "carol").await;
    let (mut hank, thank) = Agent::new(&st.hub.socket, "hank").await;
    let (a_bob, a_carol, a_hank) = (
        format!("nodeb/{tbob}"),
        format!("nodec/{tcarol}"),
        format!("local/{thank}"),
    );

    // Discovery: the hub lists every node's peers with addresses; a node lists the hub's own
    // peers and the other node's, as the hub addresses them.
    let p = hank.sees(&a_bob, Duration::from_secs(10)).await;
    assert_eq!(p["name"], "bob");
    assert_eq!(p["connection_id"], "nodeb");
    hank.sees(&a_carol, Duration::from_secs(10)).await;
    let p = bob.sees(&a_carol, Duration::from_secs(10)).await;
    assert_eq!(p["name"], "carol");
    bob.sees(&a_hank, Duration::from_secs(10)).await;
    carol.sees(&a_bob, Duration::from_secs(10)).await;

    // B → hub → C: every message once, in order, from the address the hub stamped.
    const N: usize = 20;
    let mut ids = Vec::new();
    for i in 0..N {
        let r = bob.send(&a_carol, &format!("b2c-{i}")).await;
        assert!(
            matches!(r["status"].as_str(), Some("delivered" | "accepted")),
            "{r}"
        );
        assert_eq!(r["delivery_path"], "peer_link");
        ids.push(r["message_id"].as_str().unwrap().to_owned());
    }
    let got = carol.collect(N, Duration::from_secs(30)).await;
    let bodies: Vec<&str> = got.iter().map(|m| m["message"].as_str().unwrap()).collect();
    let want: Vec<String> = (0..N).map(|i| format!("b2c-{i}")).collect();
    assert_eq!(bodies, want);
    let got_ids: Vec<&str> = got
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(got_ids, ids);
    assert!(got.iter().all(|m| m["from"] == a_bob.as_str()));
    assert_eq!(got[0]["from_name"], "bob");

    // C → the hub's own peer (`local/<id>`), and the hub's peer → B.
    let r = carol.send(&a_hank, "c2h").await;
    assert_eq!(r["status"], "delivered", "{r}");
    let m = hank.collect(1, Duration::from_secs(10)).await;
    assert_eq!(m[0]["message"], "c2h");
    assert_eq!(m[0]["from"], a_carol.as_str());
    let r = hank.send(&a_bob, "h2b").await;
    assert!(
        matches!(r["status"].as_str(), Some("delivered" | "accepted")),
        "{r}"
    );
    let m = bob.collect(1, Duration::from_secs(10)).await;
    assert_eq!(m[0]["message"], "h2b");
    assert_eq!(m[0]["from"], a_hank.as_str());
    // The hub's own peers are also reachable from the hub as `local/<id>`.
    let r = hank.send(&a_hank, "self").await;
    assert_eq!(r["delivered"], true, "{r}");

    // Nothing arrived twice: a marker sent last is the only new mail.
    bob.send(&a_carol, "marker").await;
    let m = carol.collect(1, Duration::from_secs(10)).await;
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(m[0]["message"], "marker");

    // Empty ids and prefixes are refused before any owner is chosen; unknown owners are named.
    for bad in ["/x", "nodec/", "/"] {
        let (err, e) = bob
            .call(json!({"action":"send","to":bad,"message":"x"}))
            .await;
        assert!(err, "{bad}: {e}");
        assert_eq!(e["code"], "invalid_address", "{bad}: {e}");
    }
    let (err, e) = hank
        .call(json!({"action":"send","to":"nope/x","message":"x"}))
        .await;
    assert!(err);
    assert_eq!(e["code"], "unknown_recipient", "{e}");
    assert_eq!(e["connection"], "nope", "{e}");
    // An unknown peer on a known node is refused by that node, naming the connection.
    let (err, e) = hank
        .call(json!({"action":"send","to":"nodec/nobody","message":"x"}))
        .await;
    assert!(err, "{e}");
    assert_eq!(e["code"], "unknown_recipient", "{e}");
    assert_eq!(e["connection"], "nodec", "{e}");

    // Local mail on a node does not need the hub.
    let _ = &st.net;
    let _ = &st.b_dir;
}
