//! `tuic notify`: recent notifications, a test, watching a session, mutes and the channel
//! secrets, over the node's `/notifications*` routes (see `docs/cli.md#notify`).

use serde_json::{Value, json};
use tuic_proto::ipc_http::Request;

use crate::ctx::{Ctx, Failure};
use crate::mcp;

/// `tuic notify …`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct NotifyArgs {
    #[command(subcommand)]
    cmd: Option<NotifyCmd>,
    /// Watch this session: a notification when it exits (`--on exit`) or finishes (`--on done`).
    session: Option<String>,
    /// What to wait for: `exit` or `done`.
    #[arg(long, default_value = "exit", value_parser = ["exit", "done"])]
    on: String,
}

#[derive(Debug, clap::Subcommand)]
enum NotifyCmd {
    /// Recent notifications with their delivery state per channel (GET /notifications).
    Ls {
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Send a test notification on every configured channel.
    Test {
        /// The text (default: "Test notification from tuic").
        text: Option<String>,
    },
    /// Mute a session (id, alias or name) or, with --host, a host.
    Mute {
        /// The session or host.
        name: String,
        /// NAME is a host.
        #[arg(long)]
        host: bool,
    },
    /// Undo `mute`.
    Unmute {
        /// The session or host.
        name: String,
        /// NAME is a host.
        #[arg(long)]
        host: bool,
    },
    /// Print the webhook's HMAC key (created on first use) for the receiver to verify with.
    WebhookKey,
    /// Store the ntfy access token in the vault (read from stdin).
    NtfyToken,
}

fn call(ctx: &Ctx, method: &str, path: &str, body: Option<Value>) -> Result<Value, Failure> {
    let mut req = Request::new(method, path);
    if let Some(b) = &body {
        req = req.json(b);
    }
    let resp = ctx.send(&req)?;
    match resp.status() {
        200..=299 => resp
            .json()
            .map_err(|e| Failure::Failed(format!("{method} {path}: invalid JSON: {e}"))),
        404 if path.starts_with("/notifications")
            && !path.contains("/answer")
            && body.is_none() =>
        {
            Err(Failure::Unavailable(format!(
                "the node does not serve {method} {path}: it needs the notification service"
            )))
        }
        s => Err(Failure::Failed(format!(
            "{method} {path} failed: {s} {}",
            mcp::error_text(&resp)
        ))),
    }
}

/// Runs `tuic notify`.
pub(crate) fn run(ctx: &Ctx, args: &NotifyArgs) -> Result<(), Failure> {
    if let Some(s) = &args.session {
        let v = call(
            ctx,
            "POST",
            "/notifications/watch",
            Some(json!({"session": s, "on": args.on})),
        )?;
        println!(
            "watching {} ({}): a notification on {}",
            v["alias"].as_str().unwrap_or(s),
            v["session_id"].as_str().unwrap_or(""),
            args.on
        );
        return Ok(());
    }
    match args.cmd.as_ref().unwrap_or(&NotifyCmd::Ls { json: false }) {
        NotifyCmd::Ls { json } => {
            let v = call(ctx, "GET", "/notifications", None)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                return Ok(());
            }
            let list = v["notifications"].as_array().cloned().unwrap_or_default();
            if v["hub_attached"] == json!(true) {
                println!("a hub is attached: it sends this node's notifications (hub:relayed)");
            }
            if list.is_empty() {
                println!("no notifications");
            }
            for r in list {
                let channels: Vec<String> = r["deliveries"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, d)| format!("{k}:{}", d["state"].as_str().unwrap_or("?")))
                            .collect()
                    })
                    .unwrap_or_default();
                let first = r["text"]
                    .as_str()
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("");
                println!(
                    "{:>4}  {:<10} {:<9} {:<12} {}  [{}]",
                    r["id"],
                    r["state"].as_str().unwrap_or(""),
                    r["kind"].as_str().unwrap_or(""),
                    r["session"]
                        .as_str()
                        .unwrap_or(r["host"].as_str().unwrap_or("")),
                    first,
                    channels.join(" ")
                );
            }
            Ok(())
        }
        NotifyCmd::Test { text } => {
            let body = text.as_ref().map(|t| json!({"text": t}));
            let v = call(ctx, "POST", "/notifications/test", body.or(Some(json!({}))))?;
            println!(
                "test notification {} {}",
                v["notification"]["id"],
                v["notification"]["state"].as_str().unwrap_or("")
            );
            Ok(())
        }
        NotifyCmd::Mute { name, host } => mute(ctx, name, *host, true),
        NotifyCmd::Unmute { name, host } => mute(ctx, name, *host, false),
        NotifyCmd::WebhookKey => {
            let v = call(ctx, "GET", "/notifications/webhook-key", None)?;
            println!("{}", v["key"].as_str().unwrap_or(""));
            Ok(())
        }
        NotifyCmd::NtfyToken => {
            let mut token = String::new();
            std::io::stdin()
                .read_line(&mut token)
                .map_err(|e| Failure::Failed(format!("reading the token from stdin: {e}")))?;
            let token = token.trim();
            if token.is_empty() {
                return Err(Failure::Usage("no token on stdin".into()));
            }
            call(
                ctx,
                "PUT",
                "/notifications/ntfy-token",
                Some(json!({"token": token})),
            )?;
            println!("ntfy token stored in the vault");
            Ok(())
        }
    }
}

/// Adds or removes `name` in `notifications.muted_sessions|muted_hosts` with a three-way
/// config save.
fn mute(ctx: &Ctx, name: &str, host: bool, on: bool) -> Result<(), Failure> {
    let base = call(ctx, "GET", "/config", None)?;
    let mut next = base.clone();
    let key = if host {
        "muted_hosts"
    } else {
        "muted_sessions"
    };
    let list = next["notifications"][key]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut list: Vec<Value> = list.into_iter().filter(|v| v != name).collect();
    if on {
        list.push(json!(name));
    }
    next["notifications"][key] = json!(list);
    call(
        ctx,
        "PUT",
        "/config",
        Some(json!({"base": base, "config": next})),
    )?;
    println!(
        "{} {name} {}",
        if host { "host" } else { "session" },
        if on { "muted" } else { "unmuted" }
    );
    Ok(())
}
