//! The hub's link handling as a service: a real hub node (its store, group committer and
//! relay) runs a connection's link task (`peerlink::drive_over`) over an in-memory carrier
//! (a pair of channels behind `tuic_node::link::FrameIo`), and the test plays the node with the
//! sans-IO `PeerLink` (role node) — no socket, no process, the same frames a WebSocket or a
//! QUIC stream carries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tuic_hub::connections::{Conn, ConnectionConfig, TransportPref};
use tuic_hub::peerlink::{PeerHub, drive_over};
use tuic_node::link::FrameIo;
use tuic_node::logs::LogRing;
use tuic_node::paths::{LocationEnv, Paths};
use tuic_node::state::{Node, RunOverrides};
use tuic_proto::peer::{
    AckOutcome, ErrorCode, LinkConfig, LinkEvent, LinkRole, LinkState, PeerEntry, PeerLink,
    Request, RequestId, Response, WireMessage,
};

/// Longest any single expectation may take (a generous bound, never a pause).
const WITHIN: Duration = Duration::from_secs(10);

/// One end of an in-memory carrier: text frames through channels; dropping it closes the link.
struct MemIo {
    rx: mpsc::UnboundedReceiver<String>,
    tx: mpsc::UnboundedSender<String>,
}

impl FrameIo for MemIo {
    async fn recv(&mut self) -> Option<String> {
        self.rx.recv().await
    }

    async fn send(&mut self, text: String) -> bool {
        self.tx.send(text).is_ok()
    }

    async fn close(&mut self) {
        self.rx.close();
    }
}

/// A carrier: the hub's end and the node's end.
fn carrier() -> (MemIo, MemIo) {
    let (a_tx, a_rx) = mpsc::unbounded_channel();
    let (b_tx, b_rx) = mpsc::unbounded_channel();
    (MemIo { rx: a_rx, tx: b_tx }, MemIo { rx: b_rx, tx: a_tx })
}

/// A hub node in a temporary directory.
struct Hub {
    _dir: tempfile::TempDir,
    node: Arc<Node>,
    relay: Arc<PeerHub>,
}

fn hub() -> Hub {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        json!({"secret_store": "file"}).to_string(),
    )
    .unwrap();
    let paths = Paths::resolve(Some(dir.path()), None, &LocationEnv::default()).unwrap();
    let node = Node::open(
        "tuic-hub",
        paths,
        RunOverrides::default(),
        LogRing::default(),
    )
    .unwrap();
    let relay = PeerHub::load(Arc::new(node.api())).unwrap();
    Hub {
        _dir: dir,
        node,
        relay,
    }
}

fn conn(id: &str, stop: &CancellationToken) -> Arc<Conn> {
    let config = ConnectionConfig {
        id: id.into(),
        url: "http://127.0.0.1:9".into(),
        transport: None,
        quic_fingerprint: None,
    };
    Arc::new(Conn::new(
        &config,
        "token".into(),
        TransportPref::Websocket,
        stop.child_token(),
        tokio::time::Instant::now(),
    ))
}

/// Runs `conn`'s link task with a dialer that hands out the carriers sent on the returned
/// channel (and reports each dial on `dialed`). A dial with no carrier left fails.
fn drive(
    h: &Hub,
    conn: &Arc<Conn>,
) -> (
    mpsc::UnboundedSender<MemIo>,
    mpsc::UnboundedReceiver<u32>,
    tokio::task::JoinHandle<()>,
) {
    let (give, carriers) = mpsc::unbounded_channel::<MemIo>();
    let (dialed_tx, dialed) = mpsc::unbounded_channel();
    let carriers = Arc::new(tokio::sync::Mutex::new(carriers));
    let count = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let task = tokio::spawn(drive_over(h.relay.clone(), conn.clone(), move |_c| {
        let (carriers, dialed_tx, count) = (carriers.clone(), dialed_tx.clone(), count.clone());
        async move {
            let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let _ = dialed_tx.send(n);
            carriers
                .lock()
                .await
                .recv()
                .await
                .ok_or_else(|| "no carrier".to_owned())
        }
    }));
    (give, dialed, task)
}

