//! Scenarios: each brings up its own bed, runs the three workloads across one fault, prints
//! one summary line and checks its invariants. The bed (processes, proxy, namespaces) is torn
//! down when the scenario returns, also on error or panic.
//!
//! Workloads: (a) a byte-checked stream of a remote session through the hub
//! ([`crate::stream`]); (b) mirror and routing checks: 503 naming the connection within 1 s of
//! a node stopping, and the mirror recovering by itself within the backoff bound; (c) agent
//! mail between nodes B and C through the hub ([`crate::mail`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use tuic_tests::ipc;

use crate::bed::{Bed, CONN_IDS};
use crate::mail::{self, HostEvents, MailPlan, MailReport};
use crate::stream::{self, Progress, StreamReport};

mod summary;

pub use summary::*;

/// Reconnect backoff bound: 30 s maximum delay plus up to as much jitter, plus a handshake.
pub const RECOVERY_BOUND: Duration = Duration::from_secs(65);
/// A stopped node's routes must answer 503 within this.
pub const UNAVAILABLE_BOUND: Duration = Duration::from_secs(1);
/// A hub outbox holds at most this many messages per connection (API.md, Federation).
pub const OUTBOX_BOUND: u64 = 1_000;
/// Liveness: a probe every 5 s, down after 3 misses (2 s probe timeout), plus slack.
pub const DETECTION_BOUND: Duration = Duration::from_secs(25);

/// The scenarios, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// `kill -9` of node B, then a restart with the same config dir.
    NodeKill,
    /// `kill -9` of the hub, then a restart with the same config dir.
    HubKill,
    /// Node B's link down (`ip link set down`) for the plan's partition time.
    Partition,
    /// 100 ms one-way delay (and 20 ms jitter, reordering across connections) via the proxy.
    Delay,
    /// 5 % packet loss in and out of node B's namespace.
    Loss,
}

impl Scenario {
    /// Every scenario, in run order.
    pub const ALL: [Scenario; 5] = [
        Scenario::NodeKill,
        Scenario::HubKill,
        Scenario::Partition,
        Scenario::Delay,
        Scenario::Loss,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::NodeKill => "node-kill",
            Scenario::HubKill => "hub-kill",
            Scenario::Partition => "partition",
            Scenario::Delay => "delay",
            Scenario::Loss => "loss",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.name() == s)
    }

    /// Whether this scenario can aim its fault at node `victim` (0 = B, 1 = C): the delay
    /// proxy sits in front of node B only.
    pub fn can_fault(self, victim: usize) -> bool {
        victim < 2 && (self != Scenario::Delay || victim == 0)
    }
}

/// Sizes and times of a run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Mail messages per direction per scenario.
    pub per_direction: u64,
    /// Time over which each sender spreads its messages.
    pub send_window: Duration,
    /// How long a fault lasts (down time of a killed process, delay, loss).
    pub fault: Duration,
    /// How long the partition lasts.
    pub partition: Duration,
    /// How long delay and loss last (most of the send window, so mail and stream cross it).
    pub impairment: Duration,
    /// Stream lines produced per 100 ms batch.
    pub stream_batch: u64,
    /// The node the faults hit: 0 = node B (default), 1 = node C. Delay needs the proxy,
    /// which sits in front of node B only.
    pub victim: usize,
    /// After a node restart, its agent registers again and then waits this long before its
    /// first read (see `MailPlan::read_lag_after_restart`).
    pub read_lag_after_restart: Duration,
    /// Node C's peer-link carrier: `auto`, `quic` or `websocket` (node B's link goes through
    /// the TCP delay proxy, always the WebSocket). Default: `CHAOS_TRANSPORT`, else `auto`.
    pub transport: String,
}

impl Plan {
    /// The CI version: ~20 s a scenario, under 1 MiB of stream data in all.
    pub fn short() -> Self {
        Self {
            per_direction: 40,
            send_window: Duration::from_secs(8),
            fault: Duration::from_secs(3),
            partition: Duration::from_secs(5),
            impairment: Duration::from_secs(6),
            stream_batch: 100,
            victim: 0,
            read_lag_after_restart: Duration::ZERO,
            transport: std::env::var("CHAOS_TRANSPORT").unwrap_or_else(|_| "auto".into()),
        }
    }

