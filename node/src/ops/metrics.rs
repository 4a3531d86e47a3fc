//! `GET /metrics`: the node's Prometheus text exposition, built with the `prometheus` crate
//! (its own registry per node, never the process-global one).
//!
//! Most figures are read from the services at scrape time (sessions, mail, outbox, journal);
//! monotonic totals the services keep (bytes read from PTYs, sessions created, mail posted,
//! journal appends) are carried into counters under one scrape lock, so a counter never goes
//! back. Request latencies are observed per route template by the `routes::ops::track`
//! middleware ([`Metrics::observe_request`]).

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::sync::Mutex;

use super::OpsEnv;
use crate::progress::Kind;

/// The content type of the text exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The node's collectors.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    sessions: IntGauge,
    tombstones: IntGauge,
    sessions_created: IntCounter,
    output_bytes: IntCounter,
    wait_checks: IntCounter,
    mail_posted: IntCounter,
    mail_peers: IntGauge,
    mail_unread: IntGauge,
    outbox_held: IntGaugeVec,
    outbox_bytes: IntGaugeVec,
    mcp_sessions: IntGauge,
    open_fds: IntGauge,
    open_fds_limit: IntGauge,
    fd_refusals: IntCounter,
    progress_entries: IntGauge,
    progress_appended: IntCounterVec,
    upstream_up: IntGaugeVec,
    upstream_tools: IntGaugeVec,
    upstream_failures: IntGaugeVec,
    http: HistogramVec,
    /// Held while counters catch up with the services' totals.
    scrape: Mutex<()>,
}

fn must<T>(r: prometheus::Result<T>) -> T {
    // Static names and labels: a failure here is a programming error caught by every test.
    r.expect("metric definition")
}

impl Default for Metrics {
    fn default() -> Self {
        let registry = Registry::new();
        let reg = |c: Box<dyn prometheus::core::Collector>| must(registry.register(c));
        let gauge = |n: &str, h: &str| {
            let g = must(IntGauge::new(n, h));
            reg(Box::new(g.clone()));
            g
        };
        let counter = |n: &str, h: &str| {
            let c = must(IntCounter::new(n, h));
            reg(Box::new(c.clone()));
            c
        };
        let sessions = gauge("tuic_sessions", "Live PTY sessions.");
        let tombstones = gauge(
            "tuic_sessions_tombstoned",
            "Exited sessions whose output still answers (tombstone period).",
        );
        let sessions_created = counter(
            "tuic_sessions_created_total",
            "PTY sessions created since the node started.",
        );
        let output_bytes = counter(
            "tuic_pty_output_bytes_total",
            "Bytes read from PTYs (streamed to the ring, screen and subscribers).",
        );
        let wait_checks = counter(
            "tuic_session_wait_checks_total",
            "Condition checks by session waits (start, each lifecycle change, deadline; no polling).",
        );
        let mail_posted = counter(
            "tuic_mail_posted_total",
            "Messages delivered into inboxes on this node.",
        );
        let mail_peers = gauge("tuic_mail_peers", "Registered agent identities.");
        let mail_unread = gauge("tuic_mail_unread", "Unread messages over every inbox.");
        let outbox_held = must(IntGaugeVec::new(
            Opts::new(
                "tuic_outbox_held_messages",
                "Cross-host mail held until the next hop acknowledges it, per connection.",
            ),
            &["connection"],
        ));
        reg(Box::new(outbox_held.clone()));
        let outbox_bytes = must(IntGaugeVec::new(
            Opts::new(
                "tuic_outbox_held_bytes",
                "Bytes of cross-host mail held, per connection.",
            ),
            &["connection"],
        ));
        reg(Box::new(outbox_bytes.clone()));
        let mcp_sessions = gauge("tuic_mcp_sessions", "MCP protocol sessions.");
        let open_fds = gauge("tuic_open_fds", "File descriptors this process holds open.");
        let open_fds_limit = gauge(
            "tuic_open_fds_limit",
            "The soft RLIMIT_NOFILE (raised to the hard limit at start).",
        );
        let fd_refusals = counter(
            "tuic_fd_refusals_total",
            "New TCP clients and outbound links refused to keep the descriptor reserve.",
        );
        let progress_entries = gauge(
            "tuic_progress_journal_entries",
            "Entries retained in the progress journal.",
        );
        let progress_appended = must(IntCounterVec::new(
            Opts::new(
                "tuic_progress_appended_total",
                "Progress entries journaled since the node started, by type.",
            ),
            &["type"],
        ));
        reg(Box::new(progress_appended.clone()));
        let per_upstream = |n: &str, h: &str| {
            let g = must(IntGaugeVec::new(Opts::new(n, h), &["upstream"]));
            reg(Box::new(g.clone()));
            g
        };
        let upstream_up = per_upstream(
            "tuic_upstream_up",
            "1 while the upstream MCP server is ready, else 0 (its status is in GET /mcp/status).",
        );
        let upstream_tools = per_upstream(
            "tuic_upstream_tools",
            "Tools the upstream offers after its allow/deny filter.",
        );
        let upstream_failures = per_upstream(
            "tuic_upstream_failures",
            "Consecutive failures counted by the upstream's circuit breaker.",
        );
        let http = must(HistogramVec::new(
            HistogramOpts::new(
                "tuic_http_request_duration_seconds",
                "Time to the response head, per route template and method.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
                60.0,
            ]),
            &["route", "method"],
        ));
        reg(Box::new(http.clone()));
        Self {
            registry,
            sessions,
            tombstones,
            sessions_created,
            output_bytes,
            wait_checks,
            mail_posted,
            mail_peers,
            mail_unread,
            outbox_held,
            outbox_bytes,
            mcp_sessions,
            open_fds,
            open_fds_limit,
            fd_refusals,
            progress_entries,
            progress_appended,
            upstream_up,
            upstream_tools,
            upstream_failures,
            http,
            scrape: Mutex::new(()),
        }
    }
}

