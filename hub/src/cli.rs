//! `tuic-hub` command line: the node's commands plus `connect` and `disconnect`.

use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use axum::routing::{get, post};
use clap::{Parser, Subcommand};
use tuic_node::ext::host::{ConfigFile, Location, NodeCommand, SecretStore, ServeArgs, Vault};

use crate::connections::{self, ConnectionConfig};
use crate::federation::Federation;

#[derive(Debug, Parser)]
#[command(
    name = "tuic-hub",
    version,
    about = "tuic hub: a node that also federates other nodes"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// serve, set-password, token: as on every node.
    #[command(flatten)]
    Node(NodeCommand),
    /// Add (or replace) a node connection; the token is read from stdin.
    Connect {
        #[command(flatten)]
        loc: Location,
        /// Connection id, the first part of addresses on that node.
        #[arg(long)]
        id: String,
        /// The node's base URL, `http://host:port`.
        #[arg(long)]
        url: String,
        /// Read the node's token (`tuic-node token` on that machine) from stdin.
        #[arg(long, required = true)]
        token_stdin: bool,
        /// The peer link's carrier: auto (QUIC when the node offers it, else the WebSocket),
        /// quic or websocket.
        #[arg(long)]
        transport: Option<crate::connections::TransportPref>,
    },
    /// Remove a node connection.
    Disconnect {
        #[command(flatten)]
        loc: Location,
        #[arg(long)]
        id: String,
    },
}

/// Entry point of the `tuic-hub` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let name = "tuic-hub";
    // `--config-dir`/`--instance` are global (accepted before the subcommand too); serve's
    // own flags before another subcommand are refused, as on a node.
    let refuse = |m: &str| -> ! {
        <Cli as clap::CommandFactory>::command()
            .error(clap::error::ErrorKind::ArgumentConflict, m)
            .exit()
    };
    let cmd = match cli.cmd {
        None => Cmd::Node(NodeCommand::Serve(cli.serve)),
        Some(Cmd::Node(c)) => Cmd::Node(cli.serve.before(c).unwrap_or_else(|m| refuse(m))),
        Some(_) if cli.serve.has_own() => refuse(tuic_node::ext::host::SERVE_ONLY),
        Some(other) => other,
    };
    let result = match cmd {
        Cmd::Node(cmd) => tuic_node::ext::host::run_command(name, cmd, federate),
        Cmd::Connect {
            loc,
            id,
            url,
            transport,
            ..
        } => connect(&loc, id, url, transport),
        Cmd::Disconnect { loc, id } => disconnect(&loc, &id),
    };
    tuic_node::ext::host::exit(name, result)
}

/// Starts federation on the opened node and returns the router hook that serves it.
fn federate(
    node: &Arc<tuic_node::ext::NodeApi>,
) -> anyhow::Result<Option<tuic_node::ext::RouterHook>> {
    let fed = Federation::new(node.clone())?;
    fed.reconcile();
    let hook: tuic_node::ext::RouterHook = Arc::new(move |app| {
        let hub_routes = axum::Router::new()
            .route("/hub/connections", get(crate::proxy::list_connections))
            .route("/hub/reload", post(crate::proxy::reload))
            .route("/hub/upload", post(crate::proxy::upload))
            .with_state(fed.clone());
        app.merge(hub_routes)
            .layer(axum::middleware::from_fn_with_state(
                fed.clone(),
                crate::proxy::intercept,
            ))
            .layer(axum::middleware::from_fn_with_state(
                fed.clone(),
                crate::ops::intercept,
            ))
            .layer(axum::middleware::from_fn_with_state(
                fed.clone(),
                crate::stories::intercept,
            ))
            .layer(axum::middleware::from_fn_with_state(
                fed.clone(),
                crate::acp::intercept,
            ))
            .layer(axum::middleware::from_fn_with_state(
                fed.clone(),
                crate::audit::intercept,
            ))
    });
    Ok(Some(hook))
}

fn vault_for(loc: &Location) -> anyhow::Result<(ConfigFile, Vault, std::path::PathBuf)> {
    let p = tuic_node::ext::host::paths(loc)?;
    p.ensure_dir()?;
    let file = ConfigFile::new(p.config_file());
    let cfg = file.load()?;
    let vault = Vault::open(
        &p.config_dir,
        p.secrets_file(),
        cfg.secret_store == SecretStore::Auto,
    );
    Ok((file, vault, p.socket))
}

fn connect(
    loc: &Location,
    id: String,
    url: String,
    transport: Option<crate::connections::TransportPref>,
) -> anyhow::Result<()> {
    let mut token = String::new();
    std::io::stdin()
        .read_to_string(&mut token)
        .context("reading the token from stdin")?;
    let (file, vault, socket) = vault_for(loc)?;
    let offer = quic_offer(url.trim_end_matches('/'));
    connections::connect(
        &file,
        &vault,
        ConnectionConfig {
            id: id.clone(),
            url,
            transport,
            quic_fingerprint: offer.as_ref().map(|o| o.fingerprint.clone()),
        },
        token.trim(),
    )?;
    tell_running_hub(&socket);
    eprintln!("connection {id} saved");
    match offer {
        Some(o) => eprintln!(
            "the node's QUIC certificate {} (udp port {}) is pinned (trust on first use); a changed certificate refuses the link until you connect again",
            o.fingerprint, o.port
        ),
        None => eprintln!(
            "the node offers no QUIC now (or did not answer): its certificate is pinned at the first QUIC link"
        ),
    }
    Ok(())
}

/// The node's QUIC offer from its `/health`, when it answers within a few seconds.
fn quic_offer(url: &str) -> Option<crate::link::Advertised> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            crate::link::advertised(url),
        )
        .await
        .ok()?
        .ok()?
    })
}

fn disconnect(loc: &Location, id: &str) -> anyhow::Result<()> {
    let (file, _vault, socket) = vault_for(loc)?;
    anyhow::ensure!(connections::disconnect(&file, id)?, "no connection {id}");
    tell_running_hub(&socket);
    eprintln!("connection {id} removed");
    Ok(())
}

/// Asks a running hub to apply the saved connections now (no hub running is fine).
fn tell_running_hub(socket: &std::path::Path) {
    let _ = tuic_node::ext::host::ask_running(
        socket,
        "POST",
        "/hub/reload",
        "",
        std::time::Duration::from_secs(5),
    );
}
