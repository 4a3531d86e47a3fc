//! Network namespaces for multi-host tests: a star of namespaces (the hub in the middle, each
//! node on its own veth link) created with `ip netns`/`ip link` and deleted on drop, and a
//! [`Door`] that lets a client on the test's side (a browser) reach a server inside one.
//! Traffic never leaves these namespaces and loopback.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

/// A set of namespaces with links, removed on drop.
#[derive(Debug)]
pub struct Net {
    prefix: String,
    names: Vec<String>,
    links: Vec<Link>,
}

/// One hub-node link.
#[derive(Debug)]
struct Link {
    /// The hub-side interface.
    hub_if: String,
    /// The node's namespace.
    ns: String,
    /// The node's address (what the hub reaches it at).
    node_addr: String,
    /// The hub's address on this link (what the node reaches it at).
    hub_addr: String,
}

/// Runs `ip ARGS`, its stderr in the error.
pub(crate) fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (apt-get install iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

impl Net {
    /// Creates the hub namespace plus `nodes` node namespaces, each linked to the hub on
    /// `10.<a>.<i>.0/24` (hub `.1`, node `.2`).
    pub fn star(nodes: usize) -> anyhow::Result<Self> {
        Self::star_prefixed("tq", nodes)
    }

    /// Like [`Net::star`], with namespace and interface names starting with `base` (a short
    /// ASCII tag; interface names are limited to 15 bytes), so a tool can find its leftovers.
    pub fn star_prefixed(base: &str, nodes: usize) -> anyhow::Result<Self> {
        let tag = format!(
            "{:x}",
            std::process::id() as u64 * 1000
                + (std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .subsec_micros() as u64
                    % 1000)
        );
        let prefix = format!("{base}{tag}");
        let mut net = Self {
            prefix: prefix.clone(),
            names: Vec::new(),
            links: Vec::new(),
        };
        let hub = net.add_ns("hub")?;
        ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        let a = 100 + (std::process::id() % 100) as u8;
        for i in 0..nodes {
            let ns = net.add_ns(&format!("n{i}"))?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            let (h_if, n_if) = (format!("{prefix}h{i}"), format!("{prefix}n{i}"));
            ip(&[
                "link", "add", &h_if, "netns", &hub, "type", "veth", "peer", "name", &n_if,
                "netns", &ns,
            ])?;
            let (h_addr, n_addr) = (
                format!("10.{a}.{i}.1/24", i = i + 1),
                format!("10.{a}.{i}.2/24", i = i + 1),
            );
            ip(&["-n", &hub, "addr", "add", &h_addr, "dev", &h_if])?;
            ip(&["-n", &ns, "addr", "add", &n_addr, "dev", &n_if])?;
            ip(&["-n", &hub, "link", "set", &h_if, "up"])?;
            ip(&["-n", &ns, "link", "set", &n_if, "up"])?;
            net.links.push(Link {
                hub_if: h_if,
                ns,
                node_addr: n_addr.trim_end_matches("/24").to_owned(),
                hub_addr: h_addr.trim_end_matches("/24").to_owned(),
            });
        }
        Ok(net)
    }

    fn add_ns(&mut self, role: &str) -> anyhow::Result<String> {
        let name = format!("{}{role}", self.prefix);
        ip(&["netns", "add", &name])?;
        self.names.push(name.clone());
        Ok(name)
    }

    /// The hub's namespace.
    pub fn hub(&self) -> &str {
        &self.names[0]
    }

    /// Node `i`'s namespace.
    pub fn node(&self, i: usize) -> &str {
        &self.links[i].ns
    }

    /// Node `i`'s address as the hub reaches it.
    pub fn node_addr(&self, i: usize) -> &str {
        &self.links[i].node_addr
    }

    /// The hub's address on its link to node `i` (what node `i` reaches it at).
    pub fn hub_addr(&self, i: usize) -> &str {
        &self.links[i].hub_addr
    }

    /// Node `i`'s interface name (inside the node's namespace).
    pub fn node_if(&self, i: usize) -> String {
        format!("{}n{i}", self.prefix)
    }

    /// Cuts (or restores) the link between the hub and node `i`.
    pub fn set_link(&self, i: usize, up: bool) -> anyhow::Result<()> {
        ip(&[
            "-n",
            self.hub(),
            "link",
            "set",
            &self.links[i].hub_if,
            if up { "up" } else { "down" },
        ])
    }
}

/// Namespaces whose names start with `prefix` (from `ip netns list`).
pub fn namespaces_with_prefix(prefix: &str) -> anyhow::Result<Vec<String>> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .context("running ip netns list")?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect())
}

impl Drop for Net {
    fn drop(&mut self) {
        for n in self.names.iter().rev() {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// A way into a namespace for a client on the test's side (a browser the test drives): a TCP
/// listener on the test's loopback whose every connection is dialed, from inside the namespace,
/// to a target there and relayed both ways. It runs on its own thread, moved into the namespace
/// (`setns` affects only the calling thread), so the sockets it dials belong to the namespace
/// while the listener, created before the move, stays on the test's side. Stops on drop,
/// closing every relayed connection.
#[derive(Debug)]
pub struct Door {
    /// Where the client connects (the test's loopback).
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Door {
    /// Opens a door to `target` inside namespace `ns` (by name, `/run/netns/<ns>`).
    pub fn open(ns: &str, target: SocketAddr) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let nsf = std::fs::File::open(format!("/run/netns/{ns}"))
            .with_context(|| format!("opening namespace {ns}"))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
        let thread = std::thread::Builder::new()
            .name("netns-door".into())
            .spawn(move || {
                let setup = || -> anyhow::Result<tokio::runtime::Runtime> {
                    rustix::thread::move_into_link_name_space(
                        nsf.as_fd(),
                        Some(rustix::thread::LinkNameSpaceType::Network),
                    )
                    .context("entering the namespace")?;
                    Ok(tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?)
                };
                let rt = match setup() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.into()));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    let relay = async {
                        while let Ok((mut down, _)) = listener.accept().await {
                            tokio::spawn(async move {
                                // Refused inside: the client's connection closes, as a direct
                                // dial's would fail.
                                let Ok(mut up) = tokio::net::TcpStream::connect(target).await
                                else {
                                    return;
                                };
                                let _ = (down.set_nodelay(true), up.set_nodelay(true));
                                let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                            });
                        }
                    };
                    tokio::select! {
                        _ = stopped => {}
                        _ = relay => {}
                    }
                });
                // Dropping the runtime here cancels every relay task, closing its sockets.
            })?;
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .context("the door's thread did not start")??;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A TCP listener on `0.0.0.0:0` inside namespace `ns` (by name), usable from the test's side:
/// it is bound on a short-lived thread moved into the namespace (`setns` affects only the
/// calling thread), and a socket keeps the namespace it was made in. For a receiver the
/// processes in the namespace (and, over the veths, its neighbours) dial.
pub fn listen_in(ns: &str) -> anyhow::Result<std::net::TcpListener> {
    let nsf = std::fs::File::open(format!("/run/netns/{ns}"))
        .with_context(|| format!("opening namespace {ns}"))?;
    std::thread::Builder::new()
        .name("netns-listen".into())
        .spawn(move || -> anyhow::Result<std::net::TcpListener> {
            rustix::thread::move_into_link_name_space(
                nsf.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .context("entering the namespace")?;
            Ok(std::net::TcpListener::bind("0.0.0.0:0")?)
        })?
        .join()
        .map_err(|_| anyhow::anyhow!("the listening thread panicked"))?
}