fn catch_up(c: &IntCounter, total: u64) {
    let now = c.get();
    if total > now {
        c.inc_by(total - now);
    }
}

impl Metrics {
    /// Observes one request's time to its response head.
    pub fn observe_request(&self, route: &str, method: &str, secs: f64) {
        self.http.with_label_values(&[route, method]).observe(secs);
    }

    /// The text exposition now, of the services in `env` and `mail_posted` messages.
    pub fn render(&self, env: &OpsEnv, mail_posted: u64) -> String {
        let _g = self.scrape.lock().unwrap_or_else(|p| p.into_inner());
        let s = env.sessions.stats();
        self.sessions.set(s.live as i64);
        self.tombstones.set(s.tombstoned as i64);
        catch_up(&self.sessions_created, s.created_total);
        catch_up(&self.output_bytes, s.output_bytes_total);
        catch_up(&self.wait_checks, s.wait_checks_total);
        catch_up(&self.mail_posted, mail_posted);
        let counts = (env.counts)();
        self.mail_peers.set(counts.mail_peers as i64);
        self.mail_unread.set(counts.mail_unread as i64);
        let up = &counts.uplink;
        let held = up["held"].as_i64().unwrap_or(0);
        self.outbox_held.with_label_values(&["hub"]).set(held);
        self.outbox_bytes
            .with_label_values(&["hub"])
            .set(up["bytes"].as_i64().unwrap_or(0));
        self.mcp_sessions.set(counts.mcp_sessions as i64);
        self.open_fds.set(crate::server::fds::used() as i64);
        self.open_fds_limit
            .set(i64::try_from(crate::server::fds::limit()).unwrap_or(i64::MAX));
        catch_up(&self.fd_refusals, crate::server::fds::refused_total());
        self.progress_entries.set(env.progress.journal.len() as i64);
        for k in [Kind::Done, Kind::Blocked, Kind::Intent] {
            catch_up(
                &self.progress_appended.with_label_values(&[k.as_str()]),
                env.progress.appended(k),
            );
        }
        // Upstreams come and go with the config file: only the current ones are exposed.
        self.upstream_up.reset();
        self.upstream_tools.reset();
        self.upstream_failures.reset();
        for u in env.upstreams.status() {
            let name = u["name"].as_str().unwrap_or_default();
            let ready = u["status"] == "ready" || u["status"] == "degraded";
            self.upstream_up
                .with_label_values(&[name])
                .set(i64::from(ready));
            let n = |k: &str| u[k].as_i64().unwrap_or(0);
            self.upstream_tools
                .with_label_values(&[name])
                .set(n("tools"));
            self.upstream_failures
                .with_label_values(&[name])
                .set(n("failures"));
        }
        let mut buf = Vec::new();
        // Encoding gathered families into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}
