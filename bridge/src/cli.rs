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
use tuic_proto::ipc_http::{Request, Response};

use crate::ipc::{IpcError, request_sync};
use crate::locate::{Target, locate_from_process};
use crate::mcp::{self, DEFAULT_PROTOCOL_VERSION, McpHeaders};

/// Exit code: the command failed (the node refused it, or answered badly).
pub const EXIT_FAILED: u8 = 1;
/// Exit code: bad usage (clap's own code).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: no node is listening on the selected socket.
pub const EXIT_NOT_RUNNING: u8 = 3;
/// Exit code: the node runs but lacks what the command needs (route or MCP endpoint/tool).
pub const EXIT_UNAVAILABLE: u8 = 4;

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
    /// List terminal sessions (GET /sessions).
    Sessions {
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
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
    },
    /// Copy files to a registered repository on a connected node: SRC... CONN:/path, where
    /// /path is a directory inside a repository registered on that node.
    Cp {
        /// Sources, then the destination.
        #[arg(required = true, num_args = 2..)]
        args: Vec<String>,
    },
}

/// Why a command failed, which decides the exit code.
#[derive(Debug)]
enum Failure {
    NotRunning(String),
    Unavailable(String),
    Failed(String),
    Usage(String),
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Self::Failed(_) => EXIT_FAILED,
            Self::Usage(_) => EXIT_USAGE,
            Self::NotRunning(_) => EXIT_NOT_RUNNING,
            Self::Unavailable(_) => EXIT_UNAVAILABLE,
        }
    }
    fn message(&self) -> &str {
        match self {
            Self::NotRunning(m) | Self::Unavailable(m) | Self::Failed(m) | Self::Usage(m) => m,
        }
    }
}

struct Ctx {
    target: Target,
    timeout: Duration,
    tuic_session: Option<String>,
}

impl Ctx {
    fn ipc_failure(&self, e: IpcError) -> Failure {
        match &e {
            IpcError::NotRunning { .. } => Failure::NotRunning(format!(
                "tuic node not running ({}): nothing listens on {}{}",
                self.target.instance_label(),
                self.target.socket.display(),
                if self.target.from_env {
                    " (from TUIC_SOCKET)"
                } else {
                    ""
                }
            )),
            _ => Failure::Failed(e.to_string()),
        }
    }

    fn send(&self, req: &Request) -> Result<Response, Failure> {
        request_sync(&self.target.socket, req, self.timeout).map_err(|e| self.ipc_failure(e))
    }

    /// GET a JSON route; a 404 means the node does not serve it.
    fn get_json(&self, path: &str, needs: &str) -> Result<Value, Failure> {
        let resp = self.send(&Request::new("GET", path))?;
        if resp.status() == 404 {
            return Err(Failure::Unavailable(format!(
                "the node does not serve GET {path} (404: {}); it needs {needs}",
                mcp::error_text(&resp)
            )));
        }
        if !(200..300).contains(&resp.status()) {
            return Err(Failure::Failed(format!(
                "GET {path} failed: {} {}",
                resp.status(),
                mcp::error_text(&resp)
            )));
        }
        resp.json()
            .map_err(|e| Failure::Failed(format!("GET {path}: the node sent invalid JSON: {e}")))
    }

    /// One POST /mcp round trip; returns the JSON-RPC response for `msg` (if it has an id).
    fn mcp_post(
        &self,
        session_id: Option<&str>,
        msg: &Value,
    ) -> Result<(Response, Option<Value>), Failure> {
        let headers = McpHeaders {
            session_id,
            tuic_session: self.tuic_session.as_deref(),
            protocol_version: DEFAULT_PROTOCOL_VERSION,
        };
        let resp = self.send(&headers.post(msg))?;
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("?");
        match resp.status() {
            200..=299 => {}
            404 => {
                return Err(Failure::Unavailable(format!(
                    "the node's MCP endpoint is unavailable: POST /mcp answered 404 ({})",
                    mcp::error_text(&resp)
                )));
            }
            s => {
                return Err(Failure::Failed(format!(
                    "POST /mcp ({method}) failed: {s} {}",
                    mcp::error_text(&resp)
                )));
            }
        }
        let Some(id) = msg.get("id") else {
            return Ok((resp, None));
        };
        let msgs = mcp::rpc_messages(&resp)
            .map_err(|e| Failure::Failed(format!("POST /mcp ({method}): {e}")))?;
        let found = mcp::find_response(&msgs, id).cloned().ok_or_else(|| {
            Failure::Failed(format!("POST /mcp ({method}): no response in the answer"))
        })?;
        Ok((resp, Some(found)))
    }

