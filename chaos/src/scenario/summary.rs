//! One scenario's results ([`Summary`], printed as one line) and the invariants every
//! scenario asserts of them ([`check`]).

use super::*;

/// One scenario's results: the summary line's fields.
#[derive(Debug, Default)]
pub struct Summary {
    /// Scenario name.
    pub scenario: &'static str,
    /// Wall time of the scenario (bed up to teardown).
    pub duration: Duration,
    /// Mail counts; `None` when cross-host mail is not available.
    pub mail: Option<MailReport>,
    /// The stream check.
    pub stream: StreamReport,
    /// Which connection the stream went to.
    pub stream_conn: &'static str,
    /// Which node's connection the fault hit (`-` for the hub).
    pub faulted: &'static str,
    /// Time from the fault to a 503 naming the connection (from the hub reporting it down,
    /// for a partition).
    pub unavailable_latency: Option<Duration>,
    /// Time for the hub to notice a silent partition.
    pub detection: Option<Duration>,
    /// Time from the end of the fault until the mirror is back (rows of every node listed).
    pub recovery: Option<Duration>,
    /// Write-then-read round trip through the hub after the fault (slowest of the two
    /// nodes' sessions).
    pub routed_echo: Option<Duration>,
    /// The largest hub outbox (`outbox_held` of `GET /hub/connections`, sampled every
    /// 100 ms while the scenario ran); `None` when the hub does not report it.
    pub outbox_max: Option<u64>,
    /// The largest node uplink outbox (`peer_uplink.held` of each node's `GET /mcp/status`,
    /// sampled with the hub's); `None` when no node reported it.
    pub node_outbox_max: Option<u64>,
    /// The most `recipient_full` answers one hub process had counted (the sum of
    /// `outbox_recipient_full` over its connections, sampled with the outboxes; a restarted
    /// hub counts from 0): mail held for a reading recipient's full inbox instead of evicting.
    pub recipient_full: Option<u64>,
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".into(), |d| format!("{:.2}s", d.as_secs_f64()))
}

/// `a:1,b:2`, or `-` when empty.
fn counts(list: &[(String, u64)]) -> String {
    if list.is_empty() {
        return "-".into();
    }
    list.iter()
        .map(|(c, n)| format!("{c}:{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "chaos scenario={} faulted={} duration={:.1}s ",
            self.scenario,
            self.faulted,
            self.duration.as_secs_f64()
        )?;
        match &self.mail {
            Some(m) => write!(
                f,
                "sent={} accepted={} delivered={} duplicates={} replays={} lost={} lost_killed_memory={} late_refused={} refused={} no_answer={} mail_p50={} mail_p99={} statuses={} refusals={} ",
                m.sent,
                m.accepted,
                m.delivered,
                m.duplicates,
                m.replays,
                m.lost,
                m.lost_killed_memory,
                m.late_refused,
                m.refused,
                m.no_answer,
                secs(m.latency_p50),
                secs(m.latency_p99),
                counts(&m.statuses),
                counts(&m.refusal_codes)
            )?,
            None => write!(f, "{} ", mail::UNAVAILABLE)?,
        }
        write!(
            f,
            "stream_bytes_ok={}/{} stream_conn={} stream_reconnects={} 503_latency={} detection={} recovery={} routed_echo={} hub_outbox_max={} node_outbox_max={} recipient_full={}",
            self.stream.ok_bytes,
            self.stream.expected,
            self.stream_conn,
            self.stream.reconnects,
            secs(self.unavailable_latency),
            secs(self.detection),
            secs(self.recovery),
            secs(self.routed_echo),
            self.outbox_max
                .map_or_else(|| "-".into(), |n| n.to_string()),
            self.node_outbox_max
                .map_or_else(|| "-".into(), |n| n.to_string()),
            self.recipient_full
                .map_or_else(|| "-".into(), |n| n.to_string())
        )
    }
}

/// The invariants every scenario asserts.
pub fn check(s: &Summary) -> anyhow::Result<()> {
    if let Some(e) = &s.stream.error {
        bail!("stream: {e}");
    }
    ensure!(
        s.stream.ok_bytes == s.stream.expected && s.stream.expected > 0,
        "stream: {} of {} bytes",
        s.stream.ok_bytes,
        s.stream.expected
    );
    if let Some(m) = &s.mail {
        let d = mail::describe(m);
        ensure!(m.lost == 0, "mail lost before delivery: {d}");
        ensure!(m.duplicates == 0, "mail delivered twice: {d}");
        ensure!(
            m.replays == 0,
            "mail replayed under the same message_id: {d}"
        );
        ensure!(m.refused_delivered == 0, "refused mail was delivered: {d}");
        ensure!(m.evicted == 0, "mail evicted before it was read: {d}");
        ensure!(m.accepted > 0, "no mail was accepted: {d}");
    }
    if let Some(l) = s.unavailable_latency {
        ensure!(
            l <= UNAVAILABLE_BOUND,
            "503 came {l:?} after the node stopped (bound {UNAVAILABLE_BOUND:?})"
        );
    }
    if let Some(d) = s.detection {
        ensure!(d <= DETECTION_BOUND, "partition noticed after {d:?}");
    }
    if let Some(r) = s.recovery {
        ensure!(r <= RECOVERY_BOUND, "mirror recovered after {r:?}");
    }
    if let Some(n) = s.outbox_max {
        ensure!(n <= OUTBOX_BOUND, "a hub outbox held {n} messages");
    }
    if let Some(n) = s.node_outbox_max {
        ensure!(
            n <= OUTBOX_BOUND,
            "a node's uplink outbox held {n} messages"
        );
    }
    Ok(())
}
