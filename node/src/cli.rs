//! Command line of `tuic-node` (and of `tuic-hub`, which is a node plus federation):
//! `serve` (the default), `set-password`, `token`, `sessions`, `install-service`, `backup`,
//! `restore`.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{ConfigFile, SecretStore};
use crate::logs::LogRing;
use crate::paths::{LocationEnv, Paths};
use crate::state::{NODE_TOKEN, Node, RunOverrides};
use crate::vault::{self, Vault};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "tuic node: terminals, files and agent mail for one machine"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<NodeCommand>,
    #[command(flatten)]
    serve: ServeArgs,
}

/// The commands every node binary has (`tuic-hub` flattens them into its own).
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Run the node in the foreground until SIGINT/SIGTERM (the default).
    Serve(ServeArgs),
    /// Set the remote-access password (read from stdin; one trailing newline is stripped).
    /// Every login made with the old password is revoked.
    SetPassword {
        #[command(flatten)]
        loc: Location,
        /// User name for Basic and login (default: keep the configured one, "admin").
        #[arg(long)]
        user: Option<String>,
    },
    /// Print the node's connection token (created on first use); a hub presents it.
    Token {
        #[command(flatten)]
        loc: Location,
        /// Replace the token with a new one and print it: the old one stops working at once.
        /// A hub learns the new one when `tuic-hub connect` is run again with it.
        #[arg(long)]
        rotate: bool,
    },
    /// List the logins (browser sessions) of this node, or revoke them.
    Sessions {
        #[command(flatten)]
        loc: Location,
        /// Revoke the login with this id (from the list).
        #[arg(long, conflicts_with = "revoke_all")]
        revoke: Option<String>,
        /// Revoke every login.
        #[arg(long)]
        revoke_all: bool,
    },
    /// Write this binary's systemd user unit (launchd agent on macOS), enable and start it.
    InstallService {
        #[command(flatten)]
        loc: Location,
        /// Directory for the unit (default: ~/.config/systemd/user or ~/Library/LaunchAgents).
        #[arg(long)]
        unit_dir: Option<PathBuf>,
        /// Only write the unit; print how to enable it.
        #[arg(long)]
        no_enable: bool,
    },
    /// Copy the store (state.redb) to FILE: through the running node (a consistent copy while
    /// it serves), or directly when it is stopped.
    Backup {
        #[command(flatten)]
        loc: Location,
        /// The file to write (must not exist).
        file: PathBuf,
    },
    /// Replace the store with a backup (the node must be stopped; the old store is kept).
    Restore {
        #[command(flatten)]
        loc: Location,
        /// The backup file.
        file: PathBuf,
    },
    /// Internal: hold one session's PTY for the node (started by the node itself; see
    /// `session::holder`).
    #[command(hide = true)]
    Hold {
        /// The socket to serve.
        #[arg(long)]
        socket: PathBuf,
    },
}

/// Where a node's files are: `--config-dir`, `--instance`. Global: accepted before the
/// subcommand as well as after it (`tuic-node --config-dir X set-password`).
#[derive(Debug, Args, Clone, Default)]
pub struct Location {
    /// Config dir (default: $TUIC_CONFIG_DIR, $XDG_CONFIG_HOME/tuicommander, ~/.config/tuicommander).
    #[arg(long, global = true)]
    pub config_dir: Option<PathBuf>,
    /// Named instance (default: $TUIC_APP_INSTANCE, else the default instance).
    #[arg(long, global = true)]
    pub instance: Option<String>,
}

/// Flags of `serve`.
#[derive(Debug, Args, Clone, Default)]
pub struct ServeArgs {
    #[command(flatten)]
    pub loc: Location,
    /// Enable remote access (the TCP listener) for this run without saving it.
    #[arg(long)]
    pub remote_access: bool,
    /// TCP port for this run (also `TUIC_PORT`); not saved.
    #[arg(long)]
    pub port: Option<u16>,
    /// TCP bind address for this run; not saved.
    #[arg(long)]
    pub bind: Option<String>,
}

