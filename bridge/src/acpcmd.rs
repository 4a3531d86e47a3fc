//! `tuic acp …`: ACP connections from a terminal — launch, list, a line-mode chat
//! (`attach`), answers to permission requests, cancel. Each is a few requests to the node's
//! `/acp/connections` routes; `attach` also reads the connection's journal stream.
//!
//! It holds no state: what a connection is doing is always read from the node.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use clap::Subcommand;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tuic_proto::ipc_http::Request;

use crate::ctx::{Ctx, Failure};
use crate::mcp;

#[derive(Debug, Subcommand)]
pub(crate) enum AcpCmd {
    /// Launch a configured agent (POST /acp/connections) and, with PROMPT, chat with it.
    New {
        /// On a hub: the connection whose node runs the agent (`--cwd` is then that host's path).
        #[arg(short = 'H', long)]
        host: Option<String>,
        /// A name from `acp_agents` in the node's config (`ego`: the `ego_executable` setting).
        #[arg(long, default_value = "ego")]
        agent: String,
        /// Working directory, inside a registered repository (default: the current one).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// A first prompt; then the chat stays attached.
        prompt: Vec<String>,
    },
    /// List ACP connections (GET /acp/connections), "needs you" first.
    Ls {
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// A line-mode chat: streamed text and tool calls; a number answers a permission request;
    /// `/cancel` cancels the turn; `/quit` or end of input leaves (the agent keeps running).
    Attach {
        /// The connection id.
        id: String,
    },
    /// Answer the connection's oldest pending permission request with an option (its id, or
    /// its number as `attach` shows it).
    Answer {
        /// The connection id.
        id: String,
        /// The option.
        option: String,
    },
    /// Cancel the running turn.
    Cancel {
        /// The connection id.
        id: String,
    },
}

fn checked(ctx: &Ctx, req: Request, what: &str) -> Result<Value, Failure> {
    let resp = ctx.send(&req)?;
    let body = resp.json().unwrap_or(Value::Null);
    match resp.status() {
        200..=299 => Ok(body),
        404 if body.is_null() => Err(Failure::Unavailable(format!(
            "the node does not serve {what} (404); it needs the ACP routes"
        ))),
        s => Err(Failure::Failed(format!(
            "{what}: {s} {}",
            mcp::error_text(&resp)
        ))),
    }
}

pub(crate) fn run(ctx: &Ctx, cmd: &AcpCmd) -> Result<(), Failure> {
    match cmd {
        AcpCmd::New {
            host,
            agent,
            cwd,
            prompt,
        } => {
            // On another host the directory is that host's path, taken as given.
            let cwd = match (cwd, host) {
                (Some(c), Some(_)) => c.clone(),
                (Some(c), None) => std::fs::canonicalize(c)
                    .map_err(|e| Failure::Failed(format!("{}: {e}", c.display())))?,
                (None, Some(h)) => {
                    return Err(Failure::Usage(format!(
                        "--cwd is needed with -H {h}: a directory on that host"
                    )));
                }
                (None, None) => std::env::current_dir()
                    .map_err(|e| Failure::Failed(format!("reading the current directory: {e}")))?,
            };
            let path = match host {
                Some(h) => format!("/acp/connections?host={}", enc(h)),
                None => "/acp/connections".to_owned(),
            };
            let row = checked(
                ctx,
                Request::new("POST", &path)
                    .json(&json!({"agent": agent, "cwd": cwd.display().to_string()})),
                "POST /acp/connections",
            )?;
            let id = row["id"].as_str().unwrap_or_default().to_owned();
            println!("{id}");
            if prompt.is_empty() {
                return Ok(());
            }
            attach(ctx, &id, Some(prompt.join(" ")))
        }
        AcpCmd::Ls { json } => {
            let rows = checked(
                ctx,
                Request::new("GET", "/acp/connections"),
                "GET /acp/connections",
            )?;
            if *json {
                println!("{rows}");
                return Ok(());
            }
            println!(
                "{:<36}  {:<9}  {:<10}  {:>7}  NAME",
                "ID", "STATE", "AGENT", "PENDING"
            );
            for r in rows.as_array().into_iter().flatten() {
                println!(
                    "{:<36}  {:<9}  {:<10}  {:>7}  {}",
                    r["id"].as_str().unwrap_or_default(),
                    r["state"].as_str().unwrap_or_default(),
                    r["agent"].as_str().unwrap_or_default(),
                    r["pending"].as_u64().unwrap_or(0),
                    r["name"].as_str().unwrap_or_default(),
                );
            }
            Ok(())
        }
        AcpCmd::Attach { id } => attach(ctx, id, None),
        AcpCmd::Answer { id, option } => answer(ctx, id, option).map(|v| println!("{v}")),
        AcpCmd::Cancel { id } => checked(
            ctx,
            Request::new("POST", &format!("/acp/connections/{}/cancel", enc(id))),
            "POST /acp/connections/{id}/cancel",
        )
        .map(|_| println!("cancelled")),
    }
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Answers the oldest pending request: `option` is an option id or a 1-based number.
fn answer(ctx: &Ctx, id: &str, option: &str) -> Result<Value, Failure> {
    let snap = checked(
        ctx,
        Request::new("GET", &format!("/acp/connections/{}", enc(id))),
        "GET /acp/connections/{id}",
    )?;
    let Some(req) = snap["interactions"].as_array().and_then(|a| a.first()) else {
        return Err(Failure::Failed(format!(
            "connection {id} has no pending permission request"
        )));
    };
    let options = req["options"].as_array().cloned().unwrap_or_default();
    let option_id = match option.parse::<usize>() {
        Ok(n) if n >= 1 && n <= options.len() => options[n - 1]["option_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        _ => option.to_owned(),
    };
    let rid = req["request_id"].as_str().unwrap_or_default();
    checked(
        ctx,
        Request::new(
            "POST",
            &format!("/acp/connections/{}/interactions/{}", enc(id), enc(rid)),
        )
        .json(&json!({"option_id": option_id, "by": "cli"})),
        "POST /acp/connections/{id}/interactions/{rid}",
    )
}

/// One line of input from the person.
enum Line {
    Text(String),
    Eof,
}

fn attach(ctx: &Ctx, id: &str, first: Option<String>) -> Result<(), Failure> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Failed(format!("starting the runtime: {e}")))?;
    let snap = checked(
        ctx,
        Request::new("GET", &format!("/acp/connections/{}", enc(id))),
        "GET /acp/connections/{id}",
    )?;
    let after = snap["first_seq"].as_u64().unwrap_or(1).saturating_sub(1);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for l in std::io::stdin().lock().lines() {
            match l {
                Ok(l) => {
                    if tx.send(Line::Text(l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(Line::Eof);
    });
    rt.block_on(async {
        let socket = ctx.target.socket.clone();
        let stream = tokio::net::UnixStream::connect(&socket)
            .await
            .map_err(|e| Failure::NotRunning(format!("connecting {}: {e}", socket.display())))?;
        let url = format!(
            "ws://localhost/acp/connections/{}/stream?after={after}",
            enc(id)
        );
        let (mut ws, _) = tokio_tungstenite::client_async(url, stream)
            .await
            .map_err(|e| Failure::Failed(format!("opening the stream: {e}")))?;
        let mut ready = !matches!(snap["state"].as_str(), Some("starting"));
        let mut first = first;
        if ready && let Some(p) = first.take() {
            prompt(ctx, id, &p)?;
        }
        let mut out = std::io::stdout();
        loop {
            tokio::select! {
                m = ws.next() => {
                    let Some(Ok(m)) = m else {
                        println!("\n[stream closed]");
                        return Ok(());
                    };
                    let Message::Text(t) = m else { continue };
                    let Ok(f) = serde_json::from_str::<Value>(&t) else { continue };
                    print_frame(&mut out, &f);
                    if f["type"] == "ready" && !ready {
                        ready = true;
                        if let Some(p) = first.take() {
                            prompt(ctx, id, &p)?;
                        }
                    }
                }
                l = rx.recv() => match l {
                    None | Some(Line::Eof) => return Ok(()),
                    Some(Line::Text(l)) => {
                        let l = l.trim();
                        if l.is_empty() {
                            continue;
                        }
                        if l == "/quit" {
                            return Ok(());
                        }
                        let r = if l == "/cancel" {
                            checked(ctx, Request::new("POST", &format!("/acp/connections/{}/cancel", enc(id))), "cancel").map(|_| ())
                        } else if l.parse::<usize>().is_ok() {
                            answer(ctx, id, l).map(|_| ())
                        } else {
                            prompt(ctx, id, l)
                        };
                        if let Err(e) = r {
                            println!("! {}", e.message());
                        }
                    }
                },
            }
        }
    })
}

fn prompt(ctx: &Ctx, id: &str, text: &str) -> Result<(), Failure> {
    checked(
        ctx,
        Request::new("POST", &format!("/acp/connections/{}/prompt", enc(id)))
            .json(&json!({"content": [{"type": "text", "text": text}]})),
        "POST /acp/connections/{id}/prompt",
    )
    .map(|_| ())
}

/// Prints one frame as a line-mode chat shows it.
fn print_frame(out: &mut impl Write, f: &Value) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let _ = match f["type"].as_str().unwrap_or_default() {
        "started" => writeln!(out, "[starting {} #{}]", s(&f["agent"]), f["generation"]),
        "ready" => writeln!(out, "[ready]"),
        "agent_error" => writeln!(
            out,
            "[agent error in {}: {} ({})]{}",
            s(&f["method"]),
            s(&f["message"]),
            f["code"],
            f["auth_methods"]
                .as_array()
                .map(|a| format!(
                    " log in with: {}",
                    a.iter()
                        .map(|m| s(&m["name"]))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .unwrap_or_default()
        ),
        "prompt" => writeln!(
            out,
            "\n> {}",
            f["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ),
        "update" => {
            let u = &f["update"];
            match u["sessionUpdate"].as_str().unwrap_or_default() {
                "agent_message_chunk" => write!(out, "{}", s(&u["content"]["text"])),
                "agent_thought_chunk" => writeln!(out, "(thinking) {}", s(&u["content"]["text"])),
                "plan" => writeln!(
                    out,
                    "\nplan:\n{}",
                    u["entries"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|e| format!(
                            "  [{}] {}",
                            if e["status"] == "completed" { "x" } else { " " },
                            s(&e["content"])
                        ))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
                "tool_call" => writeln!(out, "\n[tool] {} ({})", s(&u["title"]), s(&u["status"])),
                "tool_call_update" => match u["status"].as_str() {
                    Some(st) => writeln!(out, "[tool {}] {st}", s(&u["toolCallId"])),
                    None => Ok(()),
                },
                _ => Ok(()),
            }
        }
        "permission" => {
            let mut text = format!(
                "\n? {} — answer with a number:",
                s(&f["tool_call"]["title"])
            );
            for (n, o) in f["options"].as_array().into_iter().flatten().enumerate() {
                text.push_str(&format!("\n  {}) {}", n + 1, s(&o["name"])));
            }
            writeln!(out, "{text}")
        }
        "permission_outcome" => writeln!(
            out,
            "[answered {} by {}]",
            f["option_id"].as_str().unwrap_or("cancelled"),
            s(&f["by"])
        ),
        "capability" if f["ok"] == false => writeln!(
            out,
            "[refused {} {}: {}]",
            s(&f["method"]),
            s(&f["target"]),
            s(&f["error"])
        ),
        "turn_end" => writeln!(
            out,
            "\n[turn {} ended: {}{}]",
            f["turn"],
            s(&f["stop_reason"]),
            f["error"]
                .as_str()
                .map(|e| format!(" — {e}"))
                .unwrap_or_default()
        ),
        "exit" => writeln!(out, "\n[agent ended: {}]", s(&f["reason"])),
        "gap" => writeln!(out, "\n[the journal dropped frames after {}]", f["after"]),
        _ => Ok(()),
    };
    let _ = out.flush();
}
