//! The peer link over QUIC: real `tuic-node`s and a real `tuic-hub` in their own network
//! namespaces (UDP between them, nft to block it), agents as MCP clients on each process's IPC
//! socket; and a node on loopback that a raw QUIC client (the project's own dialer) attacks
//! with garbage datagrams, a wrong certificate pin, a wrong token and many streams.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::agent::Agent;
use tuic_tests::fed::{FedBed, FedNode, connections};
use tuic_tests::netns::Net;
use tuic_tests::{NodeProc, config_dir, ipc, run_with_stdin};

fn s(d: &tempfile::TempDir) -> String {
    d.path().to_str().unwrap().to_owned()
}

/// Polls `GET /hub/connections` until connection `id`'s row satisfies `want` (bounded).
async fn wait_row(
    hub: &NodeProc,
    id: &str,
    limit: Duration,
    want: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let rows = connections(hub).await.unwrap();
        let row = rows
            .iter()
            .find(|c| c["id"] == id)
            .cloned()
            .unwrap_or(Value::Null);
        if want(&row) {
            return row;
        }
        assert!(
            Instant::now() < deadline,
            "connection {id} never matched: {row}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The UDP sockets process `pid` holds: its socket descriptors whose inodes are in its
/// namespace's `/proc/net/udp` and `udp6` tables.
fn udp_sockets(pid: u32) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for t in ["udp", "udp6"] {
        let table = std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).unwrap_or_default();
        for line in table.lines().skip(1) {
            if let Some(ino) = line.split_whitespace().nth(9) {
                inodes.insert(ino.to_owned());
            }
        }
    }
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .filter(|ino| inodes.contains(ino))
        .count()
}

fn link_up_over(t: &'static str) -> impl Fn(&Value) -> bool {
    move |r| r["peer_link_up"] == true && r["transport"] == t
}

/// The node's `/health`.
async fn health(node: &NodeProc) -> Value {
    ipc(&node.socket, "GET", "/health", None)
        .await
        .unwrap()
        .json()
}

fn connect(hub_dir: &tempfile::TempDir, id: &str, url: &str, token: &str, extra: &[&str]) {
    let mut args = vec![
        "connect",
        "--config-dir",
        hub_dir.path().to_str().unwrap(),
        "--id",
        id,
        "--url",
        url,
        "--token-stdin",
    ];
    args.extend_from_slice(extra);
    let (code, _, err) = run_with_stdin("tuic-hub", &args, token).unwrap();
    assert_eq!(code, 0, "{err}");
}

fn hub_in(net: &Net, dir: &tempfile::TempDir) -> NodeProc {
    NodeProc::start_in(
        Some(net.hub()),
        "tuic-hub",
        &["--config-dir", &s(dir)],
        &[("TUIC_LOG", "info")],
    )
    .unwrap()
}

