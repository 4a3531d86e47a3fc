//! `tuic mcp`: an HTTP upstream's OAuth authorization from the terminal (start, wait for
//! the callback, cancel), over the node's `/mcp/upstreams/{name}/oauth*` routes.

use std::time::Duration;

use serde_json::{Value, json};
use tuic_proto::ipc_http::{Request, Response};

use crate::ctx::{Ctx, Failure};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum McpCmd {
    /// Authorize an HTTP upstream with OAuth: prints the URL to open in a browser and waits
    /// until the authorization completes, fails, expires or is cancelled.
    Auth {
        /// The upstream's name (its tool prefix).
        name: String,
        /// Cancel the pending authorization instead.
        #[arg(long)]
        cancel: bool,
        /// Print the URL and return without waiting.
        #[arg(long)]
        no_wait: bool,
        /// Longest wait, in seconds (default: until the flow expires).
        #[arg(long)]
        wait_secs: Option<u64>,
    },
}

fn upstream_path(name: &str, tail: &str) -> String {
    let enc: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("/mcp/upstreams/{enc}/oauth{tail}")
}

/// `tuic mcp auth NAME [--cancel|--no-wait|--wait-secs N]`.
pub(crate) fn run(ctx: &Ctx, cmd: &McpCmd) -> Result<(), Failure> {
    let McpCmd::Auth {
        name,
        cancel,
        no_wait,
        wait_secs,
    } = cmd;
    let answer = |resp: &Response, what: &str| -> Result<Value, Failure> {
        let v = resp.json().unwrap_or(Value::Null);
        match resp.status() {
            200 => Ok(v),
            404 if v.is_null() => Err(Failure::Unavailable(format!(
                "the node does not serve {what} (404); it needs the upstream OAuth routes"
            ))),
            s => Err(Failure::Failed(format!(
                "{what}: {s} {}",
                v.get("error").and_then(Value::as_str).unwrap_or("")
            ))),
        }
    };
    if *cancel {
        let path = upstream_path(name, "/cancel");
        let v = answer(
            &ctx.send(&Request::new("POST", &path).json(&json!({})))?,
            &path,
        )?;
        outln!(
            "cancelled {} pending authorization(s) of {name}",
            v.get("cancelled").and_then(Value::as_u64).unwrap_or(0)
        );
        return Ok(());
    }
    let path = upstream_path(name, "/start");
    let started = answer(
        &ctx.send(&Request::new("POST", &path).json(&json!({})))?,
        &path,
    )?;
    let url = started
        .get("authorize_url")
        .and_then(Value::as_str)
        .unwrap_or("");
    let server = started
        .get("authorization_server")
        .and_then(Value::as_str)
        .unwrap_or("?");
    outln!("Authorize upstream {name} at {server}:");
    if started.get("cross_domain_as") == Some(&json!(true)) {
        outln!(
            "  warning: the authorization server is on another domain than the MCP server; make sure you trust {server}"
        );
    }
    outln!("{url}");
    if *no_wait {
        return Ok(());
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let expires = started
        .get("expires_at_ms")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    };
    let limit = wait_secs
        .map(|s| now_ms() + s * 1000)
        .unwrap_or(expires + 5_000);
    let status_path = upstream_path(name, "");
    // Bounded: until the flow's own expiry (plus a sweep's slack) or --wait-secs.
    while now_ms() < limit {
        std::thread::sleep(Duration::from_millis(250));
        let v = answer(&ctx.send(&Request::new("GET", &status_path))?, &status_path)?;
        let state = v["auth"]["state"].as_str().unwrap_or("");
        match state {
            "authorizing" => continue,
            "authorized" => {
                outln!("authorized: upstream {name} reconnects with its new tokens");
                return Ok(());
            }
            _ => {
                let why = v["auth"]["last_error"]
                    .as_str()
                    .unwrap_or("the authorization ended without tokens");
                return Err(Failure::Failed(format!("upstream {name}: {state}: {why}")));
            }
        }
    }
    Err(Failure::Failed(format!(
        "upstream {name}: no callback within the wait; the authorization is still pending (cancel it with `tuic mcp auth {name} --cancel`)"
    )))
}
