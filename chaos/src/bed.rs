//! The test bed: a hub and two nodes (B and C) in their own network namespaces, linked by veth
//! pairs on the harness's private addresses (`10.<a>.<i>.0/24`, see `tuic_tests::netns`),
//! running the real `tuic-hub` / `tuic-node` binaries that cargo built beside this program.
//!
//! The hub reaches node B through the harness's delay proxy (in the hub's namespace) and node C
//! directly, so every scenario exercises both paths. Faults: `kill -9` and restart with the
//! same config dir, link partition (`ip link set down`), packet loss (an `nft` table inside a
//! node's namespace), proxy delay. Everything is torn down on drop, also on panic: processes
//! first (killed), then namespaces. A leftover from a killed harness is removed by
//! [`cleanup`] (namespaces by prefix, with the processes still inside them).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tuic_tests::netns::{Net, namespaces_with_prefix};
use tuic_tests::{NodeProc, config_dir, ipc, run_with_stdin};

use crate::proxy::DelayProxy;

/// Namespace name prefix of every chaos bed (`tqx` never starts a `tuic_tests` star, whose
/// names are `tq<hex>`).
pub const PREFIX: &str = "tqx";

/// The port every node listens on inside its own namespace.
const NODE_PORT: u16 = 9876;

/// Connection ids of nodes B and C on the hub.
pub const CONN_IDS: [&str; 2] = ["nodeb", "nodec"];

/// One host of the bed: its namespace, its config dir (kept across restarts) and its process.
#[derive(Debug)]
pub struct Host {
    /// Binary name (`tuic-hub` or `tuic-node`).
    pub binary: &'static str,
    /// Network namespace.
    pub ns: String,
    /// Config dir, reused by every restart.
    pub dir: tempfile::TempDir,
    /// Command-line arguments of `serve`.
    args: Vec<String>,
    /// The running process, if any.
    pub proc: Option<NodeProc>,
}

impl Host {
    fn new(binary: &'static str, ns: &str, args: Vec<String>) -> Self {
        Self {
            binary,
            ns: ns.to_owned(),
            dir: config_dir(json!({})),
            args,
            proc: None,
        }
    }

    fn dir_str(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// Starts the process (waits for its ready line).
    pub fn start(&mut self) -> anyhow::Result<()> {
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let dir = self.dir_str();
        args.extend(["--config-dir", &dir]);
        self.proc = Some(NodeProc::start_in(Some(&self.ns), self.binary, &args, &[])?);
        Ok(())
    }

    /// `kill -9`, waiting for the exit.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        let mut p = self.proc.take().context("not running")?;
        p.child.kill().context("SIGKILL")?;
        p.child.wait()?;
        Ok(())
    }

    /// The IPC socket of the running process.
    pub fn socket(&self) -> anyhow::Result<PathBuf> {
        Ok(self.proc.as_ref().context("not running")?.socket.clone())
    }

