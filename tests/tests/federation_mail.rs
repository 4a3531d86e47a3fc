//! Cross-host agent mail through a hub: real `tuic-node`s and a real `tuic-hub` in their own
//! network namespaces (or on loopback where no second host is needed), agents as MCP clients
//! on each process's IPC socket, the peer link over real TCP WebSockets.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tuic_tests::agent::Agent;
use tuic_tests::netns::Net;
use tuic_tests::{NodeProc, config_dir, ipc, run_with_stdin};

fn s(d: &tempfile::TempDir) -> String {
    d.path().to_str().unwrap().to_owned()
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
    star_with(json!({})).await
}

/// [`star`] with extra config for node B.
async fn star_with(b_config: Value) -> Star {
    star_configs(b_config, json!({})).await
}

/// [`star`] with extra config for node B and for the hub.
async fn star_configs(b_config: Value, hub_config: Value) -> Star {
    let net = Net::star(2).unwrap();
    let (b_dir, b, tb) = start_node(Some(net.node(0)), b_config, "9876", "0.0.0.0");
    let (c_dir, c, tc) = start_node(Some(net.node(1)), json!({}), "9876", "0.0.0.0");
    let hub_dir = config_dir(hub_config);
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

/// Commits the peer state of a process has written (`GET /mcp/status` `peer_uplink.commits`).
async fn commits(socket: &std::path::Path) -> u64 {
    let st = ipc(socket, "GET", "/mcp/status", None)
        .await
        .unwrap()
        .json();
    st["peer_uplink"]["commits"].as_u64().expect("commits")
}

/// A send the destination answers in time is answered `delivered` on C's ring commit alone:
/// neither node B (the sender's custody) nor the hub (relay custody) writes a record for it.
/// A send with no verdict in time is committed (by the hub, which answers `accepted` only
/// after its custody commit) before it is answered `accepted`.
#[tokio::test]
async fn a_delivered_send_writes_no_custody_record_and_an_accepted_one_does() {
    let st = star_with(json!({"tuning": {"peer_send_wait_ms": 5_000}})).await;
    let (mut bob, _) = Agent::new(&st.b.socket, "bob").await;
    let (mut carol, tcarol) = Agent::new(&st.c_socket, "carol").await;
    let a_carol = format!("nodec/{tcarol}");
    bob.sees(&a_carol, Duration::from_secs(10)).await;
    let (b0, h0) = (commits(&st.b.socket).await, commits(&st.hub.socket).await);
    const N: u64 = 20;
    for i in 0..N {
        let r = bob.send(&a_carol, &format!("fast-{i}")).await;
        assert_eq!(r["status"], "delivered", "{r}");
    }
    assert_eq!(
        carol
            .collect(N as usize, Duration::from_secs(20))
            .await
            .len(),
        N as usize
    );
    let (b1, h1) = (commits(&st.b.socket).await, commits(&st.hub.socket).await);
    // A housekeeping tick (every 500 ms) may commit a record no answer had removed yet; a
    // commit per send would be 20.
    assert!(
        b1 - b0 < N / 2,
        "node B committed {} times for {N} delivered sends",
        b1 - b0
    );
    assert!(
        h1 - h0 < N / 2,
        "the hub committed {} times for {N} delivered sends",
        h1 - h0
    );
    // C unreachable: no verdict within the wait; custody is committed before `accepted`.
    st.net.set_link(1, false).unwrap();
    wait_link(&st.hub, "nodec", false, Duration::from_secs(30)).await;
    let r = bob.send(&a_carol, "held").await;
    assert_eq!(r["status"], "accepted", "{r}");
    assert!(commits(&st.b.socket).await > b1 || commits(&st.hub.socket).await > h1);
    st.net.set_link(1, true).unwrap();
    wait_link(&st.hub, "nodec", true, Duration::from_secs(45)).await;
    let got = carol.collect(1, Duration::from_secs(20)).await;
    assert_eq!(got[0]["message"], "held");
}

/// The hub's wait for a destination's answer (cut-through) does not hold the link the mail
/// came from: with node C silent (its link still up, frames unanswered) and a 3 s
/// cut-through, a send from node B to the hub's own agent is answered while B's send to C is
/// still waiting at the hub; that send then ends `accepted`, after the cut-through and the
/// hub's custody commit.
#[tokio::test]
async fn a_relay_waiting_for_a_silent_destination_does_not_hold_the_next_send() {
    const CUT: Duration = Duration::from_secs(3);
    let st = star_configs(
        json!({"tuning": {"peer_send_wait_ms": 15_000}}),
        json!({"tuning": {"peer_cut_through_ms": CUT.as_millis() as u64}}),
    )
    .await;
    let (mut bob, _) = Agent::new(&st.b.socket, "bob").await;
    let (mut bella, _) = Agent::new(&st.b.socket, "bella").await;
    let (_carol, tcarol) = Agent::new(&st.c_socket, "carol").await;
    let (mut hank, thank) = Agent::new(&st.hub.socket, "hank").await;
    let (a_carol, a_hank) = (format!("nodec/{tcarol}"), format!("local/{thank}"));
    bob.sees(&a_carol, Duration::from_secs(10)).await;
    bella.sees(&a_hank, Duration::from_secs(10)).await;
    // C goes silent: its veth is down, while the hub's link to it stays up until the
    // liveness deadline (15 s and more).
    st.net.set_link(1, false).unwrap();
    let h0 = commits(&st.hub.socket).await;
    let started = Instant::now();
    let to_c = tokio::spawn(async move {
        let r = bob.send(&a_carol, "into the silence").await;
        (r, started.elapsed())
    });
    // The hub holds it (relayed towards C, waiting for C's answer).
    let deadline = Instant::now() + Duration::from_secs(10);
    while connection(&st.hub, "nodec").await["outbox_held"] != 1 {
        assert!(
            Instant::now() < deadline,
            "the hub never held the send to C"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = bella.send(&a_hank, "meanwhile").await;
    let answered_in = started.elapsed();
    assert_eq!(r["status"], "delivered", "{r}");
    assert!(
        !to_c.is_finished() && answered_in < CUT,
        "the send to the hub's agent was answered {answered_in:?} after the send to C, which is finished: {}",
        to_c.is_finished()
    );
    assert_eq!(
        hank.collect(1, Duration::from_secs(10)).await[0]["message"],
        "meanwhile"
    );
    let (r, took) = to_c.await.unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    assert!(
        took >= CUT,
        "accepted after {took:?}, before the cut-through ended"
    );
    assert!(
        commits(&st.hub.socket).await > h0,
        "the hub answered `accepted` without a custody commit"
    );
    st.net.set_link(1, true).unwrap();
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
    let started = Instant::now();
    let mut delivered = 0;
    for i in 0..N {
        let r = bob.send(&a_carol, &format!("b2c-{i}")).await;
        assert!(
            matches!(r["status"].as_str(), Some("delivered" | "accepted")),
            "{r}"
        );
        assert_eq!(r["delivery_path"], "peer_link");
        delivered += usize::from(r["status"] == "delivered");
        ids.push(r["message_id"].as_str().unwrap().to_owned());
    }
    let sent_in = started.elapsed();
    let got = carol.collect(N, Duration::from_secs(30)).await;
    eprintln!(
        "{N} sends B→hub→C answered in {sent_in:?} ({delivered} with the destination's receipt); all in C's inbox after {:?}",
        started.elapsed()
    );
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

    // Nothing arrived twice: a marker sent last is the only new mail. It is sent urgent: the
    // link carries no urgency, and the answer says so while the mail goes as normal mail.
    let r = bob
        .ok(json!({"action":"send","to":a_carol,"message":"marker","urgency":"urgent"}))
        .await;
    tuic_tests::agent::assert_urgent_fallback(&r, "this host only");
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
}

#[tokio::test]
async fn a_burst_past_a_reading_recipients_inbox_waits_at_the_hub_and_loses_nothing() {
    // B's sends answer `accepted` without waiting for the verdict, so the burst is over well
    // inside the 30 s in which carol's one read marks her as reading.
    let st = star_with(json!({"tuning": {"peer_send_wait_ms": 0}})).await;
    let (mut bob, _) = Agent::new(&st.b.socket, "bob").await;
    let (mut carol, tcarol) = Agent::new(&st.c_socket, "carol").await;
    let a_carol = format!("nodec/{tcarol}");
    bob.sees(&a_carol, Duration::from_secs(10)).await;
    // carol is reading (an inbox call marks her so for 30 s) but not right now.
    carol.ok(json!({"action":"inbox"})).await;
    const N: usize = 150;
    let mut ids = Vec::new();
    for i in 0..N {
        let r = bob.send(&a_carol, &format!("burst-{i}")).await;
        assert!(
            matches!(r["status"].as_str(), Some("delivered" | "accepted")),
            "{i}: {r}"
        );
        ids.push(r["message_id"].as_str().unwrap().to_owned());
    }
    // Her inbox keeps 100; the other 50 wait in the hub's outbox for node C instead of
    // evicting unread mail.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = connection(&st.hub, "nodec").await;
        if c["outbox_held"] == N - 100 {
            // Node C said so: the hub counts its `recipient_full` answers.
            assert!(c["outbox_recipient_full"].as_u64() >= Some(1), "{c}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "hub never held the overflow: {c}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Reading makes room; every message arrives once, in order, and no read reports an
    // eviction (`collect` asserts `missed_count` stays 0).
    let got = carol.collect(N, Duration::from_secs(30)).await;
    let got_ids: Vec<&str> = got
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(got_ids, ids);
    // The hub forgets the last ones when node C's acknowledgements reach it, which may be
    // just after the mail became readable on C.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let c = connection(&st.hub, "nodec").await;
        if c["outbox_held"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "hub still holds mail: {c}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let page = carol.ok(json!({"action":"inbox"})).await;
    assert_eq!(page["missed_count"], 0, "{page}");
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next frame of `ty` (answering pings, skipping other frames), bounded.
async fn frame<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>, ty: &str) -> Value
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = tokio::time::timeout(left, ws.next())
            .await
            .unwrap_or_else(|_| panic!("no {ty} frame"))
            .expect("link open")
            .expect("frame");
        let Message::Text(t) = m else { continue };
        let v: Value = serde_json::from_str(t.as_str()).unwrap();
        if v["type"] == ty {
            return v;
        }
        if v["type"] == "ping" {
            let pong = json!({"type":"pong","nonce":v["nonce"]});
            ws.send(Message::Text(pong.to_string().into()))
                .await
                .unwrap();
        }
        if v["type"] == "register" {
            let ack = json!({"type":"register_ack","id":v["id"]});
            ws.send(Message::Text(ack.to_string().into()))
                .await
                .unwrap();
        }
    }
}

async fn put<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>, v: Value)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    ws.send(Message::Text(v.to_string().into())).await.unwrap();
}

fn http_status(e: tokio_tungstenite::tungstenite::Error) -> u16 {
    match e {
        tokio_tungstenite::tungstenite::Error::Http(r) => r.status().as_u16(),
        other => panic!("expected an HTTP refusal, got {other}"),
    }
}

async fn dial_peer(
    addr: std::net::SocketAddr,
    query: &str,
    cookie: Option<&str>,
) -> Result<Ws, u16> {
    let mut req = format!("ws://{addr}/mcp/peer{query}")
        .into_client_request()
        .unwrap();
    if let Some(c) = cookie {
        req.headers_mut().insert("cookie", c.parse().unwrap());
    }
    tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| ws)
        .map_err(http_status)
}

#[tokio::test]
async fn node_peer_endpoint_is_authenticated_tcp_only_and_checks_provenance() {
    let (d, mut node, token) = start_node(None, json!({}), "0", "127.0.0.1");
    let addr = node.tcp.expect("tcp listener");
    // The IPC socket never serves the link.
    let stream = tokio::net::UnixStream::connect(&node.socket).await.unwrap();
    let e = tokio_tungstenite::client_async("ws://localhost/mcp/peer", stream)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(http_status(e), 403);
    // No credential, or the token in the query: refused.
    assert_eq!(dial_peer(addr, "", None).await.err(), Some(401));
    assert_eq!(
        dial_peer(addr, &format!("?token={token}"), None)
            .await
            .err(),
        Some(401)
    );
    let cookie = format!("tui-session={token}");

    // A request before hello ends the link with handshake_required.
    let mut ws = dial_peer(addr, "", Some(&cookie)).await.unwrap();
    frame(&mut ws, "hello").await;
    put(&mut ws, json!({"type":"list_peers","id":1})).await;
    let e = frame(&mut ws, "error").await;
    assert_eq!(e["code"], "handshake_required", "{e}");
    drop(ws);

    let (mut bob, tbob) = Agent::new(&node.socket, "bob").await;
    let mut ws = dial_peer(addr, "", Some(&cookie)).await.unwrap();
    let hello = frame(&mut ws, "hello").await;
    assert_eq!(hello["role"], "node");
    assert_eq!(hello["protocol_version"], 1);
    put(
        &mut ws,
        json!({"type":"hello","protocol_version":1,"node_id":"test-hub","role":"hub"}),
    )
    .await;
    // The node registers its peers with the hub.
    let reg = frame(&mut ws, "register").await;
    assert!(
        reg["peers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["tuic_session"] == tbob.as_str()),
        "{reg}"
    );
    put(&mut ws, json!({"type":"register_ack","id":reg["id"]})).await;

    // A sender that is not a hub address is forged: refused, never delivered.
    let send = |id: u64, mid: &str, from: &str, body: &str| json!({"type":"send","id":id,"message_id":mid,"from":from,"to":tbob,"message":body,"timestamp_ms":1});
    put(&mut ws, send(10, "m-forged", "bob", "forged")).await;
    let e = frame(&mut ws, "error").await;
    assert_eq!(
        (e["id"].as_u64(), e["code"].as_str()),
        (Some(10), Some("sender_forged")),
        "{e}"
    );
    // There is no frame that starts a process.
    put(&mut ws, json!({"type":"spawn","id":11,"command":"/bin/sh"})).await;
    let e = frame(&mut ws, "error").await;
    assert_eq!(
        (e["id"].as_u64(), e["code"].as_str()),
        (Some(11), Some("malformed")),
        "{e}"
    );
    // A proper relay is delivered once; its resend is a duplicate; its id with another body
    // is an identity collision.
    put(&mut ws, send(12, "m-1", "nodex/eve", "hello bob")).await;
    let a = frame(&mut ws, "send_ack").await;
    assert_eq!(
        (a["id"].as_u64(), a["outcome"].as_str()),
        (Some(12), Some("delivered")),
        "{a}"
    );
    put(&mut ws, send(13, "m-1", "nodex/eve", "hello bob")).await;
    let a = frame(&mut ws, "send_ack").await;
    assert_eq!(
        (a["id"].as_u64(), a["outcome"].as_str()),
        (Some(13), Some("duplicate")),
        "{a}"
    );
    put(&mut ws, send(14, "m-1", "nodex/eve", "another body")).await;
    let e = frame(&mut ws, "error").await;
    assert_eq!(
        (e["id"].as_u64(), e["code"].as_str()),
        (Some(14), Some("identity_collision")),
        "{e}"
    );
    // Unknown recipient: refused.
    put(&mut ws, json!({"type":"send","id":15,"message_id":"m-2","from":"nodex/eve","to":"nobody","message":"x","timestamp_ms":1})).await;
    let e = frame(&mut ws, "error").await;
    assert_eq!(
        (e["id"].as_u64(), e["code"].as_str()),
        (Some(15), Some("unknown_recipient")),
        "{e}"
    );

    // A plain node has no connections to list.
    let (err, e) = bob.tool("remote", json!({"action":"list"})).await;
    assert!(err);
    assert_eq!(e["code"], "not_a_hub", "{e}");
    let page = bob.ok(json!({"action":"inbox"})).await;
    let msgs = page["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "{page}");
    assert_eq!(msgs[0]["message"], "hello bob");
    assert_eq!(msgs[0]["from"], "nodex/eve");
    drop(ws);

    // The rings are durable: after kill -9 and a restart, the same relay is still a duplicate
    // once bob is back under the same identity.
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    let node = restart_node(None, &d, "0", "127.0.0.1");
    let addr = node.tcp.expect("tcp listener");
    let (mut bob, _) = Agent::register(
        &node.socket,
        json!({"action":"register","name":"bob","tuic_session":tbob}),
    )
    .await;
    let mut ws = dial_peer(addr, "", Some(&cookie)).await.unwrap();
    frame(&mut ws, "hello").await;
    put(
        &mut ws,
        json!({"type":"hello","protocol_version":1,"node_id":"test-hub","role":"hub"}),
    )
    .await;
    put(&mut ws, send(20, "m-1", "nodex/eve", "hello bob")).await;
    let a = frame(&mut ws, "send_ack").await;
    assert_eq!(
        (a["id"].as_u64(), a["outcome"].as_str()),
        (Some(20), Some("duplicate")),
        "{a}"
    );
    let page = bob.ok(json!({"action":"inbox","since":0})).await;
    assert_eq!(page["messages"].as_array().unwrap().len(), 0, "{page}");
}

/// Issue 40, finding 7: a token holder on `/mcp/peer` reads no local agent's mail (inbox and
/// wait of an agent that did not register over the link are refused, the mail stays), and a
/// second link with the same token is refused while the first answers its pings, replacing it
/// only once it has missed them.
#[tokio::test]
async fn the_peer_link_reads_no_local_mail_and_a_second_link_never_knocks_off_a_live_one() {
    let (_d, node, token) = start_node(None, json!({}), "0", "127.0.0.1");
    let addr = node.tcp.expect("tcp listener");
    let cookie = format!("tui-session={token}");
    let hub_hello = json!({"type":"hello","protocol_version":1,"node_id":"test-hub","role":"hub"});
    let (mut bob, tbob) = Agent::new(&node.socket, "bob").await;

    let mut live = dial_peer(addr, "", Some(&cookie)).await.unwrap();
    frame(&mut live, "hello").await;
    put(&mut live, hub_hello.clone()).await;
    let reg = frame(&mut live, "register").await;
    put(&mut live, json!({"type":"register_ack","id":reg["id"]})).await;
    put(&mut live, json!({"type":"send","id":10,"message_id":"m-1","from":"nodex/eve","to":tbob,"message":"for bob only","timestamp_ms":1})).await;
    let a = frame(&mut live, "send_ack").await;
    assert_eq!(a["outcome"], "delivered", "{a}");
    // Reading or waiting on bob's inbox over the link: refused, naming the rule.
    put(
        &mut live,
        json!({"type":"inbox","id":11,"recipient":tbob,"since":0}),
    )
    .await;
    let e = frame(&mut live, "error").await;
    assert_eq!(
        (e["id"].as_u64(), e["code"].as_str()),
        (Some(11), Some("sender_not_registered")),
        "{e}"
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("did not register over this link"),
        "{e}"
    );
    put(
        &mut live,
        json!({"type":"wait","id":12,"recipient":tbob,"since":0,"timeout_ms":1000}),
    )
    .await;
    let e = frame(&mut live, "error").await;
    assert_eq!(
        (e["id"].as_u64(), e["code"].as_str()),
        (Some(12), Some("sender_not_registered")),
        "{e}"
    );
    // Bob's mail is still there, unread.
    let page = bob.ok(json!({"action":"inbox"})).await;
    let msgs = page["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "{page}");
    assert_eq!(msgs[0]["message"], "for bob only");

    // A second link with the same token: refused with the reason, the live one stays.
    let mut second = dial_peer(addr, "", Some(&cookie)).await.unwrap();
    let e = frame(&mut second, "error").await;
    assert_eq!(e["code"], "unavailable", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("live peer link"),
        "{e}"
    );
    put(&mut live, json!({"type":"list_peers","id":13})).await;
    let p = frame(&mut live, "peers").await;
    assert_eq!(p["id"], 13, "{p}");
    assert!(
        node.log_text().contains("refused a second peer link"),
        "the refusal is logged"
    );

    // The live link goes silent: it stops answering pings. Once two are unanswered it is
    // proven dead, and a new link takes its place.
    let mut unanswered = 0;
    while unanswered < 2 {
        let m = tokio::time::timeout(Duration::from_secs(15), live.next())
            .await
            .expect("the node pings within its interval")
            .expect("link open")
            .expect("frame");
        if let Message::Text(t) = m
            && serde_json::from_str::<Value>(t.as_str()).unwrap()["type"] == "ping"
        {
            unanswered += 1;
        }
    }
    let mut third = dial_peer(addr, "", Some(&cookie)).await.unwrap();
    frame(&mut third, "hello").await;
    put(&mut third, hub_hello).await;
    let reg = frame(&mut third, "register").await;
    assert!(reg["peers"].to_string().contains(&tbob), "{reg}");
    // The node closes the dead link it replaced.
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(m)) = live.next().await {
            if matches!(m, Message::Close(_)) {
                break;
            }
        }
    })
    .await
    .expect("the replaced link is closed");
    assert!(
        node.log_text()
            .contains("a new peer link replaced one that was not proven live"),
        "the replacement is logged"
    );
}

/// Accepts the hub's next peer-link WebSocket on a fake node's listener (answering the hub's
/// plain HTTP mirror requests 404), returning it with the cookie the hub sent.
async fn fake_accept(
    l: &tokio::net::TcpListener,
) -> (
    tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    String,
) {
    let (tcp, head) = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let (mut tcp, _) = l.accept().await.unwrap();
            // The request head, read without consuming it (the WebSocket handshake reads it).
            let mut buf = [0u8; 4096];
            let head = loop {
                let n = tcp.peek(&mut buf).await.unwrap();
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                if text.contains("\r\n\r\n") || n == buf.len() {
                    break text;
                }
                tokio::task::yield_now().await;
            };
            if head.starts_with("GET /mcp/peer ") {
                return (tcp, head);
            }
            use tokio::io::AsyncWriteExt;
            let _ = tcp
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
        }
    })
    .await
    .expect("the hub dials the peer link");
    let cookie = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("cookie: ")
                .or_else(|| l.strip_prefix("Cookie: "))
        })
        .unwrap_or_default()
        .to_owned();
    (tokio_tungstenite::accept_async(tcp).await.unwrap(), cookie)
}