/// Entry point shared by the `tuic-node` and `tuic-hub` binaries.
pub fn main_with_name(name: &'static str) -> ExitCode {
    let cli = Cli::parse();
    let cmd = match cli.cmd {
        None => NodeCommand::Serve(cli.serve),
        Some(c) => cli.serve.before(c).unwrap_or_else(|m| {
            <Cli as clap::CommandFactory>::command()
                .error(clap::error::ErrorKind::ArgumentConflict, m)
                .exit()
        }),
    };
    exit(name, run_command(name, cmd, |_| Ok(None)))
}

impl ServeArgs {
    /// `serve`'s flags given before a subcommand (`tuic-node --port 4000 serve`). The location
    /// flags are global, so clap hands them to every subcommand by itself; the others belong
    /// to `serve` and are merged into it, and refused before any other subcommand (they would
    /// be silently ignored there).
    pub fn before(self, cmd: NodeCommand) -> Result<NodeCommand, &'static str> {
        match cmd {
            NodeCommand::Serve(a) => Ok(NodeCommand::Serve(ServeArgs {
                loc: a.loc,
                remote_access: a.remote_access || self.remote_access,
                port: a.port.or(self.port),
                bind: a.bind.or(self.bind),
            })),
            _ if self.has_own() => Err(SERVE_ONLY),
            other => Ok(other),
        }
    }

    /// Whether a flag only `serve` takes was given.
    pub fn has_own(&self) -> bool {
        self.remote_access || self.port.is_some() || self.bind.is_some()
    }
}

/// Why `serve`'s own flags are refused before another subcommand.
pub const SERVE_ONLY: &str = "--remote-access, --port and --bind belong to `serve`";

/// Runs one of the node commands; `hook` is passed to [`serve`].
pub fn run_command(
    name: &'static str,
    cmd: NodeCommand,
    hook: impl FnOnce(&Arc<crate::ext::NodeApi>) -> anyhow::Result<Option<crate::routes::RouterHook>>,
) -> anyhow::Result<()> {
    match cmd {
        NodeCommand::Serve(a) => serve(name, a, hook),
        NodeCommand::SetPassword { loc, user } => set_password(&loc, user),
        NodeCommand::Token { loc, rotate } => token(&loc, rotate),
        NodeCommand::Sessions {
            loc,
            revoke,
            revoke_all,
        } => sessions(&loc, revoke.as_deref(), revoke_all),
        NodeCommand::InstallService {
            loc,
            unit_dir,
            no_enable,
        } => {
            let p = paths(&loc)?;
            p.ensure_dir()?;
            let i = crate::ops::service::install(
                name,
                &p,
                &crate::ops::service::InstallOptions {
                    unit_dir,
                    no_enable,
                },
            )?;
            crate::ops::service::print_installed(&i);
            anyhow::ensure!(
                i.enabled || no_enable,
                "{} is written but not enabled (see above)",
                i.unit.display()
            );
            Ok(())
        }
        NodeCommand::Backup { loc, file } => backup(&loc, &file),
        NodeCommand::Restore { loc, file } => restore(&loc, &file),
        NodeCommand::Hold { socket } => crate::session::holder::main(&socket),
    }
}