    /// The last `n` lines of the process's log (for failure reports).
    pub fn log_tail(&self, n: usize) -> String {
        let text = self
            .proc
            .as_ref()
            .map(NodeProc::log_text)
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// Hub + nodes B and C, connected and up.
#[derive(Debug)]
pub struct Bed {
    /// Nodes B (index 0) and C (index 1).
    pub nodes: Vec<Host>,
    /// The hub.
    pub hub: Host,
    /// The delay proxy between the hub and node B.
    pub proxy: DelayProxy,
    /// Active loss rules, by node index.
    lossy: Vec<usize>,
    /// Declared last, dropped last: the namespaces outlive the processes inside them.
    pub net: Net,
}

fn ip_netns(ns: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .with_context(|| format!("running {} in {ns}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "{} in {ns}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Bed {
    /// Creates the namespaces, starts both nodes and the hub, connects the hub to both and
    /// waits (bounded) until both connections are up.
    ///
    /// `transport` (`auto`, `quic`, `websocket`) is node C's link carrier; node B sits behind
    /// the TCP delay proxy, so its link is always the WebSocket.
    pub async fn up(transport: &str) -> anyhow::Result<Self> {
        let net = Net::star_prefixed(PREFIX, 2)?;
        let mut nodes = Vec::new();
        for i in 0..2 {
            let mut h = Host::new(
                "tuic-node",
                net.node(i),
                vec![
                    "--remote-access".into(),
                    "--port".into(),
                    NODE_PORT.to_string(),
                ],
            );
            let (code, _, err) = run_with_stdin(
                "tuic-node",
                &["set-password", "--config-dir", &h.dir_str()],
                "chaos pw",
            )?;
            anyhow::ensure!(code == 0, "set-password: {err}");
            h.start()?;
            nodes.push(h);
        }
        let target: SocketAddr = format!("{}:{NODE_PORT}", net.node_addr(0)).parse()?;
        let proxy = DelayProxy::start(net.hub(), target)?;
        let mut hub = Host::new("tuic-hub", net.hub(), Vec::new());
        hub.start()?;
        let bed = Self {
            nodes,
            hub,
            proxy,
            lossy: Vec::new(),
            net,
        };
        for (i, id) in CONN_IDS.iter().enumerate() {
            let url = if i == 0 {
                format!("http://{}", bed.proxy.addr)
            } else {
                format!("http://{}:{NODE_PORT}", bed.net.node_addr(i))
            };
            let (_, token, _) = run_with_stdin(
                "tuic-node",
                &["token", "--config-dir", &bed.nodes[i].dir_str()],
                "",
            )?;
            let hub_dir = bed.hub.dir_str();
            let mut args = vec![
                "connect",
                "--config-dir",
                &hub_dir,
                "--id",
                id,
                "--url",
                &url,
                "--token-stdin",
            ];
            if i == 1 {
                args.extend(["--transport", transport]);
            } else {
                args.extend(["--transport", "websocket"]);
            }
            let (code, _, err) = run_with_stdin("tuic-hub", &args, token.trim())?;
            anyhow::ensure!(code == 0, "tuic-hub connect {id}: {err}");
        }
        for id in CONN_IDS {
            bed.wait_conn(id, true, Duration::from_secs(20)).await?;
        }
        Ok(bed)
    }

    /// The carriers of the links, `nodeb=… nodec=…` as the hub reports them.
    pub async fn transports(&self) -> String {
        let rows = self.connections().await.unwrap_or_default();
        rows.iter()
            .map(|r| {
                format!(
                    "{}={}",
                    r["id"].as_str().unwrap_or("?"),
                    r["transport"].as_str().unwrap_or("none")
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The hub's connection list (`GET /hub/connections`).
    pub async fn connections(&self) -> anyhow::Result<Vec<Value>> {
        let r = ipc(&self.hub.socket()?, "GET", "/hub/connections", None).await?;
        anyhow::ensure!(r.status == 200, "GET /hub/connections: {}", r.status);
        Ok(r.json()["connections"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Whether the hub reports connection `id` up: its mirror, and its peer link where the
    /// hub has one (`peer_link_up`).
    pub async fn conn_up(&self, id: &str) -> bool {
        self.connections().await.is_ok_and(|c| {
            c.iter().any(|c| {
                c["id"] == id && c["up"] == true && c.get("peer_link_up").is_none_or(|l| l == true)
            })
        })
    }

    /// Waits (bounded, polling) until connection `id` is `up == want`; returns how long it took.
    pub async fn wait_conn(
        &self,
        id: &str,
        want: bool,
        limit: Duration,
    ) -> anyhow::Result<Duration> {
        let t0 = Instant::now();
        loop {
            if self.conn_up(id).await == want {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > limit {
                bail!(
                    "connection {id} not up={want} within {limit:?}: {:?}\nhub log:\n{}",
                    self.connections().await.ok(),
                    self.hub.log_tail(20)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Creates a session on node `i` running `sh -c script`; returns its session id.
    pub async fn spawn_on(&self, i: usize, script: &str) -> anyhow::Result<String> {
        let r = ipc(
            &self.nodes[i].socket()?,
            "POST",
            "/sessions",
            Some(json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "args": ["-c", script]})),
        )
        .await?;
        anyhow::ensure!(
            r.status == 200,
            "POST /sessions: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        r.json()["session_id"]
            .as_str()
            .map(str::to_owned)
            .context("no session_id")
    }

    /// `kill -9` of node `i`.
    pub fn kill_node(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].kill9()
    }

    /// Restarts node `i` with the same config dir.
    pub fn restart_node(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].start()
    }

    /// `kill -9` of the hub.
    pub fn kill_hub(&mut self) -> anyhow::Result<()> {
        self.hub.kill9()
    }

    /// Restarts the hub with the same config dir (its connections are persisted there).
    pub fn restart_hub(&mut self) -> anyhow::Result<()> {
        self.hub.start()
    }

    /// Cuts (`down`) or restores the link between the hub and node `i`.
    pub fn set_link(&self, i: usize, up: bool) -> anyhow::Result<()> {
        self.net.set_link(i, up)
    }

    /// Drops `percent` % of the packets in and out of node `i`'s link, inside its namespace
    /// (`nft numgen random`); `0` removes the rule.
    pub fn set_loss(&mut self, i: usize, percent: u32) -> anyhow::Result<()> {
        let ns = self.nodes[i].ns.clone();
        if self.lossy.contains(&i) {
            ip_netns(&ns, &["nft", "delete", "table", "inet", "chaos"])?;
            self.lossy.retain(|&x| x != i);
        }
        if percent == 0 {
            return Ok(());
        }
        let dev = self.net.node_if(i);
        let rules = format!(
            "table inet chaos {{\n\
             chain input {{ type filter hook input priority 0; policy accept; \
             iifname \"{dev}\" numgen random mod 100 < {percent} counter drop; }}\n\
             chain output {{ type filter hook output priority 0; policy accept; \
             oifname \"{dev}\" numgen random mod 100 < {percent} counter drop; }}\n}}\n"
        );
        let path = self.nodes[i].dir.path().join("chaos.nft");
        std::fs::write(&path, rules)?;
        ip_netns(&ns, &["nft", "-f", &path.display().to_string()])
            .context("installing the loss rule (apt-get install nftables)")?;
        self.lossy.push(i);
        Ok(())
    }

    /// Packets the loss rules of node `i` dropped so far (their nft counters).
    pub fn dropped_packets(&self, i: usize) -> anyhow::Result<u64> {
        let text = ip_netns(
            &self.nodes[i].ns,
            &["nft", "list", "table", "inet", "chaos"],
        )?;
        let words: Vec<&str> = text.split_whitespace().collect();
        Ok(words
            .windows(2)
            .filter(|w| w[0] == "packets")
            .filter_map(|w| w[1].parse::<u64>().ok())
            .sum())
    }

    /// The last lines of every process's log, for a failure report.
    pub fn diagnostics(&self) -> String {
        let mut s = String::new();
        for (name, h) in [
            ("hub", &self.hub),
            ("nodeb", &self.nodes[0]),
            ("nodec", &self.nodes[1]),
        ] {
            s.push_str(&format!("--- {name} log ---\n{}\n", h.log_tail(15)));
            if std::env::var_os("CHAOS_DEBUG").is_some() {
                // The whole log of the host's current process, for a post-mortem.
                let path = std::env::temp_dir().join(format!("chaos-{name}.log"));
                let text = h.proc.as_ref().map(NodeProc::log_text).unwrap_or_default();
                if std::fs::write(&path, text).is_ok() {
                    s.push_str(&format!("(whole log: {})\n", path.display()));
                }
            }
        }
        s
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        // Processes first (NodeProc kills on drop), then the proxy, then the namespaces.
        self.hub.proc = None;
        for n in &mut self.nodes {
            n.proc = None;
        }
    }
}

/// Removes leftover chaos namespaces (name prefix [`PREFIX`]) and kills the processes still
/// running inside them. Returns the namespaces removed.
pub fn cleanup() -> anyhow::Result<Vec<String>> {
    cleanup_named(namespaces_with_prefix(PREFIX)?)
}

/// [`cleanup`] of the named namespaces only (a test's own leftovers, leaving any other bed
/// that runs at the same time alone).
pub fn cleanup_named(names: Vec<String>) -> anyhow::Result<Vec<String>> {
    for ns in &names {
        let out = Command::new("ip").args(["netns", "pids", ns]).output()?;
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Some(pid) = pid
                .parse::<i32>()
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        let out = Command::new("ip").args(["netns", "del", ns]).output()?;
        if !out.status.success() {
            bail!(
                "ip netns del {ns}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(names)
}
