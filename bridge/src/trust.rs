//! `tuic audit`, `tuic share` and `tuic secret`: the owner's controls over who saw and did
//! what, over the node's `/audit`, `/shares` and `/secrets` routes. A secret value is read from
//! the terminal with echo off (or from stdin when it is not a terminal) and sent once; it is
//! never printed.

use std::io::{BufRead, Write};

use serde_json::{Value, json};
use tuic_proto::ipc_http::{Request, Response};

use crate::ctx::{Ctx, Failure};

fn answer(resp: &Response, what: &str) -> Result<Value, Failure> {
    let v = resp.json().unwrap_or(Value::Null);
    match resp.status() {
        200..=299 => Ok(v),
        404 if v.get("code").and_then(Value::as_str) == Some("not_found")
            && crate::mcp::error_text(resp).contains("no such route") =>
        {
            Err(Failure::Unavailable(format!(
                "the node does not serve {what} (404); it needs the audit/share/secret routes"
            )))
        }
        s => Err(Failure::Failed(format!(
            "{what}: {s} {}{}",
            crate::mcp::error_text(resp),
            v.get("code")
                .and_then(Value::as_str)
                .map(|c| format!(" ({c})"))
                .unwrap_or_default()
        ))),
    }
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// `tuic audit`: a page of the audit log, newest first. `filters` are the query's
/// `(key, value)` pairs as given (`kind`, `session`, `since_ms`, `limit`, `host`, `cursor`).
pub(crate) fn audit(
    ctx: &Ctx,
    filters: &[(&str, Option<String>)],
    as_json: bool,
) -> Result<(), Failure> {
    let q: Vec<String> = filters
        .iter()
        .filter_map(|(k, v)| v.as_deref().map(|v| format!("{k}={}", enc(v))))
        .collect();
    let path = if q.is_empty() {
        "/audit".to_owned()
    } else {
        format!("/audit?{}", q.join("&"))
    };
    let v = answer(&ctx.send(&Request::new("GET", &path))?, "GET /audit")?;
    if as_json {
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    for e in v["entries"].as_array().into_iter().flatten() {
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("-");
        // On a hub each entry names its host (`local` for the hub's own).
        let host = e
            .get("host")
            .and_then(Value::as_str)
            .map(|h| format!("{h:<10} "))
            .unwrap_or_default();
        outln!(
            "{host}{:>8} {} {:<16} {:<24} {:<4} {:<15} {:<10} {}",
            e["seq"],
            e["at_ms"],
            s("kind"),
            s("who"),
            s("via"),
            s("address"),
            s("session"),
            e.get("detail").map(Value::to_string).unwrap_or_default()
        );
    }
    outln!(
        "{} entries held (bound {} entries, {} days), {} dropped",
        v["total"],
        v["max_entries"],
        v["max_age_days"],
        v["dropped"]
    );
    for h in v["hosts"].as_array().into_iter().flatten() {
        if let Some(e) = h.get("error").and_then(Value::as_str) {
            outln!(
                "host {} unavailable: {e}",
                h["host"].as_str().unwrap_or("?")
            );
        }
    }
    if let Some(c) = v.get("next_cursor").and_then(Value::as_str) {
        outln!("more: --cursor {c}");
    }
    Ok(())
}

/// `tuic share [-H HOST] SESSION [--read-only|--answer] [--ttl D]`, `--list [SESSION]`,
/// `--revoke ID`. On a hub, `HOST` (or `HOST/SESSION`) names a node's session: the hub has
/// that node make the link, named `HOST/ID`.
pub(crate) fn share(
    ctx: &Ctx,
    host: Option<&str>,
    session: Option<&str>,
    answer_only: bool,
    ttl: &str,
    list: bool,
    revoke: Option<&str>,
) -> Result<(), Failure> {
    if let Some(id) = revoke {
        let path = format!("/shares/{}", enc(id));
        answer(
            &ctx.send(&Request::new("DELETE", &path))?,
            &format!("DELETE {path}"),
        )?;
        outln!("revoked {id}");
        return Ok(());
    }
    let addressed = match (host, session) {
        (Some(h), Some(s)) => Some(format!("{h}/{s}")),
        (_, s) => s.map(str::to_owned),
    };
    let session = addressed.as_deref();
    if list {
        let path = match session {
            Some(s) => format!("/shares?session={}", enc(s)),
            None => "/shares".to_owned(),
        };
        let v = answer(&ctx.send(&Request::new("GET", &path))?, "GET /shares")?;
        let of_host = |l: &&Value| host.is_none_or(|h| l["host"].as_str().unwrap_or("local") == h);
        for l in v["shares"].as_array().into_iter().flatten().filter(of_host) {
            let viewers: Vec<String> = l["viewers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["address"].as_str().map(str::to_owned))
                .collect();
            outln!(
                "{} {} {} {} expires_ms={} viewers=[{}]",
                l["id"].as_str().unwrap_or("?"),
                l["session_id"].as_str().unwrap_or("?"),
                l["scope"].as_str().unwrap_or("?"),
                l["state"].as_str().unwrap_or("?"),
                l["expires_ms"],
                viewers.join(", ")
            );
        }
        return Ok(());
    }
    let Some(session) = session else {
        return Err(Failure::Usage(
            "tuic share SESSION [--read-only|--answer] [--ttl 1h] (or --list, --revoke ID)".into(),
        ));
    };
    let body = json!({
        "session": session,
        "scope": if answer_only { "answer" } else { "read_only" },
        "ttl": ttl,
    });
    let v = answer(
        &ctx.send(&Request::new("POST", "/shares").json(&body))?,
        "POST /shares",
    )?;
    match v["url"].as_str() {
        Some(u) => outln!("{u}"),
        None => outln!(
            "{} (on this node's address; remote access is off)",
            v["path"].as_str().unwrap_or("")
        ),
    }
    eprintln!(
        "link {} ({}) expires at {} ms; revoke with: tuic share --revoke {}",
        v["id"].as_str().unwrap_or("?"),
        v["scope"].as_str().unwrap_or("?"),
        v["expires_ms"],
        v["id"].as_str().unwrap_or("?")
    );
    Ok(())
}

/// Reads a secret: from the terminal with echo off, else one line of stdin.
fn read_secret(prompt: &str) -> Result<zeroize::Zeroizing<String>, Failure> {
    let mut line = zeroize::Zeroizing::new(String::new());
    if crate::tty::stdin_is_tty() {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let _quiet = crate::tty::NoEcho::enter()
            .map_err(|e| Failure::Failed(format!("turning echo off: {e}")))?;
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| Failure::Failed(format!("reading the secret: {e}")))?;
        eprintln!();
    } else {
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| Failure::Failed(format!("reading the secret: {e}")))?;
    }
    while line.ends_with('\n') || line.ends_with('\r') {
        line.pop();
    }
    Ok(line)
}

/// `tuic secret list|set NAME|rm NAME|answer`.
pub(crate) fn secret(ctx: &Ctx, cmd: &str, name: Option<&str>) -> Result<(), Failure> {
    match (cmd, name) {
        ("list", _) => {
            let v = answer(&ctx.send(&Request::new("GET", "/secrets"))?, "GET /secrets")?;
            for s in v["secrets"].as_array().into_iter().flatten() {
                outln!(
                    "{} stored_ms={}",
                    s["name"].as_str().unwrap_or("?"),
                    s["stored_ms"]
                );
            }
            for f in v["forms"].as_array().into_iter().flatten() {
                outln!(
                    "{} requested by {}: {} (answer with `tuic secret answer`)",
                    f["name"].as_str().unwrap_or("?"),
                    f["requested_by"].as_str().unwrap_or("?"),
                    f["reason"].as_str().unwrap_or("")
                );
            }
            for c in v["consents"].as_array().into_iter().flatten() {
                outln!(
                    "{} asks to run {} in {} with {} (`tuic secret approve|deny {}`)",
                    c["requested_by"].as_str().unwrap_or("?"),
                    argv_text(&c["argv"]),
                    c["cwd"].as_str().unwrap_or("(the node's directory)"),
                    c["name"].as_str().unwrap_or("?"),
                    c["name"].as_str().unwrap_or("?"),
                );
            }
            for t in v["templates"].as_array().into_iter().flatten() {
                outln!(
                    "approved {}: {} with {} in {} (`tuic secret forget {}`)",
                    t["id"].as_str().unwrap_or("?"),
                    argv_text(&t["argv"]),
                    t["name"].as_str().unwrap_or("?"),
                    t["cwd"].as_str().unwrap_or("(the node's directory)"),
                    t["id"].as_str().unwrap_or("?"),
                );
            }
            Ok(())
        }
        (verb @ ("approve" | "deny"), Some(n)) => {
            // The oldest open consent request for secret `n`, shown exactly before it is answered.
            let v = answer(&ctx.send(&Request::new("GET", "/secrets"))?, "GET /secrets")?;
            let Some(c) = v["consents"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["name"] == n)
                .cloned()
            else {
                outln!("no run with {n} waits for consent");
                return Ok(());
            };
            eprintln!(
                "{} asks to run {} in {}",
                c["requested_by"].as_str().unwrap_or("?"),
                argv_text(&c["argv"]),
                c["cwd"].as_str().unwrap_or("(the node's directory)")
            );
            let body = json!({"nonce": c["nonce"], "allow": verb == "approve"});
            answer(
                &ctx.send(&Request::new("POST", "/secrets/consent").json(&body))?,
                "POST /secrets/consent",
            )?;
            outln!(
                "{} that exact run with {n}",
                if verb == "approve" {
                    "approved"
                } else {
                    "denied"
                }
            );
            Ok(())
        }
        ("forget", Some(id)) => {
            let path = format!("/secrets/templates/{}", enc(id));
            answer(
                &ctx.send(&Request::new("DELETE", &path))?,
                &format!("DELETE {path}"),
            )?;
            outln!("forgot approved command {id}");
            Ok(())
        }
        ("set", Some(n)) => {
            let value = read_secret(&format!("value for {n}: "))?;
            let path = format!("/secrets/{}", enc(n));
            answer(
                &ctx.send(&Request::new("PUT", &path).json(&json!({"value": value.as_str()})))?,
                &format!("PUT {path}"),
            )?;
            outln!("stored {n}");
            Ok(())
        }
        ("rm", Some(n)) => {
            let path = format!("/secrets/{}", enc(n));
            answer(
                &ctx.send(&Request::new("DELETE", &path))?,
                &format!("DELETE {path}"),
            )?;
            outln!("removed {n}");
            Ok(())
        }
        ("answer", _) => {
            let v = answer(&ctx.send(&Request::new("GET", "/secrets"))?, "GET /secrets")?;
            let forms = v["forms"].as_array().cloned().unwrap_or_default();
            if forms.is_empty() {
                outln!("no secret is requested");
            }
            for f in forms {
                let n = f["name"].as_str().unwrap_or("?");
                eprintln!(
                    "{} asks for {n}: {}",
                    f["requested_by"].as_str().unwrap_or("?"),
                    f["reason"].as_str().unwrap_or("")
                );
                let value = read_secret(&format!("value for {n}: "))?;
                let body = json!({"nonce": f["nonce"], "value": value.as_str()});
                answer(
                    &ctx.send(&Request::new("POST", "/secrets/form").json(&body))?,
                    "POST /secrets/form",
                )?;
                outln!("stored {n}");
            }
            Ok(())
        }
        _ => Err(Failure::Usage(
            "tuic secret list | set NAME | rm NAME | answer | approve NAME | deny NAME | forget ID"
                .into(),
        )),
    }
}

/// An argv as one line (each argument quoted when it needs to be).
fn argv_text(v: &Value) -> String {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let a = a.as_str().unwrap_or("");
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c))
            {
                a.to_owned()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