    /// The long version: 10,000 messages across the five scenarios, a partition long enough
    /// for the hub to notice it (liveness), more stream data.
    pub fn long() -> Self {
        Self {
            per_direction: 1_000,
            send_window: Duration::from_secs(50),
            fault: Duration::from_secs(10),
            partition: Duration::from_secs(25),
            impairment: Duration::from_secs(45),
            stream_batch: 200,
            victim: 0,
            read_lag_after_restart: Duration::from_secs(3),
            transport: std::env::var("CHAOS_TRANSPORT").unwrap_or_else(|_| "auto".into()),
        }
    }

    /// Stream lines: enough batches to keep output flowing through the send window.
    fn stream_lines(&self) -> u64 {
        let batches = (self.send_window + Duration::from_secs(4)).as_millis() as u64 / 100;
        batches * self.stream_batch
    }
}

/// Runs one scenario: bed up, workloads, fault, checks. Prints the summary line (also when an
/// invariant fails, before the error is returned).
pub async fn run(which: Scenario, plan: &Plan) -> anyhow::Result<Summary> {
    ensure!(
        which.can_fault(plan.victim),
        "{} cannot fault node index {} (the victim is node B or C; the delay proxy sits in front of node B only)",
        which.name(),
        plan.victim
    );
    let t0 = Instant::now();
    let mut bed = Bed::up(&plan.transport)
        .await
        .context("bringing the bed up")?;
    let r = run_on(&mut bed, which, plan, t0).await;
    match r {
        Ok(s) => {
            println!("{s} transports: {}", bed.transports().await);
            check(&s)
                .map_err(|e| anyhow::anyhow!("{}: {e}\n{}", which.name(), bed.diagnostics()))?;
            Ok(s)
        }
        Err(e) => Err(e.context(format!("{}\n{}", which.name(), bed.diagnostics()))),
    }
}