/// The test's node: a `PeerLink` (role node) pumped by hand over its end of the carrier. It
/// answers the hub's directory pushes (`register`) as a node does and keeps the answers to its
/// own requests by id.
struct NodeEnd {
    link: PeerLink,
    io: MemIo,
    answers: HashMap<RequestId, Response>,
    up: Option<String>,
    /// The directories the hub pushed.
    directories: Vec<Vec<PeerEntry>>,
}

fn now() -> u64 {
    tuic_node::ext::mono_ms()
}

impl NodeEnd {
    fn new(io: MemIo) -> Self {
        Self {
            link: PeerLink::new(now(), LinkConfig::new("nodeb", "hub", LinkRole::Node)),
            io,
            answers: HashMap::new(),
            up: None,
            directories: Vec::new(),
        }
    }

    fn flush(&mut self) {
        while let Some(f) = self.link.poll_transmit() {
            self.io.tx.send(f.encode()).expect("the hub's end is open");
        }
    }

    /// Handles the link's events and reads the hub's frames until `done` holds.
    async fn until(&mut self, done: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            while let Some(ev) = self.link.poll_event() {
                match ev {
                    LinkEvent::Up { remote_id } => self.up = Some(remote_id),
                    LinkEvent::Request {
                        id,
                        request: Request::Register { peers },
                    } => {
                        self.directories.push(peers);
                        self.link.respond(id, Response::RegisterAck).unwrap();
                    }
                    LinkEvent::Response { id, response, .. } => {
                        self.answers.insert(id, response);
                    }
                    _ => {}
                }
            }
            self.flush();
            if done(self) {
                return;
            }
            let text = tokio::time::timeout_at(deadline, self.io.rx.recv())
                .await
                .expect("the hub answered in time")
                .expect("the hub's end stayed open");
            self.link.handle_text(now(), &text);
        }
    }

    async fn up(&mut self) -> String {
        self.until(|n| n.up.is_some()).await;
        self.up.clone().unwrap()
    }

    fn request(&mut self, r: Request) -> RequestId {
        let id = self.link.request(r).expect("the link is up");
        self.flush();
        id
    }

    /// The answer to request `id` (answers to other requests are kept for their turn).
    async fn answer(&mut self, id: RequestId) -> Response {
        self.until(|n| n.answers.contains_key(&id)).await;
        self.answers.remove(&id).unwrap()
    }
}

fn peer(name: &str) -> PeerEntry {
    PeerEntry {
        tuic_session: name.into(),
        name: Some(name.into()),
        orchestrator: false,
        address: None,
        alias: None,
        session_id: None,
        path: None,
    }
}