/// Asks a running node on `socket` (one HTTP/1.1 request): its status and body; `None` when
/// nothing listens or it does not answer.
pub fn ask_running(
    socket: &std::path::Path,
    method: &str,
    path: &str,
    body: &str,
    timeout: std::time::Duration,
) -> Option<(u16, String)> {
    use std::io::Write;
    let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    let _ = s.set_read_timeout(Some(timeout));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

fn absolute(file: &std::path::Path) -> anyhow::Result<PathBuf> {
    Ok(if file.is_absolute() {
        file.to_path_buf()
    } else {
        std::env::current_dir()?.join(file)
    })
}

/// `backup FILE`.
fn backup(loc: &Location, file: &std::path::Path) -> anyhow::Result<()> {
    let p = paths(loc)?;
    let dest = absolute(file)?;
    let body = serde_json::json!({"path": dest}).to_string();
    let v = match ask_running(
        &p.socket,
        "POST",
        "/store/backup",
        &body,
        std::time::Duration::from_secs(120),
    ) {
        Some((200, b)) => serde_json::from_str::<serde_json::Value>(&b)?,
        Some((status, b)) => anyhow::bail!("the running node refused the backup ({status}): {b}"),
        None => {
            // Holding the instance lock keeps a node from starting mid-copy.
            let _lock = crate::server::claim_instance(&p.node_lock_file(), &p.socket)?;
            serde_json::json!(crate::ops::service::backup_offline(&p, &dest)?)
        }
    };
    println!("{}", v["path"].as_str().unwrap_or_default());
    eprintln!(
        "{} bytes, sha256 {}",
        v["bytes"],
        v["sha256"].as_str().unwrap_or("?")
    );
    Ok(())
}

/// `restore FILE`.
fn restore(loc: &Location, file: &std::path::Path) -> anyhow::Result<()> {
    let p = paths(loc)?;
    if ask_running(
        &p.socket,
        "GET",
        "/health",
        "",
        std::time::Duration::from_secs(5),
    )
    .is_some()
    {
        anyhow::bail!(
            "a node is running on {}: stop it first (the store is open there)",
            p.socket.display()
        );
    }
    // Holding the instance lock keeps a node from starting mid-restore.
    let _lock = crate::server::claim_instance(&p.node_lock_file(), &p.socket)?;
    let (dest, kept) = crate::ops::service::restore(&p, &absolute(file)?)?;
    eprintln!(
        "restored {}{}",
        dest.display(),
        kept.map(|k| format!("; the previous store is kept as {}", k.display()))
            .unwrap_or_default()
    );
    Ok(())
}

/// Prints an error the way every tuic binary does and turns it into an exit code.
pub fn exit(name: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves a node's locations from flags and the environment.
pub fn paths(loc: &Location) -> anyhow::Result<Paths> {
    Paths::resolve(
        loc.config_dir.as_deref(),
        loc.instance.as_deref(),
        &LocationEnv::from_process(),
    )
}

/// Colour in the stderr log only for a terminal (and not with `NO_COLOR` set): a log
/// redirected to a file or a journal gets plain lines, and formatting skips the escapes.
fn colour_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Runs a node in the foreground. `hook` receives the opened node's extension API
/// ([`crate::ext::NodeApi`]) inside the runtime, before serving: an extension installs its `crate::ext` hooks there, starts its own tasks and may
/// return a router hook (the hub does all three).
pub fn serve(
    name: &'static str,
    args: ServeArgs,
    hook: impl FnOnce(&Arc<crate::ext::NodeApi>) -> anyhow::Result<Option<crate::routes::RouterHook>>,
) -> anyhow::Result<()> {
    let logs = LogRing::default();
    let filter = tracing_subscriber::EnvFilter::try_from_env("TUIC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(colour_stderr()),
        )
        .with(logs.layer())
        .init();
    crate::server::fds::raise_soft_limit();
    let port_env = std::env::var("TUIC_PORT").ok().filter(|v| !v.is_empty());
    let env_port = port_env
        .map(|v| {
            v.parse::<u16>()
                .with_context(|| format!("TUIC_PORT={v} is not a port"))
        })
        .transpose()?;
    let overrides = RunOverrides {
        remote_access: args.remote_access.then_some(true),
        port: args.port.or(env_port),
        bind: args.bind,
    };
    let paths = paths(&args.loc)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    paths.ensure_dir()?;
    let _instance_lock = crate::server::claim_instance(&paths.node_lock_file(), &paths.socket)?;
    crate::ops::service::repair_bridge_at_start(&paths);
    let node = Node::open(name, paths, overrides, logs)?;
    // Sessions run under holder processes, so they outlive this process; the ones a previous
    // node left are re-adopted before the node serves. `TUIC_NO_HOLDERS=1` opens PTYs in this
    // process instead (they end with it), leaving earlier holders' records for a later run.
    if std::env::var_os("TUIC_NO_HOLDERS").is_none_or(|v| v.is_empty() || v == "0") {
        let _rt = rt.enter();
        let exe = std::env::current_exe().context("finding this executable")?;
        node.sessions
            .use_holders(crate::session::held::HolderConfig {
                exe,
                dir: holder_dir(&node.paths),
                store: node.store.clone(),
            });
        node.sessions.readopt();
    }
    rt.block_on(async move {
        let hook = hook(&Arc::new(node.api()))?;
        crate::server::run(node, hook).await
    })?;
    if crate::ops::update::restart_requested() {
        // The executable was replaced (`POST /remote/update`): the drained node starts again
        // on the new one, same arguments and pid.
        drop(rt);
        drop(_instance_lock);
        return Err(anyhow::Error::from(crate::ops::update::reexec())
            .context("re-executing the updated binary"));
    }
    Ok(())
}

/// The directory of holder sockets: `<config dir>/holders`, unless that makes a socket path
/// longer than a Unix socket address allows; then a per-user directory under the temp dir,
/// named by a hash of the config dir.
fn holder_dir(paths: &Paths) -> PathBuf {
    use sha2::Digest;
    let dir = paths.config_dir.join("holders");
    // "/pty-" + 12 hex + ".sock", within the 108-byte sun_path with its NUL.
    if dir.as_os_str().len() + 23 < 107 {
        return dir;
    }
    let h = hex::encode(sha2::Sha256::digest(
        paths.config_dir.as_os_str().as_encoded_bytes(),
    ));
    let tmp = std::env::var_os("TMPDIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    tmp.join(format!(
        "tuic-holders-{}-{}",
        rustix::process::getuid().as_raw(),
        &h[..16]
    ))
}

/// `set-password`: reads the password from stdin and stores its bcrypt hash.
pub fn set_password(loc: &Location, user: Option<String>) -> anyhow::Result<()> {
    let p = paths(loc)?;
    p.ensure_dir()?;
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .context("reading the password from stdin")?;
    let pass = input
        .strip_suffix('\n')
        .map(|s| s.strip_suffix('\r').unwrap_or(s))
        .unwrap_or(&input);
    anyhow::ensure!(!pass.is_empty(), "the password is empty");
    let hash = crate::auth::hash_password(pass)?;
    ConfigFile::new(p.config_file())
        .update(|doc| {
            let obj = doc
                .as_object_mut()
                .ok_or_else(|| crate::config::SaveError::Invalid("not an object".into()))?;
            let services = obj
                .entry("services")
                .or_insert_with(|| serde_json::json!({}));
            if !services.is_object() {
                *services = serde_json::json!({});
            }
            let auth = services
                .as_object_mut()
                .expect("object")
                .entry("auth")
                .or_insert_with(|| serde_json::json!({}));
            if !auth.is_object() {
                *auth = serde_json::json!({});
            }
            let auth = auth.as_object_mut().expect("object");
            auth.insert("password_hash".into(), hash.clone().into());
            if let Some(u) = &user {
                auth.insert("username".into(), u.clone().into());
            }
            Ok(())
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!("password set in {}", p.config_file().display());
    // The running node also revokes them when it reloads the changed config; asking it now
    // leaves no window in which an old cookie still works.
    let revoked = match ask_running(
        &p.socket,
        "DELETE",
        "/auth/sessions",
        "",
        std::time::Duration::from_secs(10),
    ) {
        Some((200, b)) => serde_json::from_str::<serde_json::Value>(&b)?["revoked"]
            .as_u64()
            .unwrap_or(0),
        Some((status, b)) => {
            anyhow::bail!("the running node refused to revoke its logins ({status}): {b}")
        }
        None => with_stopped_store(&p, |store| store.clear_login_sessions())?,
    };
    eprintln!("{revoked} earlier login(s) revoked");
    Ok(())
}

/// Runs `f` on the store of a node that is not running (holding its instance lock, so none
/// starts meanwhile).
fn with_stopped_store<T>(
    p: &Paths,
    f: impl FnOnce(&crate::store::Store) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let _lock = crate::server::claim_instance(&p.node_lock_file(), &p.socket)?;
    let store = crate::store::Store::open(&p.store_file())?;
    f(&store)
}

/// `token [--rotate]`: prints the node's connection token, creating it once; `--rotate`
/// replaces it (through the running node, so it stops accepting the old one at once).
pub fn token(loc: &Location, rotate: bool) -> anyhow::Result<()> {
    let p = paths(loc)?;
    p.ensure_dir()?;
    if rotate
        && let Some((status, b)) = ask_running(
            &p.socket,
            "POST",
            "/auth/token/rotate",
            "",
            std::time::Duration::from_secs(30),
        )
    {
        anyhow::ensure!(
            status == 200,
            "the running node refused to rotate ({status}): {b}"
        );
        let v: serde_json::Value = serde_json::from_str(&b)?;
        println!("{}", v["token"].as_str().unwrap_or_default());
        eprintln!("node token rotated; run `tuic-hub connect` again with it on every hub");
        return Ok(());
    }
    let cfg = ConfigFile::new(p.config_file()).load()?;
    let v = Vault::open(
        &p.config_dir,
        p.secrets_file(),
        cfg.secret_store == SecretStore::Auto,
    );
    if rotate {
        let fresh = vault::random_token();
        v.set(NODE_TOKEN, &fresh)?;
        println!("{fresh}");
        eprintln!("node token rotated; run `tuic-hub connect` again with it on every hub");
        return Ok(());
    }
    println!("{}", v.get_or_create(NODE_TOKEN, vault::random_token)?);
    Ok(())
}

/// `sessions [--revoke ID | --revoke-all]`: lists or revokes logins, through the running node
/// or directly in a stopped node's store.
pub fn sessions(loc: &Location, revoke: Option<&str>, revoke_all: bool) -> anyhow::Result<()> {
    let p = paths(loc)?;
    let (method, path) = match (revoke, revoke_all) {
        (Some(id), _) => ("DELETE", format!("/auth/sessions/{id}")),
        (None, true) => ("DELETE", "/auth/sessions".to_owned()),
        (None, false) => ("GET", "/auth/sessions".to_owned()),
    };
    let timeout = std::time::Duration::from_secs(10);
    let v: serde_json::Value = match ask_running(&p.socket, method, &path, "", timeout) {
        Some((200, b)) => serde_json::from_str(&b)?,
        Some((status, b)) => anyhow::bail!("the running node answered {status}: {b}"),
        None => with_stopped_store(&p, |store| offline_sessions(store, revoke, revoke_all))?,
    };
    if method == "DELETE" {
        eprintln!("{} login(s) revoked", v["revoked"]);
        return Ok(());
    }
    let rows = v.as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        eprintln!("no logins");
    }
    for r in rows {
        println!(
            "{}\tcreated {}\tlast used {}\t{}\t{}",
            r["id"].as_str().unwrap_or_default(),
            r["created_ms"],
            r["last_used_ms"],
            r["address"].as_str().unwrap_or_default(),
            r["user_agent"].as_str().unwrap_or_default(),
        );
    }
    Ok(())
}

/// `sessions` against a stopped node's store: the same answers the routes give.
fn offline_sessions(
    store: &crate::store::Store,
    revoke: Option<&str>,
    revoke_all: bool,
) -> anyhow::Result<serde_json::Value> {
    let all = store.login_sessions()?;
    if revoke_all {
        return Ok(serde_json::json!({"revoked": store.clear_login_sessions()?}));
    }
    if let Some(id) = revoke {
        let hit: Vec<String> = all
            .into_iter()
            .filter(|(h, _)| crate::auth::login_id(h) == id)
            .map(|(h, _)| h)
            .collect();
        anyhow::ensure!(!hit.is_empty(), "no login {id}");
        store.remove_login_sessions(&hit)?;
        return Ok(serde_json::json!({"revoked": hit.len()}));
    }
    Ok(serde_json::Value::Array(
        all.into_iter()
            .map(|(h, s)| {
                serde_json::json!({
                    "id": crate::auth::login_id(&h),
                    "created_ms": s.created_ms,
                    "last_used_ms": s.last_used_ms,
                    "address": s.address,
                    "user_agent": s.user_agent,
                })
            })
            .collect(),
    ))
}