    /// initialize → notifications/initialized → tools/call → DELETE; returns the call result.
    fn call_tool(&self, tool: &str, arguments: Value) -> Result<Value, Failure> {
        let init = mcp::rpc_request(
            json!(1),
            "initialize",
            json!({
                "protocolVersion": DEFAULT_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": mcp::client_info("tuic-cli"),
            }),
        );
        let (resp, answer) = self.mcp_post(None, &init)?;
        let answer = answer.unwrap_or(Value::Null);
        if let Some(err) = answer.get("error") {
            return Err(Failure::Failed(format!(
                "the node refused initialize: {}",
                rpc_error_text(err)
            )));
        }
        let sid = resp.head.header("mcp-session-id").map(str::to_owned);
        let sid = sid.as_deref();
        self.mcp_post(
            sid,
            &mcp::rpc_notification("notifications/initialized", None),
        )?;
        let call = mcp::rpc_request(
            json!(2),
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
        );
        let outcome = self.mcp_post(sid, &call);
        if sid.is_some() {
            let headers = McpHeaders {
                session_id: sid,
                tuic_session: self.tuic_session.as_deref(),
                protocol_version: DEFAULT_PROTOCOL_VERSION,
            };
            // Releasing the protocol session is a courtesy; the node reaps it anyway.
            let _ = request_sync(
                &self.target.socket,
                &headers.delete(),
                Duration::from_secs(2),
            );
        }
        let answer = outcome?.1.unwrap_or(Value::Null);
        if let Some(err) = answer.get("error") {
            let code = err.get("code").and_then(Value::as_i64);
            let text = rpc_error_text(err);
            // Unknown tool / method: the node lacks the feature rather than refusing input.
            if code == Some(-32601) || (code == Some(-32602) && text.contains("nknown tool")) {
                return Err(Failure::Unavailable(format!(
                    "the node does not offer MCP tool {tool:?}: {text}"
                )));
            }
            return Err(Failure::Failed(format!("{tool}: {text}")));
        }
        let result = answer.get("result").cloned().unwrap_or(Value::Null);
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            return Err(Failure::Failed(format!(
                "{tool}: {}",
                content_text(&result)
            )));
        }
        Ok(result)
    }
}

fn rpc_error_text(err: &Value) -> String {
    let msg = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("error");
    match err.get("code").and_then(Value::as_i64) {
        Some(c) => format!("{msg} (code {c})"),
        None => msg.to_owned(),
    }
}

/// The text items of a tool result's `content`, joined by newlines.
fn content_text(result: &Value) -> String {
    result
        .get("content")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_else(|| result.to_string())
}

/// Renders `GET /sessions` rows as an aligned table.
pub fn sessions_table(rows: &[Value]) -> String {
    let cols: [(&str, &[&str]); 6] = [
        ("ALIAS", &["alias"]),
        ("SESSION", &["address", "session_id"]),
        ("NAME", &["display_name"]),
        ("AGENT", &["agent_type"]),
        ("STATE", &["agent_state", "shell_state"]),
        ("CWD", &["cwd"]),
    ];
    let cell = |row: &Value, keys: &[&str]| -> String {
        keys.iter()
            .find_map(|k| match row.get(*k) {
                Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
                Some(Value::Null) | None => None,
                Some(Value::String(_)) => None,
                Some(v) => Some(v.to_string()),
            })
            .map(|s| s.replace(['\n', '\r', '\t'], " "))
            .unwrap_or_else(|| "-".into())
    };
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| cols.iter().map(|(_, k)| cell(r, k)).collect())
        .collect();
    let mut widths: Vec<usize> = cols.iter().map(|(h, _)| h.len()).collect();
    for row in &table {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| -> String {
        let last = cells.len() - 1;
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(cols.iter().map(|(h, _)| (*h).to_owned()).collect());
    for row in table {
        out.push_str(&line(row));
    }
    out
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
        println!("{v}");
        return Ok(());
    }
    let field = |k: &str| v.get(k).map(Value::to_string).unwrap_or_else(|| "?".into());
    println!(
        "tuic node running ({})\n  socket:   {}\n  uptime:   {}s\n  sessions: {}\n  protocol: {}",
        ctx.target.instance_label(),
        ctx.target.socket.display(),
        field("uptime_secs"),
        field("session_count"),
        field("protocol_version"),
    );
    Ok(())
}

fn sessions(ctx: &Ctx, as_json: bool) -> Result<(), Failure> {
    let v = ctx.get_json("/sessions", "the terminal core (sessions)")?;
    if as_json {
        println!("{v}");
        return Ok(());
    }
    let rows = v
        .as_array()
        .ok_or_else(|| Failure::Failed("GET /sessions: expected a JSON array".into()))?;
    print!("{}", sessions_table(rows));
    Ok(())
}

fn print_result(result: &Value) {
    let text = content_text(result);
    if !text.is_empty() {
        println!("{text}");
    }
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
                println!(
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
        Cmd::Sessions { json } => sessions(&ctx, *json),
        Cmd::Send { to, message } => ctx
            .call_tool(
                "agent",
                json!({"action": "send", "to": to, "message": message}),
            )
            .map(|r| print_result(&r)),
        Cmd::Open { dir } => open(&ctx, dir),
        Cmd::Story {
            json,
            project,
            session_id,
        } => story(&ctx, json, project.as_deref(), session_id.as_deref()),
        Cmd::Cp { args } => cp(&ctx, args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("tuic: {}", f.message());
            ExitCode::from(f.code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_and_fills_missing_cells() {
        let rows = vec![
            json!({"session_id": "s1", "alias": "tu-1", "tuic_session": "u", "cwd": "/w",
                   "agent_type": "claude", "agent_state": "idle"}),
            json!({"session_id": "s22", "alias": "tu-22", "tuic_session": "v", "cwd": "/x y",
                   "display_name": "build\nlog"}),
        ];
        assert_eq!(
            sessions_table(&rows),
            "ALIAS  SESSION  NAME       AGENT   STATE  CWD\n\
             tu-1   s1       -          claude  idle   /w\n\
             tu-22  s22      build log  -       -      /x y\n"
        );
    }
}
