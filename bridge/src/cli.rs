//! The `tuic` command line: a thin, synchronous client of the local node's IPC socket.
//!
//! Every command is one or a few HTTP requests over the socket (see `docs/cli.md`). The CLI
//! holds no state and never fakes success: when the node lacks what a command needs (a route
//! answering 404, `/mcp` missing, a tool the node does not know), it says so and exits 4.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use tuic_proto::ipc_http::Request;

use crate::ctx::{Ctx, Failure, print_result};
use crate::locate::locate_from_process;
use crate::mcp;

pub use crate::ctx::{EXIT_FAILED, EXIT_NOT_RUNNING, EXIT_UNAVAILABLE, EXIT_USAGE};

#[derive(Debug, Parser)]
#[command(
    name = "tuic",
    version,
    about = "Talk to the local tuic node over its IPC socket"
)]
struct Cli {
    /// Named instance (default: $TUIC_APP_INSTANCE, else the default instance).
    #[arg(long, global = true)]
    instance: Option<String>,
    /// Config dir, to find the default instance's socket (default: $TUIC_CONFIG_DIR, XDG, ~/.config).
    #[arg(long, global = true)]
    config_dir: Option<PathBuf>,
    /// Seconds to wait for the node's answer.
    #[arg(long, global = true, default_value_t = 10)]
    timeout: u64,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Is the node running? (GET /health)
    Status {
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// List terminal sessions on every host (GET /sessions; on a hub, every connected host's).
    #[command(visible_alias = "sessions", alias = "list-sessions")]
    Ls {
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Create a session and attach to it (tmux new-session).
    #[command(alias = "new-session")]
    New {
        #[command(flatten)]
        spec: NewArgs,
        /// Do not attach; print the new session's name.
        #[arg(short = 'd', long)]
        detached: bool,
        /// The detach key: a prefix and a key, or one key.
        #[arg(long, env = "TUIC_DETACH_KEY", default_value = "C-b d")]
        detach_key: String,
        /// The program and its arguments (default: the host's shell).
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Run a command in a new session, print its output, exit with its exit code.
    Run {
        #[command(flatten)]
        spec: NewArgs,
        /// The program and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Attach this terminal to a session (tmux attach); the detach key leaves it running.
    #[command(alias = "a", alias = "attach-session")]
    Attach {
        /// A session: alias, id, name, `host/alias`, or a unique prefix.
        target: String,
        /// The detach key: a prefix and a key (`C-b d`), or one key (`C-\`).
        #[arg(long, env = "TUIC_DETACH_KEY", default_value = "C-b d")]
        detach_key: String,
        /// Seconds to keep re-attaching after the connection drops.
        #[arg(long, default_value_t = 120)]
        reconnect_secs: u64,
    },
    /// Type keys into a session: tmux key names (Enter, C-c, Escape, Up, F5…) or text.
    SendKeys {
        /// The session.
        target: String,
        /// Send every word as text, even key names.
        #[arg(short = 'l', long)]
        literal: bool,
        /// Keys and text, in order.
        #[arg(required = true, allow_hyphen_values = true)]
        keys: Vec<String>,
    },
    /// Print a session's screen (tmux capture-pane).
    #[command(alias = "capture-pane")]
    Capture {
        /// The session.
        target: String,
        /// The last N rows, scrollback included (default: the screen).
        #[arg(long, short = 'n')]
        lines: Option<usize>,
        /// The screen as escape sequences (colours, cursor) instead of text.
        #[arg(long)]
        ansi: bool,
    },
    /// Kill a session.
    #[command(alias = "kill-session")]
    Kill {
        /// The session.
        target: String,
    },
    /// Resize a session's terminal.
    Resize {
        /// The session.
        target: String,
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// Rename a session.
    #[command(alias = "rename-session")]
    Rename {
        /// The session.
        target: String,
        /// The new display name.
        name: String,
    },
    /// Agents: spawn one, list peers, send mail.
    Agent {
        #[command(subcommand)]
        cmd: AgentCmd,
    },
    /// The hub's connections: up/down, sessions, outbox, last error.
    Hosts {
        /// Print the hub's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Connect the hub to a node (runs `tuic-hub connect`; the token is read from stdin).
    Connect {
        /// Connection id: the first part of that node's addresses.
        id: String,
        /// The node's URL, `http://host:port`.
        url: String,
    },
    /// Remove a hub connection (runs `tuic-hub disconnect`).
    Disconnect {
        /// Connection id.
        id: String,
    },
    /// Send a message to a peer agent (MCP `agent action=send`).
    Send {
        /// Recipient: a tuic_session, peer name or address such as `conn/peer`.
        to: String,
        /// The message text.
        message: String,
    },
    /// Register a directory as a repository (MCP `repo action=add`).
    Open {
        /// The directory; made absolute and canonical before sending.
        dir: PathBuf,
    },
    /// Run a story action (MCP `story` with `{input: <json>}`).
    Story {
        /// The action as JSON, e.g. '{"action":"list"}'.
        json: String,
        /// Project path to act on.
        #[arg(long)]
        project: Option<PathBuf>,
        /// PTY session id to attribute the action to.
        #[arg(long)]
        session_id: Option<String>,
        /// On a hub: the connection whose node owns the project (`--project` is then a path
        /// on that node, taken as given).
        #[arg(long)]
        host: Option<String>,
    },
    /// The audit log, newest first (GET /audit).
    Audit {
        /// Only these kinds (comma-separated: login,attach,input,...).
        #[arg(long)]
        kind: Option<String>,
        /// Only entries on this session.
        #[arg(long)]
        session: Option<String>,
        /// Only entries at or after this time (unix ms).
        #[arg(long)]
        since_ms: Option<u64>,
        /// Entries to show (100; at most 1,000).
        #[arg(long)]
        limit: Option<usize>,
        /// On a hub: only this host's entries (`local`, or a connection id).
        #[arg(long)]
        host: Option<String>,
        /// On a hub: the next page (the `more: --cursor` a page printed).
        #[arg(long)]
        cursor: Option<String>,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Share one session with a link: read-only (default) or answer-only, until --ttl.
    Share {
        /// The session (any of its addresses).
        session: Option<String>,
        /// Screen and history only (the default).
        #[arg(long, conflicts_with = "answer")]
        read_only: bool,
        /// Screen, history, and answering the questions it shows.
        #[arg(long)]
        answer: bool,
        /// Lifetime: 90s, 15m, 1h (default), 2d; at most 7 days.
        #[arg(long, default_value = "1h")]
        ttl: String,
        /// List links (of SESSION when given) with their viewers.
        #[arg(long)]
        list: bool,
        /// Revoke link ID (its viewers are cut at once).
        #[arg(long, value_name = "ID")]
        revoke: Option<String>,
        /// On a hub: the connection whose node runs SESSION (same as `HOST/SESSION`); the
        /// link is on the hub's address. With --list: only that host's links.
        #[arg(short = 'H', long)]
        host: Option<String>,
    },
    /// What a session or worktree changed against its base (`[host/]SESSION` or an absolute
    /// worktree path); with FILE, its diff (coloured on a terminal, plain when piped).
    Diff {
        /// `[host/]SESSION` or a worktree path.
        target: String,
        /// One file (repository-relative).
        file: Option<String>,
        /// Compare against this ref instead of the default branch.
        #[arg(long)]
        base: Option<String>,
        /// The file's uncommitted changes instead of its committed ones.
        #[arg(long)]
        uncommitted: bool,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Review a session's changes: the diff in $PAGER, comments in $EDITOR, sent as one message.
    Review {
        /// `[host/]SESSION`.
        session: String,
    },
    /// Land a worktree's (or session's) branch on the default branch.
    Merge {
        /// A worktree path or `[host/]SESSION`.
        target: String,
        /// One commit with the branch's tree.
        #[arg(long, conflicts_with_all = ["ff", "rebase"])]
        squash: bool,
        /// Fast-forward.
        #[arg(long, conflicts_with = "rebase")]
        ff: bool,
        /// Rebase onto the default branch, then fast-forward.
        #[arg(long)]
        rebase: bool,
        /// The squash commit's message.
        #[arg(long, short)]
        message: Option<String>,
    },
    /// Secrets for agents' `secret` tool: list | set NAME | rm NAME | answer (values are
    /// typed with echo off and never shown) | approve NAME | deny NAME (a run waiting for
    /// consent) | forget ID (an approved command).
    Secret {
        /// list, set, rm, answer, approve, deny or forget.
        cmd: String,
        /// The secret's name (set, rm, approve, deny) or an approved command's id (forget).
        name: Option<String>,
    },
    /// Upstream MCP servers behind the node.
    Mcp {
        #[command(subcommand)]
        cmd: crate::mcpcmd::McpCmd,
    },
    /// ACP connections: agents driven by the Agent Client Protocol (new, ls, attach, answer,
    /// cancel).
    Acp {
        #[command(subcommand)]
        cmd: crate::acpcmd::AcpCmd,
    },
    /// Copy files to a registered repository on a connected node: SRC... CONN:/path, where
    /// /path is a directory inside a repository registered on that node.
    Cp {
        /// Sources, then the destination.
        #[arg(required = true, num_args = 2..)]
        args: Vec<String>,
    },
    /// Notifications: recent ones, a test, watch a session (`tuic notify ro-3 --on exit`),
    /// mute, and the channel secrets.
    Notify(crate::notifycmd::NotifyArgs),
}

/// Where and how `new`/`run` create a session.
#[derive(Debug, clap::Args)]
struct NewArgs {
    /// Display name.
    #[arg(long, short = 's')]
    name: Option<String>,
    /// Working directory (on the session's host).
    #[arg(long, short = 'c')]
    cwd: Option<String>,
    /// The hub connection to create it on (default: this node).
    #[arg(long, short = 'H')]
    host: Option<String>,
}

impl NewArgs {
    /// `one_off`: a `run` (no alias, stderr apart from the terminal).
    fn spec(&self, command: &[String], one_off: bool) -> crate::termcmd::NewSpec {
        crate::termcmd::NewSpec {
            name: self.name.clone(),
            cwd: self.cwd.clone(),
            host: self.host.clone(),
            command: command.to_vec(),
            no_alias: one_off,
            separate_stderr: one_off,
        }
    }
}

#[derive(Debug, Subcommand)]
enum AgentCmd {
    /// Start an agent in a new session (MCP `agent action=spawn`).
    Spawn {
        /// Working directory.
        #[arg(long)]
        cwd: Option<String>,
        /// Display name.
        #[arg(long)]
        name: Option<String>,
        /// A first prompt for the agent.
        #[arg(long)]
        prompt: Option<String>,
        /// The agent's command and arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// List peer agents (MCP `agent action=list_peers`).
    List,
    /// Send mail to a peer (as `tuic send`).
    Send {
        /// Recipient.
        to: String,
        /// The message.
        message: String,
    },
}

fn status(ctx: &Ctx, as_json: bool) -> Result<(), Failure> {
    let resp = ctx.send(&Request::new("GET", "/health"))?;
    if resp.status() != 200 {
        return Err(Failure::Failed(format!(
            "the process on {} is not a healthy tuic node: GET /health answered {} {}",
            ctx.target.socket.display(),
            resp.status(),
            mcp::error_text(&resp)
        )));
    }
    let v = resp
        .json()
        .map_err(|e| Failure::Failed(format!("GET /health: the node sent invalid JSON: {e}")))?;
    if as_json {
        outln!("{v}");
        return Ok(());
    }
    let field = |k: &str| v.get(k).map(Value::to_string).unwrap_or_else(|| "?".into());
    let text = |k: &str| v[k].as_str().unwrap_or("?").to_owned();
    let port = v["tcp"]["port"].as_u64();
    let requested = v["tcp"]["requested_port"].as_u64();
    let tcp = match (port, requested) {
        (Some(p), Some(r)) if p != r => format!("port {p} (port {r} was asked for and is taken)"),
        (Some(p), _) => format!("port {p}"),
        _ => "off".into(),
    };
    outln!(
        "tuic node running ({})\n  host:     {} (instance {})\n  socket:   {}\n  tcp:      {tcp}\n  uptime:   {}s\n  sessions: {}\n  protocol: {}",
        ctx.target.instance_label(),
        text("host_name"),
        text("instance"),
        ctx.target.socket.display(),
        field("uptime_secs"),
        field("session_count"),
        field("protocol_version"),
    );
    if let (Some(p), Some(r)) = (port, requested)
        && p != r
    {
        eprintln!(
            "tuic: warning: the node serves on port {p}, not on port {r} it was asked for (taken)"
        );
    }
    Ok(())
}

fn open(ctx: &Ctx, dir: &Path) -> Result<(), Failure> {
    let abs = std::fs::canonicalize(dir)
        .map_err(|e| Failure::Failed(format!("{}: {e}", dir.display())))?;
    if !abs.is_dir() {
        return Err(Failure::Failed(format!(
            "{}: not a directory",
            abs.display()
        )));
    }
    let path = abs
        .to_str()
        .ok_or_else(|| Failure::Failed(format!("{}: path is not UTF-8", abs.display())))?;
    let result = ctx.call_tool("repo", json!({"action": "add", "path": path}))?;
    print_result(&result);
    Ok(())
}

fn story(
    ctx: &Ctx,
    input: &str,
    project: Option<&Path>,
    session_id: Option<&str>,
) -> Result<(), Failure> {
    let input: Value = serde_json::from_str(input)
        .map_err(|e| Failure::Usage(format!("the story action is not valid JSON: {e}")))?;
    let mut args = json!({"input": input});
    if let Some(p) = project {
        let abs = std::fs::canonicalize(p)
            .map_err(|e| Failure::Failed(format!("{}: {e}", p.display())))?;
        args["project_path"] = json!(abs.to_string_lossy());
    }
    if let Some(s) = session_id {
        args["session_id"] = json!(s);
    }
    print_result(&ctx.call_tool("story", args)?);
    Ok(())
}

/// `tuic story --host ID`: the hub's `POST /stories/action` routed to that connection's node
/// (the MCP `story` tool acts only for the hub's own terminals).
fn story_on(
    ctx: &Ctx,
    host: &str,
    input: &str,
    project: Option<&Path>,
    session_id: Option<&str>,
) -> Result<(), Failure> {
    let input: Value = serde_json::from_str(input)
        .map_err(|e| Failure::Usage(format!("the story action is not valid JSON: {e}")))?;
    // The path is on the other host: never resolved here.
    let project = project.filter(|p| p.is_absolute()).ok_or_else(|| {
        Failure::Usage("--host needs --project with an absolute path on that host".into())
    })?;
    let mut body = json!({"host": host, "input": input, "project_path": project.to_string_lossy()});
    if let Some(s) = session_id {
        body["session_id"] = json!(s);
    }
    let resp = ctx.send(&Request::new("POST", "/stories/action").json(&body))?;
    let v: Value = resp.json().unwrap_or(Value::Null);
    if !(200..300).contains(&resp.status()) {
        return Err(Failure::Failed(format!(
            "POST /stories/action on {host}: {} {}",
            resp.status(),
            v.get("error")
                .and_then(Value::as_str)
                .map_or_else(|| mcp::error_text(&resp), str::to_owned)
        )));
    }
    outln!("{v}");
    Ok(())
}

fn cp(ctx: &Ctx, args: &[String]) -> Result<(), Failure> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (dest, srcs) = args.split_last().expect("clap requires two or more");
    let Some((conn, path)) = dest
        .split_once(':')
        .filter(|(c, r)| !c.is_empty() && r.starts_with('/'))
    else {
        return Err(Failure::Usage(format!(
            "destination {dest:?} is not CONN:/path (a directory inside a registered repository on that node)"
        )));
    };
    for s in srcs {
        std::fs::symlink_metadata(s).map_err(|e| Failure::Failed(format!("{s}: {e}")))?;
    }
    for s in srcs {
        let progress = Arc::new(crate::cp::Progress::default());
        let done = Arc::new(AtomicBool::new(false));
        let printer = crate::cp::spawn_progress(progress.clone(), done.clone());
        let started = std::time::Instant::now();
        let r = crate::cp::upload(
            &ctx.target.socket,
            conn,
            path,
            Path::new(s),
            progress.clone(),
        );
        done.store(true, Ordering::Relaxed);
        printer.thread().unpark();
        let _ = printer.join();
        let up = r.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                Failure::NotRunning(format!(
                    "no hub is running on {} ({e})",
                    ctx.target.socket.display()
                ))
            }
            _ => Failure::Failed(format!("copying {s}: {e}")),
        })?;
        let v: Value = serde_json::from_str(&up.body).unwrap_or(Value::Null);
        match up.status {
            200 => {
                let secs = started.elapsed().as_secs_f64().max(1e-3);
                let bytes = v["bytes"].as_u64().unwrap_or(0);
                outln!(
                    "copied {s} -> {conn}:{}/{}: {} entries, {:.1} MB in {secs:.1} s ({:.1} MB/s)",
                    path.trim_end_matches('/'),
                    v["name"].as_str().unwrap_or("?"),
                    v["entries"],
                    bytes as f64 / 1e6,
                    bytes as f64 / 1e6 / secs
                );
            }
            404 if v["code"] == "not_found" && up.body.contains("no such route") => {
                return Err(Failure::Unavailable(
                    "the process on this socket is not a tuic hub (POST /hub/upload answered 404)"
                        .into(),
                ));
            }
            status => {
                return Err(Failure::Failed(format!(
                    "copying {s} to {conn}:{path} failed: {status} {}",
                    v["error"].as_str().unwrap_or(&up.body)
                )));
            }
        }
    }
    Ok(())
}

fn agent(ctx: &Ctx, cmd: &AgentCmd) -> Result<(), Failure> {
    let args = match cmd {
        AgentCmd::Spawn {
            cwd,
            name,
            prompt,
            command,
        } => {
            let (prog, rest) = command.split_first().expect("clap requires a command");
            let mut a = json!({"action": "spawn", "command": prog, "args": rest});
            if let Some(c) = cwd {
                a["cwd"] = json!(c);
            }
            if let Some(n) = name {
                a["name"] = json!(n);
            }
            if let Some(p) = prompt {
                a["prompt"] = json!(p);
            }
            a
        }
        AgentCmd::List => json!({"action": "list_peers"}),
        AgentCmd::Send { to, message } => {
            print_result(&ctx.send_mail(to, message)?);
            return Ok(());
        }
    };
    print_result(&ctx.call_tool("agent", args)?);
    Ok(())
}

/// Runs `tuic-hub <args>` from beside this binary with the same instance and config dir.
fn hub_command(cli: &Cli, args: &[&str]) -> ExitCode {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("tuic-hub")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("tuic-hub"));
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(args);
    if let Some(d) = &cli.config_dir {
        cmd.arg("--config-dir").arg(d);
    }
    if let Some(i) = &cli.instance {
        cmd.arg("--instance").arg(i);
    }
    match cmd.status() {
        Ok(s) => ExitCode::from(s.code().map_or(EXIT_FAILED, |c| c.clamp(0, 255) as u8)),
        Err(e) => {
            eprintln!("tuic: cannot run {}: {e}", exe.display());
            ExitCode::from(EXIT_UNAVAILABLE)
        }
    }
}

fn finish(r: Result<u8, Failure>) -> ExitCode {
    match r {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("tuic: {}", f.message());
            ExitCode::from(f.code())
        }
    }
}

/// Runs the CLI with the process's arguments and environment.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let target = locate_from_process(cli.instance.as_deref(), cli.config_dir.as_deref());
    let ctx = Ctx {
        target,
        timeout: Duration::from_secs(cli.timeout.max(1)),
        tuic_session: std::env::var("TUIC_SESSION").ok().filter(|s| !s.is_empty()),
    };
    let result = match &cli.cmd {
        Cmd::Status { json } => status(&ctx, *json),
        Cmd::Ls { json } => crate::termcmd::ls(&ctx, *json),
        Cmd::New {
            spec,
            detached,
            detach_key,
            command,
        } => {
            return finish(crate::termcmd::new(
                &ctx,
                &spec.spec(command, false),
                *detached,
                detach_key,
            ));
        }
        Cmd::Run { spec, command } => {
            return finish(crate::termcmd::run(&ctx, &spec.spec(command, true)));
        }
        Cmd::Attach {
            target,
            detach_key,
            reconnect_secs,
        } => {
            return finish(crate::termcmd::attach(
                &ctx,
                target,
                detach_key,
                Duration::from_secs(*reconnect_secs),
            ));
        }
        Cmd::SendKeys {
            target,
            literal,
            keys,
        } => crate::termcmd::send_keys(&ctx, target, keys, *literal),
        Cmd::Capture {
            target,
            lines,
            ansi,
        } => crate::termcmd::capture(&ctx, target, *lines, *ansi),
        Cmd::Kill { target } => crate::termcmd::kill(&ctx, target),
        Cmd::Resize { target, cols, rows } => crate::termcmd::resize(&ctx, target, *cols, *rows),
        Cmd::Rename { target, name } => crate::termcmd::rename(&ctx, target, name),
        Cmd::Agent { cmd } => agent(&ctx, cmd),
        Cmd::Hosts { json } => crate::termcmd::hosts(&ctx, *json),
        Cmd::Connect { id, url } => {
            return hub_command(
                &cli,
                &["connect", "--id", id, "--url", url, "--token-stdin"],
            );
        }
        Cmd::Disconnect { id } => return hub_command(&cli, &["disconnect", "--id", id]),
        Cmd::Send { to, message } => ctx.send_mail(to, message).map(|r| print_result(&r)),
        Cmd::Open { dir } => open(&ctx, dir),
        Cmd::Story {
            json,
            project,
            session_id,
            host: Some(host),
        } => story_on(&ctx, host, json, project.as_deref(), session_id.as_deref()),
        Cmd::Story {
            json,
            project,
            session_id,
            host: None,
        } => story(&ctx, json, project.as_deref(), session_id.as_deref()),
        Cmd::Cp { args } => cp(&ctx, args),
        Cmd::Mcp { cmd } => crate::mcpcmd::run(&ctx, cmd),
        Cmd::Audit {
            kind,
            session,
            since_ms,
            limit,
            host,
            cursor,
            json,
        } => crate::trust::audit(
            &ctx,
            &[
                ("kind", kind.clone()),
                ("session", session.clone()),
                ("since_ms", since_ms.map(|t| t.to_string())),
                ("limit", limit.map(|l| l.to_string())),
                ("host", host.clone()),
                ("cursor", cursor.clone()),
            ],
            *json,
        ),
        Cmd::Share {
            session,
            read_only: _,
            answer,
            ttl,
            list,
            revoke,
            host,
        } => crate::trust::share(
            &ctx,
            host.as_deref(),
            session.as_deref(),
            *answer,
            ttl,
            *list,
            revoke.as_deref(),
        ),
        Cmd::Secret { cmd, name } => crate::trust::secret(&ctx, cmd, name.as_deref()),
        Cmd::Diff {
            target,
            file,
            base,
            uncommitted,
            json,
        } => crate::review::diff(
            &ctx,
            target,
            file.as_deref(),
            base.as_deref(),
            *uncommitted,
            *json,
        ),
        Cmd::Review { session } => crate::review::review(&ctx, session),
        Cmd::Merge {
            target,
            squash,
            ff,
            rebase,
            message,
        } => match (*squash, *ff, *rebase) {
            (true, _, _) => crate::review::merge(&ctx, target, "squash", message.as_deref()),
            (_, true, _) => crate::review::merge(&ctx, target, "ff", message.as_deref()),
            (_, _, true) => crate::review::merge(&ctx, target, "rebase", message.as_deref()),
            _ => Err(Failure::Usage(
                "tuic merge needs --squash, --ff or --rebase".into(),
            )),
        },
        Cmd::Acp { cmd } => crate::acpcmd::run(&ctx, cmd),
        Cmd::Notify(args) => crate::notifycmd::run(&ctx, args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("tuic: {}", f.message());
            ExitCode::from(f.code())
        }
    }
}