/// The node side of the handshake on a fake node: hello, then `register` of `peers` (its ack is
/// left unread: mail may already follow it).
async fn fake_handshake<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>, peers: Value)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let hello = frame(ws, "hello").await;
    assert_eq!(hello["role"], "hub");
    put(
        ws,
        json!({"type":"hello","protocol_version":1,"node_id":"fake","role":"node"}),
    )
    .await;
    put(ws, json!({"type":"register","id":1,"peers":peers})).await;
}

#[tokio::test]
async fn a_mute_node_does_not_hold_mail_to_another_and_a_dropped_send_is_resent_with_its_id() {
    let hub_dir = config_dir(json!({"tuning": {"peer_send_wait_ms": 300}}));
    let hub = NodeProc::start("tuic-hub", &["--config-dir", &s(&hub_dir)], &[]).unwrap();
    let (mut hank, _) = Agent::new(&hub.socket, "hank").await;
    // A mute node: accepts TCP and never answers.
    let mute = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    connect(
        &hub_dir,
        "mute",
        &format!("http://{}", mute.local_addr().unwrap()),
        "t1",
    );
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = mute.accept().await {
            conns.push(c);
        }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    connect(
        &hub_dir,
        "fake",
        &format!("http://{}", l.local_addr().unwrap()),
        "t2",
    );
    let (mut ws, _) = fake_accept(&l).await;
    fake_handshake(&mut ws, json!([{"tuic_session":"mallory"}])).await;
    // Mail to the healthy node flows while the mute one's handshake hangs.
    let r = hank.send("fake/mallory", "first").await;
    let m = frame(&mut ws, "send").await;
    assert_eq!(m["message"], "first");
    assert_eq!(m["to"], "mallory");
    assert!(m["from"].as_str().unwrap().starts_with("local/"), "{m}");
    assert_eq!(m["message_id"], r["message_id"]);
    // The link drops before the node acknowledges: the hub resends the same message id on the
    // next link, and the sender was never told it was delivered.
    assert_ne!(r["status"], "delivered", "{r}");
    drop(ws);
    let (mut ws, _) = fake_accept(&l).await;
    fake_handshake(&mut ws, json!([{"tuic_session":"mallory"}])).await;
    let again = frame(&mut ws, "send").await;
    assert_eq!(again["message_id"], m["message_id"]);
    assert_eq!(again["message"], "first");
    put(&mut ws, json!({"type":"send_ack","id":again["id"],"message_id":again["message_id"],"outcome":"delivered"})).await;
    // Acknowledged: the hub's outbox for that node empties.
    let deadline = Instant::now() + Duration::from_secs(10);
    while connection(&hub, "fake").await["outbox_held"] != 0 {
        assert!(
            Instant::now() < deadline,
            "{}",
            connection(&hub, "fake").await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let c = connection(&hub, "mute").await;
    assert_eq!(c["peer_link_up"], false, "{c}");

    // A refusal that arrives after the sender stopped waiting becomes a notice in its inbox.
    let r = hank.send("fake/ghost", "boo").await;
    assert_eq!(r["status"], "accepted", "{r}");
    let m = frame(&mut ws, "send").await;
    assert_eq!(m["message_id"], r["message_id"]);
    put(
        &mut ws,
        json!({"type":"error","id":m["id"],"code":"unknown_recipient","connection":"fake","message":"recipient 'ghost' is not registered"}),
    )
    .await;
    let n = hank.collect(1, Duration::from_secs(10)).await;
    assert_eq!(n[0]["kind"], "delivery_refused", "{n:?}");
    assert_eq!(n[0]["from"], "tuic");
    let text = n[0]["message"].as_str().unwrap();
    assert!(
        text.contains(r["message_id"].as_str().unwrap())
            && text.contains("'fake'")
            && text.contains("unknown_recipient"),
        "{text}"
    );
    held.abort();
}

#[tokio::test]
async fn hub_dials_with_the_token_cookie_and_stamps_senders_it_can_prove() {
    let hub_dir = config_dir(json!({}));
    let hub = NodeProc::start(
        "tuic-hub",
        &["--config-dir", &s(&hub_dir)],
        &[("TUIC_LOG", "info")],
    )
    .unwrap();
    let (mut hank, thank) = Agent::new(&hub.socket, "hank").await;
    // A fake node: a WebSocket server on loopback that records the hub's cookie.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    connect(&hub_dir, "fake", &url, "the-node-token");
    let (mut ws, cookie) = fake_accept(&l).await;
    assert_eq!(cookie, "tui-session=the-node-token");
    let hello = frame(&mut ws, "hello").await;
    assert_eq!(hello["role"], "hub");
    put(
        &mut ws,
        json!({"type":"hello","protocol_version":1,"node_id":"fake","role":"node"}),
    )
    .await;
    put(
        &mut ws,
        json!({"type":"register","id":1,"peers":[{"tuic_session":"mallory","name":"mallory"}]}),
    )
    .await;
    let a = frame(&mut ws, "register_ack").await;
    assert_eq!(a["id"], 1);
    hank.sees("fake/mallory", Duration::from_secs(10)).await;

    let send = |id: u64, mid: &str, from: &str| json!({"type":"send","id":id,"message_id":mid,"from":from,"to":format!("local/{thank}"),"message":format!("from {from}"),"timestamp_ms":1});
    // A peer this node never registered, and a peer of another host: refused.
    put(&mut ws, send(2, "x-1", "bob")).await;
    let e = frame(&mut ws, "error").await;
    assert_eq!(
        (e["id"].as_u64(), e["code"].as_str()),
        (Some(2), Some("sender_not_registered")),
        "{e}"
    );
    assert_eq!(e["connection"], "fake");
    put(&mut ws, send(3, "x-2", "nodec/carol")).await;
    let e = frame(&mut ws, "error").await;
    assert_eq!(
        (e["id"].as_u64(), e["code"].as_str()),
        (Some(3), Some("sender_forged")),
        "{e}"
    );
    // Its own peer: delivered, stamped with the connection's address.
    put(&mut ws, send(4, "x-3", "mallory")).await;
    let a = frame(&mut ws, "send_ack").await;
    assert_eq!(
        (a["id"].as_u64(), a["outcome"].as_str()),
        (Some(4), Some("delivered")),
        "{a}"
    );
    let m = hank.collect(1, Duration::from_secs(10)).await;
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["from"], "fake/mallory");
    assert_eq!(m[0]["message"], "from mallory");
    let page = hank.ok(json!({"action":"inbox","since":0})).await;
    assert_eq!(page["messages"].as_array().unwrap().len(), 1, "{page}");

    // The link drops: the node's shadows are retired at once.
    drop(ws);
    wait_link(&hub, "fake", false, Duration::from_secs(10)).await;
    let peers = hank.ok(json!({"action":"list_peers"})).await;
    assert!(!peers.to_string().contains("fake/mallory"), "{peers}");
    let c = connection(&hub, "fake").await;
    assert!(!c.to_string().contains("the-node-token"), "{c}");
}

#[tokio::test]
async fn full_outboxes_refuse_naming_the_connection_and_survive_a_restart() {
    let tuning = json!({"tuning": {"peer_outbox_max_messages": 2}});
    // A hub whose node is unreachable: mail waits in the hub's outbox for `nodec`.
    let hub_dir = config_dir(tuning.clone());
    let mut hub = NodeProc::start("tuic-hub", &["--config-dir", &s(&hub_dir)], &[]).unwrap();
    connect(&hub_dir, "nodec", "http://127.0.0.1:9", "tok");
    let (mut hank, _) = Agent::new(&hub.socket, "hank").await;
    for i in 0..2 {
        let r = hank.send("nodec/carol", &format!("held-{i}")).await;
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(r["connection"], "nodec");
    }
    let (err, e) = hank
        .call(json!({"action":"send","to":"nodec/carol","message":"one too many"}))
        .await;
    assert!(err);
    assert_eq!(e["code"], "outbox_full", "{e}");
    assert_eq!(e["connection"], "nodec", "{e}");
    assert!(e["error"].as_str().unwrap().contains("nodec"), "{e}");
    // kill -9: the accepted mail is still held after the restart.
    hub.child.kill().unwrap();
    hub.child.wait().unwrap();
    let hub = NodeProc::start("tuic-hub", &["--config-dir", &s(&hub_dir)], &[]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while connection(&hub, "nodec").await["outbox_held"] != 2 {
        assert!(
            Instant::now() < deadline,
            "{}",
            connection(&hub, "nodec").await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A node behind this hub: the hub's full outbox for `nodec` refuses its send, and the
    // refusal names `nodec`, not the node's own uplink.
    let (_bd, b, btoken) = start_node(None, json!({}), "0", "127.0.0.1");
    connect(
        &hub_dir,
        "nodeb",
        &format!("http://{}", b.tcp.unwrap()),
        &btoken,
    );
    wait_link(&hub, "nodeb", true, Duration::from_secs(15)).await;
    let (mut bea, _) = Agent::new(&b.socket, "bea").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let e = loop {
        let (err, e) = bea
            .call(json!({"action":"send","to":"nodec/carol","message":"via the hub"}))
            .await;
        // Until the hub has bea's registration the answer may still be pending (`accepted`).
        if err {
            break e;
        }
        assert!(Instant::now() < deadline, "never refused: {e}");
    };
    assert_eq!(e["code"], "outbox_full", "{e}");
    assert_eq!(e["connection"], "nodec", "{e}");

    // A node without a hub: its own outbox fills and refuses naming its uplink; local mail
    // keeps working.
    let (_d, node, _) = start_node(None, tuning, "0", "127.0.0.1");
    let (mut bob, tbob) = Agent::new(&node.socket, "bob").await;
    let (mut ann, _) = Agent::new(&node.socket, "ann").await;
    for i in 0..2 {
        let r = bob.send("nodec/carol", &format!("queued-{i}")).await;
        assert_eq!(r["status"], "accepted", "{r}");
    }
    let (err, e) = bob
        .call(json!({"action":"send","to":"nodec/carol","message":"x"}))
        .await;
    assert!(err);
    assert_eq!(e["code"], "outbox_full", "{e}");
    assert_eq!(e["connection"], "hub", "{e}");
    let r = ann.send(&tbob, "local still works").await;
    assert_eq!(r["delivered"], true, "{r}");
    assert_eq!(
        bob.collect(1, Duration::from_secs(5)).await[0]["message"],
        "local still works"
    );
}

#[tokio::test]
async fn a_send_accepted_before_kill_9_is_delivered_once_after_restart() {
    // Both links stay down for tens of seconds: with the default 30 s (+ jitter) reconnect
    // pause the hub could take a minute to come back; what this test shows is the outbox, so
    // the hub retries at most every 3 s (+ jitter).
    let st = star_configs(
        json!({}),
        json!({"tuning": {"peer_reconnect_max_ms": 3_000}}),
    )
    .await;
    let (mut bob, tbob) = Agent::new(&st.b.socket, "bob").await;
    let (mut carol, tcarol) = Agent::new(&st.c_socket, "carol").await;
    let a_carol = format!("nodec/{tcarol}");
    bob.sees(&a_carol, Duration::from_secs(10)).await;
    // C's link goes down (a silent partition, found by liveness).
    st.net.set_link(1, false).unwrap();
    wait_link(&st.hub, "nodec", false, Duration::from_secs(30)).await;
    // B's link too, so B itself must hold the mail; then B is killed right after accepting.
    st.net.set_link(0, false).unwrap();
    let r = bob.send(&a_carol, "survivor").await;
    assert!(
        matches!(r["status"].as_str(), Some("accepted" | "uncertain")),
        "{r}"
    );
    let id = r["message_id"].as_str().unwrap().to_owned();
    let Star {
        net,
        b_dir,
        mut b,
        hub,
        ..
    } = st;
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    drop(bob);
    let _ = tbob;
    wait_link(&hub, "nodeb", false, Duration::from_secs(30)).await;
    net.set_link(0, true).unwrap();
    let b2 = restart_node(Some(net.node(0)), &b_dir, "9876", "0.0.0.0");
    wait_link(&hub, "nodeb", true, Duration::from_secs(45)).await;
    net.set_link(1, true).unwrap();
    wait_link(&hub, "nodec", true, Duration::from_secs(45)).await;
    let got = carol.collect(1, Duration::from_secs(20)).await;
    assert_eq!(got[0]["message_id"], id.as_str());
    assert_eq!(got[0]["message"], "survivor");
    // Exactly once: a marker sent after it arrives with nothing else.
    let (mut bob2, _) = Agent::new(&b2.socket, "bob2").await;
    bob2.sees(&a_carol, Duration::from_secs(10)).await;
    bob2.send(&a_carol, "marker").await;
    let m = carol.collect(1, Duration::from_secs(20)).await;
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(m[0]["message"], "marker");
    let page = carol.ok(json!({"action":"inbox","since":0})).await;
    let n = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["message_id"] == id.as_str())
        .count();
    assert_eq!(n, 1, "{page}");
}

#[tokio::test]
async fn hub_session_tool_routes_remote_addresses_to_the_owner_over_http() {
    let st = star().await;
    let (mut hank, _) = Agent::new(&st.hub.socket, "hank").await;
    let created = ipc(
        &st.b.socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 24, "cols": 80, "shell": "/bin/sh"})),
    )
    .await
    .unwrap();
    assert_eq!(created.status, 200);
    let sid = created.json()["session_id"].as_str().unwrap().to_owned();
    let address = format!("nodeb/{sid}");

    // remote: the hub's connections, never their tokens.
    let (err, l) = hank.tool("remote", json!({"action":"list"})).await;
    assert!(!err, "{l}");
    let ids: Vec<&str> = l["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["nodeb", "nodec"], "{l}");
    let (err, c) = hank
        .tool("remote", json!({"action":"status","connection_id":"nodec"}))
        .await;
    assert!(!err, "{c}");
    assert_eq!(c["peer_link_up"], true, "{c}");
    let (err, e) = hank
        .tool("remote", json!({"action":"status","connection_id":"nope"}))
        .await;
    assert!(err);
    assert_eq!(e["code"], "unknown_connection", "{e}");

    // list: the remote row with its address.
    let deadline = Instant::now() + Duration::from_secs(10);
    let row = loop {
        let (err, l) = hank.tool("session", json!({"action":"list"})).await;
        assert!(!err, "{l}");
        if let Some(r) = l["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["address"] == address.as_str())
        {
            break r.clone();
        }
        assert!(Instant::now() < deadline, "{l}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(row["connection_id"], "nodeb");
    assert_eq!(row["is_remote"], true);

    // input then output, through the owner's routes.
    let (err, r) = hank
        .tool("session", json!({"action":"input","session_id":address,"input":"echo fed-$((6*7))","special_key":"enter"}))
        .await;
    assert!(!err, "{r}");
    assert_eq!(r["ok"], true);
    let deadline = Instant::now() + Duration::from_secs(10);
    let out = loop {
        let (err, o) = hank
            .tool("session", json!({"action":"output","session_id":address}))
            .await;
        assert!(!err, "{o}");
        if o["data"].as_str().unwrap_or_default().contains("fed-42") {
            break o;
        }
        assert!(Instant::now() < deadline, "{o}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The node's own MCP output contract: the same fields as its `format=mcp` route.
    let own = ipc(
        &st.b.socket,
        "GET",
        &format!("/sessions/{sid}/output?format=mcp"),
        None,
    )
    .await
    .unwrap()
    .json();
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&out), keys(&own), "{out} vs {own}");
    // Deltas with the node's cursor.
    let (err, d) = hank
        .tool(
            "session",
            json!({"action":"output","session_id":address,"since_cursor":out["cursor"]}),
        )
        .await;
    assert!(!err, "{d}");
    assert!(
        !d["data"].as_str().unwrap_or_default().contains("fed-42"),
        "{d}"
    );

    // status from the mirror; submit answers with the owner's receipt or its refusal.
    let (err, s) = hank
        .tool("session", json!({"action":"status","session_id":address}))
        .await;
    assert!(!err, "{s}");
    assert_eq!(s["session_id"], sid.as_str());
    let (err, r) = hank
        .tool(
            "session",
            json!({"action":"submit","session_id":address,"input":"echo sub","timeout_ms":500}),
        )
        .await;
    if err {
        assert_eq!(r["connection"], "nodeb", "{r}");
        assert!(r.get("retry_safe").is_some(), "{r}");
    } else {
        assert!(r.get("ack").is_some(), "{r}");
    }

    // Process control beyond input is not routed; bad addresses are refused up front.
    let (err, e) = hank
        .tool("session", json!({"action":"kill","session_id":address}))
        .await;
    assert!(err);
    assert_eq!(e["code"], "not_routed", "{e}");
    for bad in ["nodeb/", "/x"] {
        let (err, e) = hank
            .tool("session", json!({"action":"output","session_id":bad}))
            .await;
        assert!(err);
        assert_eq!(e["code"], "invalid_address", "{bad}: {e}");
    }
    let (err, e) = hank
        .tool("session", json!({"action":"output","session_id":"nope/1"}))
        .await;
    assert!(err);
    assert_eq!(e["code"], "unknown_connection", "{e}");
    let (err, e) = hank
        .tool(
            "session",
            json!({"action":"output","session_id":"nodeb/nosuch"}),
        )
        .await;
    assert!(err);
    assert_eq!(e["code"], "unknown_session", "{e}");
    assert_eq!(e["connection"], "nodeb", "{e}");
    // The REST proxy refuses empty ids and prefixes the same way, before choosing an owner.
    for bad in ["nodeb%2F", "%2Fx"] {
        let r = ipc(
            &st.hub.socket,
            "GET",
            &format!("/sessions/{bad}/output"),
            None,
        )
        .await
        .unwrap();
        assert_eq!(r.status, 400, "{bad}: {:?}", r.json());
    }
}