/// Runs `nft` inside namespace `ns`.
fn nft(ns: &str, script: &str) {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(script.as_bytes())?;
            c.wait_with_output()
        })
        .expect("running nft (apt-get install nftables)");
    assert!(
        out.status.success(),
        "nft: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn mail_and_listings_travel_over_quic_with_the_certificate_pinned() {
    let bed = FedBed::start(2).await.unwrap();
    for n in &bed.nodes {
        let row = wait_row(
            &bed.hub,
            &n.id,
            Duration::from_secs(20),
            link_up_over("quic"),
        )
        .await;
        // Pinned on first use: the fingerprint the node advertises, shown and saved.
        let h = health(n.proc()).await;
        assert_eq!(h["quic"]["port"], 9876, "{h}");
        assert_eq!(
            row["quic_fingerprint"], h["quic"]["fingerprint"],
            "{row} {h}"
        );
        assert_eq!(row["transport_preference"], "auto");
    }
    // Both QUIC links share the hub's one client UDP socket (issue 46, item 1): the hub holds
    // one UDP socket, plus its own QUIC listener when it serves one.
    let listener = usize::from(health(&bed.hub).await.get("quic").is_some());
    assert_eq!(udp_sockets(bed.hub.pid()), 1 + listener);
    let saved = std::fs::read_to_string(bed.hub_dir.path().join("config.json")).unwrap();
    let fp = health(bed.nodes[0].proc()).await["quic"]["fingerprint"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(saved.contains(&fp), "{saved}");

    let (mut bob, tbob) = Agent::new(&bed.nodes[0].proc().socket, "bob").await;
    let (mut carol, tcarol) = Agent::new(&bed.nodes[1].proc().socket, "carol").await;
    let (mut hank, thank) = Agent::new(&bed.hub.socket, "hank").await;
    let (a_bob, a_carol, a_hank) = (
        format!("nodeb/{tbob}"),
        format!("nodec/{tcarol}"),
        format!("local/{thank}"),
    );
    // Peer listings cross the link: each side lists the others with addresses.
    hank.sees(&a_bob, Duration::from_secs(10)).await;
    bob.sees(&a_carol, Duration::from_secs(10)).await;
    carol.sees(&a_hank, Duration::from_secs(10)).await;

    const N: usize = 20;
    for i in 0..N {
        let r = bob.send(&a_carol, &format!("q-{i}")).await;
        assert!(
            matches!(r["status"].as_str(), Some("delivered" | "accepted")),
            "{r}"
        );
        assert_eq!(r["delivery_path"], "peer_link");
    }
    let got = carol.collect(N, Duration::from_secs(30)).await;
    let bodies: Vec<&str> = got.iter().map(|m| m["message"].as_str().unwrap()).collect();
    let want: Vec<String> = (0..N).map(|i| format!("q-{i}")).collect();
    assert_eq!(bodies, want);
    assert!(got.iter().all(|m| m["from"] == a_bob.as_str()));
    let r = carol.send(&a_hank, "c2h").await;
    assert_eq!(r["status"], "delivered", "{r}");
    assert_eq!(
        hank.collect(1, Duration::from_secs(10)).await[0]["message"],
        "c2h"
    );

    // A session on node B is listed on the hub under its address.
    let created = ipc(
        &bed.nodes[0].proc().socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 24, "cols": 80, "shell": "/bin/sh"})),
    )
    .await
    .unwrap();
    assert_eq!(created.status, 200, "{:?}", created.body);
    let address = format!("nodeb/{}", created.json()["session_id"].as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = ipc(&bed.hub.socket, "GET", "/sessions", None)
            .await
            .unwrap()
            .json();
        let listed = rows
            .as_array()
            .is_some_and(|v| v.iter().any(|r| r["address"] == address.as_str()));
        if listed {
            break;
        }
        assert!(Instant::now() < deadline, "{address} not listed: {rows}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Still QUIC after all that.
    wait_row(
        &bed.hub,
        "nodeb",
        Duration::from_secs(1),
        link_up_over("quic"),
    )
    .await;
}

#[tokio::test]
async fn blocked_udp_or_a_node_without_quic_falls_back_to_the_websocket() {
    let net = Net::star(2).unwrap();
    // Node B offers QUIC but its namespace drops every UDP packet to the port.
    nft(
        net.node(0),
        "table inet tq {\n chain input {\n type filter hook input priority 0; policy accept;\n udp dport 9876 drop\n }\n}\n",
    );
    let b = FedNode::start("nodeb", net.node(0), net.node_addr(0), json!({})).unwrap();
    assert!(health(b.proc()).await["quic"]["fingerprint"].is_string());
    // Node C has QUIC switched off: /health offers none.
    let c = FedNode::start(
        "nodec",
        net.node(1),
        net.node_addr(1),
        json!({"services": {"server": {"quic_enabled": false}}}),
    )
    .unwrap();
    assert!(health(c.proc()).await.get("quic").is_none());
    let hd = config_dir(json!({}));
    let hub = hub_in(&net, &hd);
    connect(&hd, "nodeb", &b.url, &b.token, &[]);
    connect(&hd, "nodec", &c.url, &c.token, &[]);
    wait_row(
        &hub,
        "nodeb",
        Duration::from_secs(30),
        link_up_over("websocket"),
    )
    .await;
    wait_row(
        &hub,
        "nodec",
        Duration::from_secs(30),
        link_up_over("websocket"),
    )
    .await;

    let (mut bob, _) = Agent::new(&b.proc().socket, "bob").await;
    let (mut carol, tcarol) = Agent::new(&c.proc().socket, "carol").await;
    let a_carol = format!("nodec/{tcarol}");
    bob.sees(&a_carol, Duration::from_secs(10)).await;
    let r = bob.send(&a_carol, "over tcp").await;
    assert!(
        matches!(r["status"].as_str(), Some("delivered" | "accepted")),
        "{r}"
    );
    assert_eq!(
        carol.collect(1, Duration::from_secs(20)).await[0]["message"],
        "over tcp"
    );

    // Forcing QUIC on the blocked node: no fallback, the failure is named.
    connect(&hd, "nodeb", &b.url, &b.token, &["--transport", "quic"]);
    let row = wait_row(&hub, "nodeb", Duration::from_secs(30), |r| {
        r["transport_preference"] == "quic"
            && r["peer_link_up"] == false
            && r["peer_last_error"]
                .as_str()
                .is_some_and(|e| e.contains("QUIC"))
    })
    .await;
    assert!(!row["peer_last_error"].as_str().unwrap().contains(&b.token));
}

#[tokio::test]
async fn a_changed_certificate_refuses_the_link_naming_both_fingerprints() {
    let mut bed = FedBed::start(2).await.unwrap();
    let row = wait_row(
        &bed.hub,
        "nodeb",
        Duration::from_secs(20),
        link_up_over("quic"),
    )
    .await;
    wait_row(
        &bed.hub,
        "nodec",
        Duration::from_secs(20),
        link_up_over("quic"),
    )
    .await;
    let old = row["quic_fingerprint"].as_str().unwrap().to_owned();

    // Node B's certificate is replaced (files removed, a new pair generated at restart).
    bed.nodes[0].kill9();
    for f in ["quic-cert.der", "quic-key.der"] {
        std::fs::remove_file(bed.nodes[0].dir.path().join(f)).unwrap();
    }
    bed.nodes[0].restart().unwrap();
    let new = health(bed.nodes[0].proc()).await["quic"]["fingerprint"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(old, new);
    let row = wait_row(&bed.hub, "nodeb", Duration::from_secs(45), |r| {
        r["peer_last_error"]
            .as_str()
            .is_some_and(|e| e.contains("certificate changed"))
    })
    .await;
    let e = row["peer_last_error"].as_str().unwrap();
    assert!(e.contains(&format!("pinned {old}")), "{e}");
    assert!(e.contains(&format!("presented {new}")), "{e}");
    assert_eq!(row["peer_link_up"], false, "{row}");
    assert_eq!(row["quic_fingerprint"], old.as_str());
    // The mirror (plain HTTP, token-authenticated) is unaffected; the link does not fall back.
    wait_row(&bed.hub, "nodeb", Duration::from_secs(30), |r| {
        r["up"] == true
    })
    .await;
    let row = wait_row(&bed.hub, "nodeb", Duration::from_secs(1), |_| true).await;
    assert_eq!(row["peer_link_up"], false, "{row}");
    let log = bed.hub.log_text();
    assert!(log.contains("QUIC peer link refused"), "{log}");

    // Nothing else is disturbed: node C's link carries mail.
    wait_row(
        &bed.hub,
        "nodec",
        Duration::from_secs(1),
        link_up_over("quic"),
    )
    .await;
    let (mut hank, _) = Agent::new(&bed.hub.socket, "hank").await;
    let (mut carol, tcarol) = Agent::new(&bed.nodes[1].proc().socket, "carol").await;
    let a_carol = format!("nodec/{tcarol}");
    hank.sees(&a_carol, Duration::from_secs(10)).await;
    let r = hank.send(&a_carol, "still here").await;
    assert!(
        matches!(r["status"].as_str(), Some("delivered" | "accepted")),
        "{r}"
    );
    assert_eq!(
        carol.collect(1, Duration::from_secs(20)).await[0]["message"],
        "still here"
    );

    // The operator connects again: the new certificate is trusted (first use again).
    let (url, token) = (bed.nodes[0].url.clone(), bed.nodes[0].token.clone());
    connect(&bed.hub_dir, "nodeb", &url, &token, &[]);
    let row = wait_row(
        &bed.hub,
        "nodeb",
        Duration::from_secs(30),
        link_up_over("quic"),
    )
    .await;
    assert_eq!(row["quic_fingerprint"], new.as_str());
}

/// `kill -9` sends nothing over UDP: the restarted node answers the hub's next packet on the old
/// connection with a stateless reset (its reset key survives restarts), so the link comes back
/// well inside the 15 s liveness deadline that would otherwise have to notice first.
#[tokio::test]
async fn a_killed_and_restarted_node_gets_its_quic_link_back_without_waiting_for_liveness() {
    let mut bed = FedBed::start(1).await.unwrap();
    wait_row(
        &bed.hub,
        "nodeb",
        Duration::from_secs(20),
        link_up_over("quic"),
    )
    .await;
    bed.nodes[0].kill9();
    bed.nodes[0].restart().unwrap();
    let restarted = Instant::now();
    wait_row(&bed.hub, "nodeb", Duration::from_secs(20), |r| {
        r["peer_link_up"] == false
    })
    .await;
    let down = restarted.elapsed();
    wait_row(
        &bed.hub,
        "nodeb",
        Duration::from_secs(20),
        link_up_over("quic"),
    )
    .await;
    let back = restarted.elapsed();
    eprintln!("link down {down:?} and back over QUIC {back:?} after the restart");
    assert!(down < Duration::from_secs(8), "down only after {down:?}");
    assert!(back < Duration::from_secs(12), "back only after {back:?}");
}

#[tokio::test]
async fn a_wrong_token_over_quic_is_refused_with_a_clear_reason_and_a_log_line() {
    let net = Net::star(1).unwrap();
    let b = FedNode::start("nodeb", net.node(0), net.node_addr(0), json!({})).unwrap();
    let hd = config_dir(json!({}));
    let hub = hub_in(&net, &hd);
    connect(
        &hd,
        "nodeb",
        &b.url,
        "not-the-token",
        &["--transport", "quic"],
    );
    let row = wait_row(&hub, "nodeb", Duration::from_secs(20), |r| {
        r["peer_last_error"]
            .as_str()
            .is_some_and(|e| e.contains("wrong token"))
    })
    .await;
    assert_eq!(row["peer_link_up"], false);
    assert!(
        !row["peer_last_error"]
            .as_str()
            .unwrap()
            .contains("not-the-token")
    );
    let log = std::fs::read_to_string(&b.proc().log).unwrap();
    assert!(
        log.contains("peer link refused") && log.contains("wrong token"),
        "{log}"
    );
    assert_eq!(health(b.proc()).await["ok"], true);
}

/// A loopback node with remote access on an ephemeral port; its QUIC address, fingerprint and
/// token.
fn loopback_node() -> (
    tempfile::TempDir,
    NodeProc,
    std::net::SocketAddr,
    String,
    String,
) {
    let d = config_dir(json!({}));
    let (code, _, err) =
        run_with_stdin("tuic-node", &["set-password", "--config-dir", &s(&d)], "pw").unwrap();
    assert_eq!(code, 0, "{err}");
    let node = NodeProc::start(
        "tuic-node",
        &[
            "--config-dir",
            &s(&d),
            "--remote-access",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
        ],
        &[("TUIC_LOG", "info")],
    )
    .unwrap();
    let (_, token, _) =
        run_with_stdin("tuic-node", &["token", "--config-dir", &s(&d)], "").unwrap();
    let fp = tuic_node::link::tls::load_or_create(d.path())
        .unwrap()
        .fingerprint;
    let addr = std::net::SocketAddr::new(
        [127, 0, 0, 1].into(),
        node.tcp.expect("tcp listener").port(),
    );
    (d, node, addr, fp, token.trim().to_owned())
}

#[tokio::test]
async fn garbage_wrong_pins_wrong_tokens_and_stream_floods_leave_the_node_serving() {
    use tuic_hub::link::{DialError, connect_quic as connect};
    use tuic_node::link::quic::{MAX_BIDI_STREAMS, STOP_BAD_STREAM};
    let (_d, node, addr, fp, token) = loopback_node();
    let h = health(&node).await;
    assert_eq!(h["quic"]["fingerprint"], fp.as_str(), "{h}");
    assert_eq!(h["quic"]["port"], addr.port(), "{h}");
    let limit = Duration::from_secs(5);

    // Garbage datagrams: random bytes, and packets that start like QUIC long headers.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..2_000u32 {
        let mut p: Vec<u8> = (0..(1 + i % 1300))
            .map(|j| (i * 31 + j * 7) as u8)
            .collect();
        if i % 2 == 0 {
            p[0] = 0xc0;
        }
        udp.send_to(&p, addr).unwrap();
    }

    // A certificate other than the pinned one is refused during the handshake.
    let wrong = format!("sha256:{}", "0".repeat(64));
    match connect(addr, &wrong, &token, limit).await {
        Err(DialError::Refused(e)) => {
            assert!(e.contains(&format!("pinned {wrong}")), "{e}");
            assert!(e.contains(&format!("presented {fp}")), "{e}");
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    // A wrong token: closed with the reason.
    match connect(addr, &fp, "nope", limit).await {
        Err(DialError::Refused(e)) => assert!(e.contains("wrong token"), "{e}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }

    // The right pin and token: a link. Its peer opens 10,000 more streams, one after another
    // (at most MAX_BIDI_STREAMS at once): each is refused, the link stays.
    let (mut io, _endpoint) = connect(addr, &fp, &token, limit).await.unwrap();
    let conn = io.connection().clone();
    for i in 0..10_000 {
        let (mut send, mut recv) = tokio::time::timeout(limit, conn.open_bi())
            .await
            .expect("stream credit comes back as extra streams are refused")
            .unwrap();
        let _ = send.write_all(b"\x00\x00\x00\x02{}").await;
        let r = tokio::time::timeout(limit, recv.read_to_end(1024))
            .await
            .expect("an extra stream is answered");
        match r {
            Err(quinn::ReadToEndError::Read(quinn::ReadError::Reset(code))) => {
                assert_eq!(code.into_inner(), u64::from(STOP_BAD_STREAM), "stream {i}");
            }
            other => panic!("stream {i}: expected a reset, got {other:?}"),
        }
    }
    // At most MAX_BIDI_STREAMS can be open at once: the next ones wait for credit.
    let mut held = Vec::new();
    let mut opened = 0;
    for _ in 0..(MAX_BIDI_STREAMS + 4) {
        match tokio::time::timeout(Duration::from_millis(300), conn.open_bi()).await {
            Ok(Ok(s)) => {
                opened += 1;
                held.push(s);
            }
            _ => break,
        }
    }
    assert!(opened <= MAX_BIDI_STREAMS as usize, "opened {opened}");
    drop(held);
    assert!(conn.close_reason().is_none(), "{:?}", conn.close_reason());
    // The link stream still carries the node's frames (its register / pings).
    let frame = tokio::time::timeout(Duration::from_secs(12), io.read_frame())
        .await
        .expect("a frame on the link")
        .unwrap();
    let v: Value = serde_json::from_str(&frame).unwrap();
    assert!(v.is_object(), "{frame}");

    let log = node.log_text();
    assert!(
        log.contains("refused a stream on a peer link: not a session-stream request"),
        "{log}"
    );
    assert!(log.contains("wrong token"), "{log}");
    // The garbage was counted and named with its source (quinn alone drops it silently).
    let from = udp.local_addr().unwrap();
    assert!(
        log.contains(&format!(
            "quic: dropped 1 undecodable datagrams from {from}"
        )),
        "{log}"
    );
    assert_eq!(health(&node).await["ok"], true);
}

/// `tuic-hub connect` to a node that answers pins its certificate at once and says so; a bad
/// `--transport` is refused with the accepted names and nothing is saved.
#[tokio::test]
async fn connect_pins_the_fingerprint_it_reads_and_refuses_a_bad_transport() {
    let (_d, _node, addr, fp, token) = loopback_node();
    let hd = config_dir(json!({}));
    let url = format!("http://127.0.0.1:{}", addr.port());
    let (code, _, err) = run_with_stdin(
        "tuic-hub",
        &[
            "connect",
            "--config-dir",
            &s(&hd),
            "--id",
            "nodeb",
            "--url",
            &url,
            "--token-stdin",
            "--transport",
            "udp",
        ],
        &token,
    )
    .unwrap();
    assert_ne!(code, 0);
    assert!(err.contains("auto, quic or websocket"), "{err}");
    let before = std::fs::read_to_string(hd.path().join("config.json")).unwrap();
    assert!(!before.contains("nodeb"), "{before}");
    let (code, _, err) = run_with_stdin(
        "tuic-hub",
        &[
            "connect",
            "--config-dir",
            &s(&hd),
            "--id",
            "nodeb",
            "--url",
            &url,
            "--token-stdin",
            "--transport",
            "quic",
        ],
        &token,
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&fp) && err.contains("pinned"), "{err}");
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(hd.path().join("config.json")).unwrap())
            .unwrap();
    let c = &cfg["hub"]["connections"][0];
    assert_eq!(c["quic_fingerprint"], fp.as_str(), "{cfg}");
    assert_eq!(c["transport"], "quic", "{cfg}");
    assert!(!cfg.to_string().contains(&token));
}

/// A live stream of remote session `address` through the hub's WebSocket proxy (IPC socket).
async fn hub_stream(hub: &NodeProc, address: &str, query: &str) -> tuic_tests::term::Ws {
    let enc = address.replace('/', "%2F");
    let sock = tokio::net::UnixStream::connect(&hub.socket).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async(
        format!("ws://localhost/sessions/{enc}/stream?{query}"),
        sock,
    )
    .await
    .unwrap();
    ws
}

/// Bytes of a binary-mode frame (`binary=1`), or of an `output` text frame.
fn frame_bytes(m: &tokio_tungstenite::tungstenite::Message) -> Vec<u8> {
    use tokio_tungstenite::tungstenite::Message as M;
    match m {
        M::Binary(b) => b.to_vec(),
        M::Text(t) => serde_json::from_str::<Value>(t.as_str())
            .ok()
            .and_then(|v| {
                (v["type"] == "output")
                    .then(|| v["data"].as_str().unwrap_or("").as_bytes().to_vec())
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn p50_p99(v: &mut [f64]) -> (f64, f64) {
    (
        tuic_tests::percentile(v, 0.5),
        tuic_tests::percentile(v, 0.99),
    )
}

/// Latencies in ms of 60 keystrokes on `tws` (one character at a time, each awaited in the
/// echo) and of 30 mails from `from` to `to_addr` (`to` waits for each).
async fn keys_and_mail(
    tws: &mut tuic_tests::term::Ws,
    from: &mut Agent,
    to: &mut Agent,
    to_addr: &str,
    tag: &str,
) -> (Vec<f64>, Vec<f64>) {
    use futures::{SinkExt, StreamExt};
    let mut keys = Vec::new();
    for i in 0..60u8 {
        let c = b'a' + i % 26;
        let t = Instant::now();
        tws.send(tokio_tungstenite::tungstenite::Message::Binary(
            vec![c].into(),
        ))
        .await
        .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let m = tokio::time::timeout_at(deadline, tws.next())
                .await
                .expect("the keystroke echo came in time")
                .expect("the stream stays open")
                .unwrap();
            if frame_bytes(&m).contains(&c) {
                break;
            }
        }
        keys.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let mut mails = Vec::new();
    for i in 0..30 {
        let body = format!("{tag}-{i}");
        let t = Instant::now();
        let r = from.send(to_addr, &body).await;
        assert_eq!(r["delivery_path"], "peer_link", "{r}");
        let got = to.collect(1, Duration::from_secs(10)).await;
        assert_eq!(got[0]["message"], body.as_str());
        mails.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    (keys, mails)
}

/// Over a QUIC link each relayed session stream has its own QUIC stream: while one remote
/// session floods output through the hub (read as fast as it comes) and another floods to a
/// client that never reads, cross-host mail on the link and a third session's keystroke echo
/// keep a low latency.
#[tokio::test]
async fn a_flooding_session_over_quic_delays_neither_mail_nor_another_sessions_keystrokes() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as M;
    let bed = FedBed::start(1).await.unwrap();
    wait_row(
        &bed.hub,
        "nodeb",
        Duration::from_secs(20),
        link_up_over("quic"),
    )
    .await;
    let shell = json!({"rows": 24, "cols": 80, "shell": "/bin/sh"});
    let flood = format!(
        "nodeb/{}",
        bed.create_on_node(0, shell.clone()).await.unwrap()
    );
    let typed = format!(
        "nodeb/{}",
        bed.create_on_node(0, shell.clone()).await.unwrap()
    );
    let stalled_addr = format!("nodeb/{}", bed.create_on_node(0, shell).await.unwrap());
    bed.wait_listed(&flood, Duration::from_secs(10))
        .await
        .unwrap();
    bed.wait_listed(&typed, Duration::from_secs(10))
        .await
        .unwrap();
    bed.wait_listed(&stalled_addr, Duration::from_secs(10))
        .await
        .unwrap();
    let (mut bob, tbob) = Agent::new(&bed.nodes[0].proc().socket, "bob").await;
    let (mut hank, thank) = Agent::new(&bed.hub.socket, "hank").await;
    let a_hank = format!("local/{thank}");
    bob.sees(&a_hank, Duration::from_secs(10)).await;
    hank.sees(&format!("nodeb/{tbob}"), Duration::from_secs(10))
        .await;

    // The same measurement with no flood, for comparison.
    let mut tws = hub_stream(&bed.hub, &typed, "binary=1").await;
    let (mut idle_keys, mut idle_mails) =
        keys_and_mail(&mut tws, &mut bob, &mut hank, &a_hank, "idle").await;
    let (ik50, ik99) = p50_p99(&mut idle_keys);
    let (im50, im99) = p50_p99(&mut idle_mails);
    println!(
        "no flood: keystroke echo p50 {ik50:.1} ms p99 {ik99:.1} ms; mail p50 {im50:.1} ms p99 {im99:.1} ms"
    );

    // The flood: `yes` through the hub, read as fast as it comes, counted.
    let mut fws = hub_stream(&bed.hub, &flood, "binary=1").await;
    fws.send(M::Text("yes flood-flood-flood-flood-flood-flood\n".into()))
        .await
        .unwrap();
    let (count_tx, mut flooded) = tokio::sync::watch::channel(0u64);
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stop_rx => break,
                m = fws.next() => match m {
                    Some(Ok(m)) => {
                        let n = frame_bytes(&m).len() as u64;
                        count_tx.send_modify(|c| *c += n);
                    }
                    _ => break,
                },
            }
        }
        fws
    });
    tokio::time::timeout(
        Duration::from_secs(20),
        flooded.wait_for(|n| *n >= 1_000_000),
    )
    .await
    .expect("the flood started")
    .unwrap();
    // A second flood whose reader never reads: its stream stalls on QUIC flow control.
    let mut stalled = hub_stream(&bed.hub, &stalled_addr, "binary=1").await;
    stalled
        .send(M::Text("yes stalled-stalled-stalled-stalled\n".into()))
        .await
        .unwrap();
    let before = *flooded.borrow();

    let (mut keys, mut mails) = keys_and_mail(&mut tws, &mut bob, &mut hank, &a_hank, "m").await;
    let during = *flooded.borrow() - before;
    let _ = stop_tx.send(());
    let _fws = reader.await.unwrap();
    drop(stalled);

    let (k50, k99) = p50_p99(&mut keys);
    let (m50, m99) = p50_p99(&mut mails);
    println!(
        "flood over QUIC: {:.1} MB relayed while measuring; keystroke echo p50 {k50:.1} ms p99 {k99:.1} ms; mail p50 {m50:.1} ms p99 {m99:.1} ms",
        during as f64 / 1e6
    );
    assert!(
        during > 256_000,
        "the flood kept flowing while measuring: {during} bytes"
    );
    assert!(k99 < 1000.0, "keystroke echo p99 {k99:.1} ms");
    assert!(m99 < 1000.0, "mail p99 {m99:.1} ms");
    // Both relayed streams rode their own QUIC streams of the one link.
    let row = wait_row(
        &bed.hub,
        "nodeb",
        Duration::from_secs(1),
        link_up_over("quic"),
    )
    .await;
    assert_eq!(row["quic_session_streams"], 3, "{row}");
    assert_eq!(row["peer_link_ups"], 1, "{row}");
    // The node's refusals come back over the QUIC stream as the route's own answers.
    for (path, status, code) in [
        ("nodeb%2Fnope/stream", 404, "unknown_session"),
        (
            &format!("{}/stream?format=bogus", typed.replace('/', "%2F")),
            400,
            "bad_request",
        ),
    ] {
        let sock = tokio::net::UnixStream::connect(&bed.hub.socket)
            .await
            .unwrap();
        match tokio_tungstenite::client_async(format!("ws://localhost/sessions/{path}"), sock).await
        {
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
                assert_eq!(r.status().as_u16(), status, "{path}");
                let body: Value = serde_json::from_slice(r.body().as_deref().unwrap()).unwrap();
                assert_eq!(body["code"], code, "{path}: {body}");
            }
            other => panic!("{path}: expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
}

/// Runs `ip` with `args`, asserting success; its stdout.
fn ip_ok(args: &[&str]) -> String {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// QUIC lets a connection's client move to a new address (RFC 9000 §9): the hub's address
/// changing mid-link (its veth re-addressed, the old address removed) keeps the QUIC link —
/// no reconnect — and mail sent both ways after the change all arrives, in order. (The node
/// is the QUIC server; a server's address cannot move in QUIC v1: see docs/internals.md, hub `link.rs`.)
#[tokio::test]
async fn the_hubs_address_changing_mid_link_keeps_the_quic_link_and_loses_no_mail() {
    let bed = FedBed::start(1).await.unwrap();
    let row = wait_row(
        &bed.hub,
        "nodeb",
        Duration::from_secs(20),
        link_up_over("quic"),
    )
    .await;
    assert_eq!(row["peer_link_ups"], 1, "{row}");
    let (mut bob, tbob) = Agent::new(&bed.nodes[0].proc().socket, "bob").await;
    let (mut hank, thank) = Agent::new(&bed.hub.socket, "hank").await;
    let (a_bob, a_hank) = (format!("nodeb/{tbob}"), format!("local/{thank}"));
    bob.sees(&a_hank, Duration::from_secs(10)).await;
    hank.sees(&a_bob, Duration::from_secs(10)).await;
    let r = bob.send(&a_hank, "before").await;
    assert_eq!(r["delivery_path"], "peer_link", "{r}");
    assert_eq!(
        hank.collect(1, Duration::from_secs(10)).await[0]["message"],
        "before"
    );

    // Re-address the hub's side of the link: 10.x.1.1 becomes 10.x.1.3.
    let node_addr = bed.net.node_addr(0).to_owned();
    let prefix = node_addr.rsplit_once('.').unwrap().0.to_owned();
    let (old, new) = (format!("{prefix}.1"), format!("{prefix}.3"));
    let hub_ns = bed.net.hub().to_owned();
    let listing = ip_ok(&["-n", &hub_ns, "-o", "-4", "addr", "show"]);
    let dev = listing
        .lines()
        .find(|l| l.contains(&format!("inet {old}/")))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no interface holds {old}: {listing}"))
        .to_owned();
    ip_ok(&[
        "netns",
        "exec",
        &hub_ns,
        "sysctl",
        "-qw",
        &format!("net.ipv4.conf.{dev}.promote_secondaries=1"),
    ]);
    ip_ok(&[
        "-n",
        &hub_ns,
        "addr",
        "add",
        &format!("{new}/24"),
        "dev",
        &dev,
    ]);
    ip_ok(&[
        "-n",
        &hub_ns,
        "addr",
        "del",
        &format!("{old}/24"),
        "dev",
        &dev,
    ]);
    let listing = ip_ok(&["-n", &hub_ns, "-o", "-4", "addr", "show", "dev", &dev]);
    assert!(
        listing.contains(&format!("inet {new}/")) && !listing.contains(&format!("inet {old}/")),
        "{listing}"
    );

    // Mail both ways, the hub's first so its packets take the new path at once.
    const N: usize = 20;
    for i in 0..N {
        let r = hank.send(&a_bob, &format!("h2b-{i}")).await;
        assert!(
            matches!(r["status"].as_str(), Some("delivered" | "accepted")),
            "{r}"
        );
        let r = bob.send(&a_hank, &format!("b2h-{i}")).await;
        assert!(
            matches!(r["status"].as_str(), Some("delivered" | "accepted")),
            "{r}"
        );
    }
    let to_bob = bob.collect(N, Duration::from_secs(40)).await;
    let to_hank = hank.collect(N, Duration::from_secs(40)).await;
    let bodies = |v: &[Value]| -> Vec<String> {
        v.iter()
            .map(|m| m["message"].as_str().unwrap().to_owned())
            .collect()
    };
    let want = |dir: &str| -> Vec<String> { (0..N).map(|i| format!("{dir}-{i}")).collect() };
    assert_eq!(bodies(&to_bob), want("h2b"));
    assert_eq!(bodies(&to_hank), want("b2h"));

    // The same link all along: up over QUIC, never re-established.
    let row = wait_row(
        &bed.hub,
        "nodeb",
        Duration::from_secs(1),
        link_up_over("quic"),
    )
    .await;
    assert_eq!(row["peer_link_ups"], 1, "{row}");
    // The node followed the hub to its new address (quinn validated the new path).
    let moved = |log: &str| {
        log.lines()
            .find(|l| l.contains("the peer link's path moved"))
            .map(str::to_owned)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let line = loop {
        if let Some(l) = moved(&bed.nodes[0].proc().log_text()) {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "the node never logged the move: {}",
            bed.nodes[0].proc().log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        line.contains(&format!("{old}:")) && line.contains(&format!("{new}:")),
        "{line}"
    );
    let node_log = bed.nodes[0].proc().log_text();
    assert_eq!(
        node_log
            .matches("peer link over QUIC authenticated")
            .count(),
        1,
        "{node_log}"
    );
}
