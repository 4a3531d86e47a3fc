//! A federation test bed: a `tuic-hub` in the centre namespace of a [`Net::star`] and one
//! remote-access `tuic-node` per outer namespace, each connected to the hub. Used by the
//! multi-host tests and the federation benchmarks.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::impair::{Params, TunLink};
use crate::netns::Net;
use crate::{NodeProc, config_dir, ipc, run_with_stdin};

/// The port every node listens on inside its namespace.
pub const NODE_PORT: u16 = 9876;

fn s(d: &tempfile::TempDir) -> String {
    d.path().to_str().expect("utf-8 temp path").to_owned()
}

/// A node in its namespace, with its config dir (kept for restarts) and token.
#[derive(Debug)]
pub struct FedNode {
    /// Connection id on the hub (`nodeb`, `nodec`, ...).
    pub id: String,
    /// Namespace name.
    pub ns: String,
    /// Config dir (same one on restart).
    pub dir: tempfile::TempDir,
    /// The running process, if any.
    pub proc: Option<NodeProc>,
    /// The node token the hub uses.
    pub token: String,
    /// `http://addr:port` as the hub dials it.
    pub url: String,
}

impl FedNode {
    /// Starts a remote-access node in `ns` with a fresh config dir (`extra` merged into it).
    pub fn start(id: &str, ns: &str, addr: &str, extra: Value) -> anyhow::Result<Self> {
        let dir = config_dir(extra);
        let (code, _, err) = run_with_stdin(
            "tuic-node",
            &["set-password", "--config-dir", &s(&dir)],
            "node pw",
        )?;
        if code != 0 {
            bail!("set-password: {err}");
        }
        let (_, token, _) = run_with_stdin("tuic-node", &["token", "--config-dir", &s(&dir)], "")?;
        let mut n = Self {
            id: id.to_owned(),
            ns: ns.to_owned(),
            dir,
            proc: None,
            token: token.trim().to_owned(),
            url: format!("http://{addr}:{NODE_PORT}"),
        };
        n.restart()?;
        Ok(n)
    }

    /// (Re)starts the process with the same config dir.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        let port = NODE_PORT.to_string();
        self.proc = Some(NodeProc::start_in(
            Some(&self.ns),
            "tuic-node",
            &[
                "--config-dir",
                &s(&self.dir),
                "--remote-access",
                "--port",
                &port,
            ],
            &[],
        )?);
        Ok(())
    }

    /// `kill -9`, waited for.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.proc.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    /// The running process.
    pub fn proc(&self) -> &NodeProc {
        self.proc.as_ref().expect("node is running")
    }
}