/// Polls (bounded) until the hub's `GET /sessions` lists the address `want`; returns the
/// time it took.
async fn wait_row(bed: &Bed, want: &str, limit: Duration) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    loop {
        if let Ok(sock) = bed.hub.socket()
            && let Ok(Ok(r)) =
                tokio::time::timeout(Duration::from_secs(2), ipc(&sock, "GET", "/sessions", None))
                    .await
            && r.json()
                .as_array()
                .is_some_and(|rows| rows.iter().any(|r| r["address"] == want))
        {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > limit {
            bail!("the hub did not list {want} within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Polls (bounded) a route of `address` on the hub until it answers 503 naming `conn`;
/// returns the time since `since`.
async fn wait_503(
    bed: &Bed,
    address: &str,
    conn: &str,
    since: Instant,
) -> anyhow::Result<Duration> {
    let path = format!(
        "/sessions/{}/output?format=raw",
        address.replace('/', "%2F")
    );
    let sock = bed.hub.socket()?;
    let mut last = String::new();
    while since.elapsed() < Duration::from_secs(60) {
        if let Ok(Ok(r)) =
            tokio::time::timeout(Duration::from_millis(500), ipc(&sock, "GET", &path, None)).await
        {
            let err = r.json()["error"].as_str().unwrap_or_default().to_owned();
            if r.status == 503 && err.contains(conn) {
                return Ok(since.elapsed());
            }
            last = format!("{} {err}", r.status);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bail!("no 503 naming {conn} for {address} within 60 s (last: {last})")
}

/// The largest value sampled, and whether any was.
#[derive(Debug, Default)]
struct Peak {
    seen: std::sync::atomic::AtomicBool,
    max: std::sync::atomic::AtomicU64,
}

impl Peak {
    fn record(&self, n: u64) {
        use std::sync::atomic::Ordering;
        self.seen.store(true, Ordering::Relaxed);
        self.max.fetch_max(n, Ordering::Relaxed);
    }

    /// The peak, or `None` when nothing was sampled.
    fn get(&self) -> Option<u64> {
        use std::sync::atomic::Ordering;
        self.seen
            .load(Ordering::Relaxed)
            .then(|| self.max.load(Ordering::Relaxed))
    }
}

/// The outbox sampler's shared state.
#[derive(Debug, Default)]
struct Sampling {
    stop: std::sync::atomic::AtomicBool,
    /// The hub's per-connection outboxes (`outbox_held`).
    hub: Peak,
    /// The nodes' uplink outboxes (`peer_uplink.held`).
    nodes: Peak,
    /// The hub's `recipient_full` answers (sum of `outbox_recipient_full`).
    recipient_full: Peak,
}

/// Samples the hub's per-connection outbox sizes and the nodes' uplink outboxes until stopped
/// (a host may be down for a while; its socket path stays the same across restarts).
async fn sample_outboxes(
    socket: std::path::PathBuf,
    nodes: Vec<std::path::PathBuf>,
    st: Arc<Sampling>,
) {
    use std::sync::atomic::Ordering;
    while !st.stop.load(Ordering::Relaxed) {
        for n in &nodes {
            if let Ok(Ok(r)) =
                tokio::time::timeout(Duration::from_secs(1), ipc(n, "GET", "/mcp/status", None))
                    .await
                && let Some(held) = r.json()["peer_uplink"]["held"].as_u64()
            {
                st.nodes.record(held);
            }
        }
        if let Ok(Ok(r)) = tokio::time::timeout(
            Duration::from_secs(1),
            ipc(&socket, "GET", "/hub/connections", None),
        )
        .await
        {
            let mut full = None;
            for c in r.json()["connections"].as_array().into_iter().flatten() {
                if let Some(n) = c["outbox_held"].as_u64() {
                    st.hub.record(n);
                }
                if let Some(n) = c["outbox_recipient_full"].as_u64() {
                    full = Some(full.unwrap_or(0) + n);
                }
            }
            if let Some(n) = full {
                st.recipient_full.record(n);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The marker sessions' program: idle, and echoes what is written to it.
const MARKER: &str = "exec cat";

/// Writes `token` to `address` through the hub and polls (bounded) the output through the hub
/// until it shows up; returns the round trip.
async fn routed_echo(bed: &Bed, address: &str, token: &str) -> anyhow::Result<Duration> {
    let enc = address.replace('/', "%2F");
    let sock = bed.hub.socket()?;
    let t0 = Instant::now();
    let w = ipc(
        &sock,
        "POST",
        &format!("/sessions/{enc}/write"),
        Some(serde_json::json!({"data": format!("{token}\n")})),
    )
    .await?;
    ensure!(
        w.status == 200,
        "write through the hub to {address}: {} {}",
        w.status,
        String::from_utf8_lossy(&w.body)
    );
    loop {
        let r = ipc(
            &sock,
            "GET",
            &format!("/sessions/{enc}/output?format=raw"),
            None,
        )
        .await?;
        if r.status == 200 && r.json()["data"].as_str().is_some_and(|d| d.contains(token)) {
            return Ok(t0.elapsed());
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(10),
            "{token} written through the hub never came back from {address}: {}",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A long-lived idle session on node `i`, listed on the hub; returns its hub address.
async fn marker(bed: &Bed, i: usize) -> anyhow::Result<String> {
    let sid = bed.spawn_on(i, MARKER).await?;
    let address = format!("{}/{sid}", CONN_IDS[i]);
    wait_row(bed, &address, Duration::from_secs(10)).await?;
    Ok(address)
}

async fn run_on(
    bed: &mut Bed,
    which: Scenario,
    plan: &Plan,
    t0: Instant,
) -> anyhow::Result<Summary> {
    let events = [
        Arc::new(HostEvents::default()),
        Arc::new(HostEvents::default()),
    ];
    // The faulted node, and the other one. The stream goes to the node that stays alive when
    // a node is killed, else to the faulted one.
    let (v, other) = (plan.victim, 1 - plan.victim);
    let stream_node = if which == Scenario::NodeKill {
        other
    } else {
        v
    };
    let mut markers = [marker(bed, 0).await?, marker(bed, 1).await?];
    let lines = plan.stream_lines();
    let sid = bed
        .spawn_on(
            stream_node,
            &stream::producer_script(lines, plan.stream_batch),
        )
        .await?;
    let address = format!("{}/{sid}", CONN_IDS[stream_node]);
    wait_row(bed, &address, Duration::from_secs(10)).await?;
    let progress = Arc::new(Progress::default());
    let sampling = Arc::new(Sampling::default());
    let stream_budget =
        plan.send_window + plan.partition + RECOVERY_BOUND + Duration::from_secs(30);
    let stream_task = tokio::spawn(stream::run(
        bed.hub.socket()?,
        address.clone(),
        lines,
        Instant::now() + stream_budget,
        progress.clone(),
    ));
    let sampler = tokio::spawn(sample_outboxes(
        bed.hub.socket()?,
        vec![bed.nodes[0].socket()?, bed.nodes[1].socket()?],
        sampling.clone(),
    ));
    let interval = plan.send_window / plan.per_direction.max(1) as u32;
    let mail_run = mail::start(
        [bed.nodes[0].socket()?, bed.nodes[1].socket()?],
        CONN_IDS,
        events.clone(),
        MailPlan {
            per_direction: plan.per_direction,
            interval,
            read_lag_after_restart: plan.read_lag_after_restart,
        },
    )
    .await?;
    // Let both workloads get going before the fault.
    let warm = Instant::now();
    while progress.ok_bytes.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        ensure!(
            warm.elapsed() < Duration::from_secs(15),
            "the stream delivered nothing before the fault"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut s = Summary {
        scenario: which.name(),
        stream_conn: CONN_IDS[stream_node],
        faulted: if which == Scenario::HubKill {
            "-"
        } else {
            CONN_IDS[v]
        },
        ..Summary::default()
    };
    match which {
        Scenario::NodeKill => {
            // The faulted node's agent stops reading a second before the kill, so mail
            // delivered to it meanwhile is in its memory when it dies; the harness reads back exactly which
            // (counted apart as lost with the killed node's memory; everything else accepted
            // must still arrive).
            events[v]
                .pause_reads
                .store(true, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Some(m) = &mail_run {
                m.hold_for_kill(v).await?;
            }
            let t = Instant::now();
            bed.kill_node(v)?;
            // Bumped while the node is dead, so no reader can pair an old cursor with the
            // restarted node's fresh inbox.
            events[v]
                .epoch
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match &mail_run {
                Some(m) => m.resume(),
                None => events[v]
                    .pause_reads
                    .store(false, std::sync::atomic::Ordering::SeqCst),
            }
            s.unavailable_latency = Some(wait_503(bed, &markers[v], CONN_IDS[v], t).await?);
            tokio::time::sleep(plan.fault.saturating_sub(t.elapsed())).await;
            bed.restart_node(v)?;
            let back = Instant::now();
            // The old sessions are re-adopted from their holders; a new one must show up too.
            let sid = bed.spawn_on(v, MARKER).await?;
            markers[v] = format!("{}/{sid}", CONN_IDS[v]);
            wait_row(bed, &markers[v], RECOVERY_BOUND).await?;
            s.recovery = Some(back.elapsed());
        }
        Scenario::HubKill => {
            bed.kill_hub()?;
            tokio::time::sleep(plan.fault).await;
            bed.restart_hub()?;
            let back = Instant::now();
            for m in &markers {
                wait_row(bed, m, RECOVERY_BOUND).await?;
            }
            s.recovery = Some(back.elapsed());
        }
        Scenario::Partition => {
            let t = Instant::now();
            bed.set_link(v, false)?;
            // A partition the liveness probes can notice (> 3 × 5 s) must be noticed, and then
            // routes answer 503 at once; a shorter one may pass unnoticed (TCP retransmits).
            if plan.partition >= DETECTION_BOUND {
                s.detection = Some(
                    bed.wait_conn(CONN_IDS[v], false, DETECTION_BOUND + Duration::from_secs(5))
                        .await?,
                );
                let down = Instant::now();
                s.unavailable_latency = Some(wait_503(bed, &markers[v], CONN_IDS[v], down).await?);
            }
            tokio::time::sleep(plan.partition.saturating_sub(t.elapsed())).await;
            bed.set_link(v, true)?;
            let back = Instant::now();
            bed.wait_conn(CONN_IDS[v], true, RECOVERY_BOUND).await?;
            wait_row(bed, &markers[v], RECOVERY_BOUND).await?;
            s.recovery = Some(back.elapsed());
        }
        Scenario::Delay => {
            bed.proxy
                .set_delay(Duration::from_millis(100), Duration::from_millis(20));
            tokio::time::sleep(plan.impairment).await;
            // Under delay the routes still work: a read through the hub answers.
            let t = Instant::now();
            let r = ipc(
                &bed.hub.socket()?,
                "GET",
                &format!(
                    "/sessions/{}/output?format=raw&limit=16",
                    markers[v].replace('/', "%2F")
                ),
                None,
            )
            .await?;
            ensure!(r.status == 200, "routed read under delay: {}", r.status);
            ensure!(
                t.elapsed() >= Duration::from_millis(200),
                "a routed read took {:?}: the delay proxy is not in the path",
                t.elapsed()
            );
            bed.proxy.set_delay(Duration::ZERO, Duration::ZERO);
            let back = Instant::now();
            bed.wait_conn(CONN_IDS[v], true, RECOVERY_BOUND).await?;
            wait_row(bed, &markers[v], RECOVERY_BOUND).await?;
            s.recovery = Some(back.elapsed());
        }
        Scenario::Loss => {
            bed.set_loss(v, 5)?;
            tokio::time::sleep(plan.impairment).await;
            let dropped = bed.dropped_packets(v)?;
            bed.set_loss(v, 0)?;
            ensure!(dropped > 0, "the loss rule dropped no packet");
            let back = Instant::now();
            bed.wait_conn(CONN_IDS[v], true, RECOVERY_BOUND).await?;
            wait_row(bed, &markers[v], RECOVERY_BOUND).await?;
            s.recovery = Some(back.elapsed());
        }
    }

    // After the fault, writing to each node's session through the hub and reading the echo
    // back through the hub works.
    let mut echo = Duration::ZERO;
    for (n, m) in markers.iter().enumerate() {
        echo = echo.max(routed_echo(bed, m, &format!("chaos-echo-{n}-{}", which.name())).await?);
    }
    s.routed_echo = Some(echo);

    s.mail = match mail_run {
        Some(mut m) => {
            m.senders_done(plan.send_window + RECOVERY_BOUND).await?;
            Some(m.finish(RECOVERY_BOUND).await)
        }
        None => None,
    };
    s.stream = stream_task.await.context("stream task")?;
    sampling
        .stop
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = sampler.await;
    s.outbox_max = sampling.hub.get();
    s.node_outbox_max = sampling.nodes.get();
    s.recipient_full = sampling.recipient_full.get();
    s.duration = t0.elapsed();
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passing() -> Summary {
        Summary {
            scenario: "node-kill",
            faulted: "nodeb",
            mail: Some(MailReport {
                sent: 10,
                accepted: 9,
                delivered: 9,
                refused: 1,
                ..MailReport::default()
            }),
            stream: StreamReport {
                ok_bytes: 32,
                expected: 32,
                ..StreamReport::default()
            },
            unavailable_latency: Some(Duration::from_millis(20)),
            recovery: Some(Duration::from_secs(2)),
            outbox_max: Some(12),
            node_outbox_max: Some(3),
            recipient_full: Some(4),
            ..Summary::default()
        }
    }

    #[test]
    fn check_passes_a_clean_run_and_names_each_broken_invariant() {
        check(&passing()).unwrap();
        // The killed node's memory is reported, not a failure.
        let mut s = passing();
        s.mail.as_mut().unwrap().lost_killed_memory = 3;
        check(&s).unwrap();
        type Breaker = fn(&mut Summary);
        let cases: [(&str, Breaker); 11] = [
            ("lost before delivery", |s| {
                s.mail.as_mut().unwrap().lost = 1
            }),
            ("delivered twice", |s| {
                s.mail.as_mut().unwrap().duplicates = 1
            }),
            ("replayed under the same message_id", |s| {
                s.mail.as_mut().unwrap().replays = 1
            }),
            ("refused mail was delivered", |s| {
                s.mail.as_mut().unwrap().refused_delivered = 1
            }),
            ("evicted", |s| s.mail.as_mut().unwrap().evicted = 1),
            ("stream: 31 of 32", |s| s.stream.ok_bytes = 31),
            ("stream: byte 7", |s| {
                s.stream.error = Some("byte 7 is 0x41".into())
            }),
            ("503 came", |s| {
                s.unavailable_latency = Some(Duration::from_millis(1_001))
            }),
            ("mirror recovered after", |s| {
                s.recovery = Some(RECOVERY_BOUND + Duration::from_millis(1))
            }),
            ("outbox held 1001", |s| s.outbox_max = Some(1_001)),
            ("uplink outbox held 1001", |s| {
                s.node_outbox_max = Some(1_001)
            }),
        ];
        for (want, brk) in cases {
            let mut s = passing();
            brk(&mut s);
            let e = check(&s).expect_err(want).to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn the_summary_is_one_line_with_every_count() {
        let line = passing().to_string();
        assert!(!line.contains('\n'), "{line}");
        for field in [
            "scenario=node-kill",
            "faulted=nodeb",
            "sent=10",
            "accepted=9",
            "delivered=9",
            "duplicates=0",
            "replays=0",
            "lost=0",
            "lost_killed_memory=0",
            "stream_bytes_ok=32/32",
            "503_latency=0.02s",
            "recovery=2.00s",
            "hub_outbox_max=12",
            "node_outbox_max=3",
            "recipient_full=4",
        ] {
            assert!(line.contains(field), "{field} missing: {line}");
        }
        let mut s = passing();
        s.mail = None;
        assert!(s.to_string().contains(mail::UNAVAILABLE));
    }
}