fn mail(id: &str, from: &str, to: &str) -> WireMessage {
    WireMessage {
        message_id: id.into(),
        from: from.into(),
        to: to.into(),
        message: "hello".into(),
        timestamp_ms: 1,
        from_name: None,
        kind: None,
        lifecycle: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_brings_the_link_up_and_answers_are_matched_to_their_requests() {
    let h = hub();
    let stop = CancellationToken::new();
    let b = conn("b", &stop);
    // Another configured connection, down: mail for it waits in its outbox.
    h.relay.ensure_outbox("c");
    let (give, mut dialed, task) = drive(&h, &b);
    let (hub_io, node_io) = carrier();
    give.send(hub_io).unwrap();
    assert_eq!(dialed.recv().await, Some(1));
    let mut node = NodeEnd::new(node_io);
    let remote = node.up().await;
    assert!(!remote.is_empty(), "the hub names itself in its hello");
    assert_eq!(node.link.state(), LinkState::Up);
    assert!(h.relay.link_up("b"));
    // The hub pushes its directory (its own peers: none here) at link up.
    node.until(|n| !n.directories.is_empty()).await;
    assert_eq!(node.directories[0], Vec::<PeerEntry>::new());

    let reg = node.request(Request::Register {
        peers: vec![peer("alice")],
    });
    // Three requests in flight at once; each answer comes back under its own id.
    let held = node.request(Request::Send(mail("m1", "alice", "c/bob")));
    let list = node.request(Request::ListPeers { path: None });
    let held2 = node.request(Request::Send(mail("m2", "alice", "c/carol")));
    assert_eq!(node.answer(reg).await, Response::RegisterAck);
    // Nothing routable beyond this node: no other node is connected, the hub has no peers of
    // its own, and a node's own peers are not listed back to it.
    assert_eq!(node.answer(list).await, Response::Peers(Vec::new()));
    for (id, message_id) in [(held2, "m2"), (held, "m1")] {
        match node.answer(id).await {
            Response::SendAck {
                message_id: got,
                outcome,
            } => {
                assert_eq!(got, message_id);
                assert_eq!(outcome, AckOutcome::Accepted);
            }
            other => panic!("send {message_id} answered {other:?}"),
        }
    }
    // Taken into connection c's outbox, committed before `accepted`.
    assert_eq!(h.relay.held("c"), 2);
    let stored = tuic_node::ext::mail::load_outboxes(&h.node.api()).unwrap();
    assert_eq!(stored.get("c").map(|o| o.len()), Some(2));

    stop.cancel();
    tokio::time::timeout(WITHIN, task).await.unwrap().unwrap();
    assert!(
        !h.relay.link_up("b"),
        "a stopped link task leaves no live link"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_from_a_peer_the_node_never_registered_is_refused() {
    let h = hub();
    let stop = CancellationToken::new();
    let b = conn("b", &stop);
    h.relay.ensure_outbox("c");
    let (give, _dialed, _task) = drive(&h, &b);
    let (hub_io, node_io) = carrier();
    give.send(hub_io).unwrap();
    let mut node = NodeEnd::new(node_io);
    node.up().await;
    let reg = node.request(Request::Register {
        peers: vec![peer("alice")],
    });
    assert_eq!(node.answer(reg).await, Response::RegisterAck);
    let forged = node.request(Request::Send(mail("m1", "mallory", "c/bob")));
    match node.answer(forged).await {
        Response::Error { code, .. } => assert_eq!(code, ErrorCode::SenderNotRegistered),
        other => panic!("an unregistered sender's mail was answered {other:?}"),
    }
    // Nothing was taken: the refusal loses nothing and holds nothing.
    assert_eq!(h.relay.held("c"), 0);
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_drops_is_redialed_and_its_old_registration_is_gone() {
    let h = hub();
    let stop = CancellationToken::new();
    let b = conn("b", &stop);
    h.relay.ensure_outbox("c");
    let (give, mut dialed, task) = drive(&h, &b);

    let (hub_io, node_io) = carrier();
    give.send(hub_io).unwrap();
    assert_eq!(dialed.recv().await, Some(1));
    let mut node = NodeEnd::new(node_io);
    node.up().await;
    let reg = node.request(Request::Register {
        peers: vec![peer("alice")],
    });
    assert_eq!(node.answer(reg).await, Response::RegisterAck);
    assert_eq!(b.snapshot().peer_link_ups, 1);

    // The node drops: its end of the carrier goes away.
    drop(node);
    let second = tokio::time::timeout(WITHIN, dialed.recv()).await.unwrap();
    assert_eq!(second, Some(2), "the hub dials again after the link ended");
    assert!(!b.snapshot().peer_up, "the dropped link is reported down");

    // It returns on a new carrier: the handshake runs again, and the shadows of the old
    // link's peers were retired when it went down, so alice must register again.
    let (hub_io, node_io) = carrier();
    give.send(hub_io).unwrap();
    let mut node = NodeEnd::new(node_io);
    node.up().await;
    let early = node.request(Request::Send(mail("m1", "alice", "c/bob")));
    match node.answer(early).await {
        Response::Error { code, .. } => assert_eq!(code, ErrorCode::SenderNotRegistered),
        other => panic!("mail from a retired shadow was answered {other:?}"),
    }
    let reg = node.request(Request::Register {
        peers: vec![peer("alice")],
    });
    assert_eq!(node.answer(reg).await, Response::RegisterAck);
    let sent = node.request(Request::Send(mail("m2", "alice", "c/bob")));
    assert!(matches!(
        node.answer(sent).await,
        Response::SendAck {
            outcome: AckOutcome::Accepted,
            ..
        }
    ));
    let snap = b.snapshot();
    assert!(snap.peer_up);
    assert_eq!(snap.peer_link_ups, 2);
    assert_eq!(h.relay.held("c"), 1);

    stop.cancel();
    tokio::time::timeout(WITHIN, task).await.unwrap().unwrap();
}