/// `GET /hub/connections` on `hub`.
pub async fn connections(hub: &NodeProc) -> anyhow::Result<Vec<Value>> {
    let r = ipc(&hub.socket, "GET", "/hub/connections", None).await?;
    Ok(r.json()["connections"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// Hub + nodes, torn down on drop (processes first, then namespaces).
#[derive(Debug)]
pub struct FedBed {
    /// The nodes, `nodeb`, `nodec`, ... in star order.
    pub nodes: Vec<FedNode>,
    /// The hub's config dir.
    pub hub_dir: tempfile::TempDir,
    /// The hub process.
    pub hub: NodeProc,
    /// With [`FedBed::start_impaired`]: the impaired link the hub reaches that node over
    /// (stopped after the processes, before the namespaces go).
    pub impaired: Option<TunLink>,
    /// The namespaces (dropped last).
    pub net: Net,
}

impl FedBed {
    /// A hub and `n` nodes (ids `nodeb`, `nodec`, ...), every connection up.
    pub async fn start(n: usize) -> anyhow::Result<Self> {
        Self::start_with(n, json!({})).await
    }

    /// [`FedBed::start`] with `node_config` merged into every node's `config.json`.
    pub async fn start_with(n: usize, node_config: Value) -> anyhow::Result<Self> {
        Self::start_with_hub(n, node_config, json!({}), None).await
    }

    /// [`FedBed::start_with`] whose hub also gets `hub_config` merged into its `config.json`
    /// and, with `password`, that login password and remote access (TCP on an ephemeral port
    /// inside its namespace; reach it from the test's side through a [`crate::netns::Door`]),
    /// for tests that drive the hub from a browser.
    pub async fn start_with_hub(
        n: usize,
        node_config: Value,
        hub_config: Value,
        password: Option<&str>,
    ) -> anyhow::Result<Self> {
        Self::start_inner(n, node_config, hub_config, password, None).await
    }

    /// [`FedBed::start_with_hub`] (no password) where the hub reaches node `node` (TCP and
    /// UDP alike) over a [`TunLink`] with `params` instead of its veth: the node's URL is
    /// the link's far end. [`FedBed::impaired`] changes the impairment while the bed runs.
    pub async fn start_impaired(
        n: usize,
        node_config: Value,
        hub_config: Value,
        node: usize,
        params: Params,
    ) -> anyhow::Result<Self> {
        Self::start_inner(n, node_config, hub_config, None, Some((node, params))).await
    }

    async fn start_inner(
        n: usize,
        node_config: Value,
        hub_config: Value,
        password: Option<&str>,
        impaired: Option<(usize, Params)>,
    ) -> anyhow::Result<Self> {
        let net = Net::star(n)?;
        let link = match impaired {
            Some((i, params)) => Some((
                i,
                TunLink::open(net.hub(), net.node(i), params, 0x7475_6963)?,
            )),
            None => None,
        };
        let mut nodes = Vec::new();
        for i in 0..n {
            let id = format!("node{}", (b'b' + i as u8) as char);
            let addr = match &link {
                Some((j, _)) if *j == i => TunLink::B_ADDR,
                _ => net.node_addr(i),
            };
            nodes.push(FedNode::start(&id, net.node(i), addr, node_config.clone())?);
        }
        let hub_dir = config_dir(hub_config);
        let hub_dir_s = s(&hub_dir);
        let mut hub_args = vec!["--config-dir", &hub_dir_s];
        if let Some(pw) = password {
            let (code, _, err) = run_with_stdin(
                "tuic-hub",
                &["set-password", "--config-dir", &hub_dir_s],
                pw,
            )?;
            if code != 0 {
                bail!("hub set-password: {err}");
            }
            hub_args.extend(["--remote-access", "--port", "0"]);
        }
        let hub = NodeProc::start_in(Some(net.hub()), "tuic-hub", &hub_args, &[])?;
        let bed = Self {
            nodes,
            hub_dir,
            hub,
            impaired: link.map(|(_, l)| l),
            net,
        };
        for node in &bed.nodes {
            let (code, _, err) = run_with_stdin(
                "tuic-hub",
                &[
                    "connect",
                    "--config-dir",
                    &s(&bed.hub_dir),
                    "--id",
                    &node.id,
                    "--url",
                    &node.url,
                    "--token-stdin",
                ],
                &node.token,
            )?;
            if code != 0 {
                bail!("tuic-hub connect {}: {err}", node.id);
            }
        }
        for node in &bed.nodes {
            bed.wait_up(&node.id, true, Duration::from_secs(20)).await?;
        }
        Ok(bed)
    }

    /// `GET /hub/connections` on the hub.
    pub async fn connections(&self) -> anyhow::Result<Vec<Value>> {
        connections(&self.hub).await
    }

    /// Waits (bounded) until connection `id` reports `up == want`.
    pub async fn wait_up(&self, id: &str, want: bool, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let c = self.connections().await?;
            if c.iter().any(|c| c["id"] == id && c["up"] == json!(want)) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("connection {id} never became up={want}: {c:?}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Creates a session on node `i` over its own socket; returns its PTY id.
    pub async fn create_on_node(&self, i: usize, body: Value) -> anyhow::Result<String> {
        let r = ipc(
            &self.nodes[i].proc().socket,
            "POST",
            "/sessions",
            Some(body),
        )
        .await?;
        if r.status != 200 {
            bail!(
                "create on {}: {}",
                self.nodes[i].id,
                String::from_utf8_lossy(&r.body)
            );
        }
        r.json()["session_id"]
            .as_str()
            .map(str::to_owned)
            .context("session_id")
    }

    /// The hub's merged session list.
    pub async fn hub_sessions(&self) -> anyhow::Result<Vec<Value>> {
        let r = ipc(&self.hub.socket, "GET", "/sessions", None).await?;
        Ok(r.json().as_array().cloned().unwrap_or_default())
    }

    /// Waits (bounded) until the hub lists `address`.
    pub async fn wait_listed(&self, address: &str, limit: Duration) -> anyhow::Result<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let rows = self.hub_sessions().await?;
            if let Some(r) = rows.iter().find(|r| r["address"] == json!(address)) {
                return Ok(r.clone());
            }
            if Instant::now() >= deadline {
                bail!("{address} never listed on the hub: {rows:?}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for FedBed {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill9();
        }
        let _ = self.hub.child.kill();
        let _ = self.hub.child.wait();
    }
}
