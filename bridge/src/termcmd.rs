//! The tmux-like `tuic` commands: `ls`, `new`, `run`, `attach`, `send-keys`, `capture`,
//! `kill`, `resize`, `rename`, `hosts`. Each is one or a few requests to the local node or hub;
//! on a hub every session route takes a remote `host/id` address, so the same commands reach
//! every machine.

use std::time::Duration;

use serde_json::{Value, json};
use tuic_proto::ipc_http::Request;

use crate::attach::{self, Outcome, encode_id};
use crate::ctx::{Ctx, Failure};
use crate::keys::{self, DetachKey};
use crate::target::{self, Resolved};
use crate::tty;

/// Rows per page of `GET /sessions` read by [`rows`].
const PAGE: usize = 1_000;

/// `GET /sessions`, as rows, read in pages of [`PAGE`] (`limit`, `cursor`), so no one answer of
/// a hub with thousands of rows is built or held whole. A page whose cursor row left the list
/// meanwhile (410) starts the read over, at most twice; a node that predates paging (400)
/// is read whole.
fn rows(ctx: &Ctx) -> Result<Vec<Value>, Failure> {
    let as_rows = |path: &str, v: Value| -> Result<Vec<Value>, Failure> {
        match v {
            Value::Array(a) => Ok(a),
            _ => Err(Failure::Failed(format!(
                "GET {path}: expected a JSON array"
            ))),
        }
    };
    for _ in 0..3 {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        let restart = loop {
            let path = match &cursor {
                None => format!("/sessions?limit={PAGE}"),
                Some(c) => format!("/sessions?limit={PAGE}&cursor={}", encode_id(c)),
            };
            let resp = ctx.send(&Request::new("GET", &path))?;
            match resp.status() {
                410 => break true,
                400 if cursor.is_none() => {
                    let v = ctx.get_json("/sessions", "the terminal core (sessions)")?;
                    return as_rows("/sessions", v);
                }
                _ => {}
            }
            let next = resp.head.header("x-next-cursor").map(str::to_owned);
            let v = if (200..300).contains(&resp.status()) {
                resp.json().map_err(|e| {
                    Failure::Failed(format!("GET {path}: the node sent invalid JSON: {e}"))
                })?
            } else {
                // The same answers as a plain read (404: no terminal core; others: failed).
                return as_rows(
                    "/sessions",
                    ctx.get_json(&path, "the terminal core (sessions)")?,
                );
            };
            all.extend(as_rows(&path, v)?);
            match next {
                Some(c) => cursor = Some(c),
                None => break false,
            }
        };
        if !restart {
            return Ok(all);
        }
    }
    Err(Failure::Failed(
        "GET /sessions: the list kept changing under its pages; try again".into(),
    ))
}

/// The hub's connections, or `None` on a plain node.
fn connections(ctx: &Ctx) -> Result<Option<Vec<Value>>, Failure> {
    let resp = ctx.send(&Request::new("GET", "/hub/connections"))?;
    if resp.status() == 404 {
        return Ok(None);
    }
    let v = resp
        .json()
        .map_err(|e| Failure::Failed(format!("GET /hub/connections: invalid JSON: {e}")))?;
    Ok(Some(
        v["connections"].as_array().cloned().unwrap_or_default(),
    ))
}

/// Resolves TARGET over the listed sessions.
pub(crate) fn resolve(ctx: &Ctx, t: &str) -> Result<Resolved, Failure> {
    let rows = rows(ctx)?;
    target::resolve(&rows, t).map_err(|m| Failure::Failed(format!("session {t:?}: {m}")))
}

/// Sends one JSON request to a session route; maps the node's error.
fn session_call(
    ctx: &Ctx,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<Value, Failure> {
    let mut req = Request::new(method, path);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = ctx.send(&req)?;
    let v = resp.json().unwrap_or(Value::Null);
    if (200..300).contains(&resp.status()) {
        return Ok(v);
    }
    let msg = v["error"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| crate::mcp::error_text(&resp));
    Err(Failure::Failed(format!(
        "{method} {path}: {} {msg}",
        resp.status()
    )))
}

/// Aligns rows of cells under headers; the last column is not padded.
pub(crate) fn table(headers: &[&str], body: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in body {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| -> String {
        let last = cells.len().saturating_sub(1);
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
    let mut out = line(&headers.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>());
    for row in body {
        out.push_str(&line(row));
    }
    out
}

fn cell(row: &Value, keys: &[&str]) -> String {
    keys.iter()
        .find_map(|k| match row.get(*k) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(Value::Null) | None | Some(Value::String(_)) => None,
            Some(v) => Some(v.to_string()),
        })
        .map(|s| s.replace(['\n', '\r', '\t'], " "))
        .unwrap_or_else(|| "-".into())
}

/// The row's one `state` as the web page shows it (`needs_input` → `needs input`); rows from a
/// node that predates `state` fall back to the agent or shell state.
fn state_label(row: &Value) -> String {
    match row.get("state").and_then(Value::as_str) {
        Some(s) if !s.is_empty() => s.replace('_', " "),
        _ => cell(row, &["agent_state", "shell_state"]),
    }
}

/// `GET /sessions` rows as the `tuic ls` table; hosts that are down follow as one line each.
pub(crate) fn sessions_table(rows: &[Value], down: &[Value]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                target::host_of(r),
                cell(r, &["alias"]),
                cell(r, &["session_id"]),
                cell(r, &["display_name"]),
                cell(r, &["agent_type"]),
                state_label(r),
                cell(r, &["cwd"]),
            ]
        })
        .collect();
    let mut out = table(
        &["HOST", "ALIAS", "SESSION", "NAME", "AGENT", "STATE", "CWD"],
        &body,
    );
    for c in down {
        out.push_str(&format!(
            "{}: offline{}\n",
            cell(c, &["id"]),
            c["last_error"]
                .as_str()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        ));
    }
    out
}

/// `tuic ls [--json]`: this node's rows first, then each host's, each in natural alias order
/// (`ro-8` before `ro-10`).
pub(crate) fn ls(ctx: &Ctx, as_json: bool) -> Result<(), Failure> {
    let mut rows = rows(ctx)?;
    sort_rows(&mut rows);
    if as_json {
        outln!("{}", Value::Array(rows));
        return Ok(());
    }
    let down: Vec<Value> = connections(ctx)?
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["up"] != json!(true))
        .collect();
    out!("{}", sessions_table(&rows, &down));
    Ok(())
}

/// Orders rows by host (this node's first, then hosts in the order listed) and alias
/// (natural order); stable, so equal keys keep the node's order.
fn sort_rows(rows: &mut [Value]) {
    let mut hosts: Vec<String> = vec!["local".into()];
    for r in rows.iter() {
        let h = target::host_of(r);
        if !hosts.contains(&h) {
            hosts.push(h);
        }
    }
    let rank = |r: &Value| hosts.iter().position(|h| *h == target::host_of(r));
    rows.sort_by(|a, b| {
        rank(a).cmp(&rank(b)).then_with(|| {
            tuic_proto::natural::cmp(
                a["alias"].as_str().unwrap_or_default(),
                b["alias"].as_str().unwrap_or_default(),
            )
        })
    });
}

/// `tuic hosts [--json]`.
pub(crate) fn hosts(ctx: &Ctx, as_json: bool) -> Result<(), Failure> {
    let Some(conns) = connections(ctx)? else {
        return Err(Failure::Unavailable(
            "the process on this socket is not a tuic hub (GET /hub/connections answered 404)"
                .into(),
        ));
    };
    if as_json {
        outln!("{}", Value::Array(conns));
        return Ok(());
    }
    let body: Vec<Vec<String>> = conns
        .iter()
        .map(|c| {
            vec![
                cell(c, &["id"]),
                if c["up"] == json!(true) { "up" } else { "down" }.to_owned(),
                cell(c, &["session_count"]),
                cell(c, &["outbox_held"]),
                cell(c, &["url"]),
                cell(c, &["last_error", "peer_last_error"]),
            ]
        })
        .collect();
    out!(
        "{}",
        table(
            &["HOST", "STATE", "SESSIONS", "OUTBOX", "URL", "LAST ERROR"],
            &body
        )
    );
    Ok(())
}

/// What `new`/`run` create.
#[derive(Debug, Default)]
pub(crate) struct NewSpec {
    /// Display name.
    pub(crate) name: Option<String>,
    /// Working directory on the host.
    pub(crate) cwd: Option<String>,
    /// A hub connection id; absent or `local` is this node.
    pub(crate) host: Option<String>,
    /// Program and arguments; empty runs the host's shell.
    pub(crate) command: Vec<String>,
    /// A one-off command (`run`): the node assigns no alias, so none is used up.
    pub(crate) no_alias: bool,
    /// The program's stderr apart from its terminal (`run`), read back through
    /// `GET /sessions/{id}/stderr`.
    pub(crate) separate_stderr: bool,
}

/// Creates a session; returns the id routes take and a label.
fn create(ctx: &Ctx, spec: &NewSpec) -> Result<Resolved, Failure> {
    let mut body = json!({});
    if let Some(n) = &spec.name {
        body["name"] = json!(n);
    }
    if let Some(c) = &spec.cwd {
        body["cwd"] = json!(c);
    }
    if let Some((prog, args)) = spec.command.split_first() {
        body["shell"] = json!(prog);
        body["args"] = json!(args);
    }
    if let Some((rows, cols)) = tty::size() {
        body["rows"] = json!(rows);
        body["cols"] = json!(cols);
    }
    if spec.no_alias {
        body["no_alias"] = json!(true);
    }
    if spec.separate_stderr {
        body["separate_stderr"] = json!(true);
    }
    let host = spec.host.as_deref().filter(|h| *h != "local");
    let path = match host {
        Some(h) => format!("/sessions?host={}", encode_id(h)),
        None => "/sessions".into(),
    };
    let v = session_call(ctx, "POST", &path, Some(body))?;
    let sid = v["session_id"].as_str().unwrap_or_default();
    let alias = v["alias"].as_str().filter(|a| !a.is_empty()).unwrap_or(sid);
    Ok(match host {
        Some(h) => Resolved {
            route_id: v["address"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{h}/{sid}")),
            label: format!("{h}/{alias}"),
            host: h.to_owned(),
        },
        None => Resolved {
            route_id: sid.to_owned(),
            label: alias.to_owned(),
            host: "local".into(),
        },
    })
}

/// `tuic new`: creates a session and attaches to it unless `detached` (or stdin is not a
/// terminal, which is said on stderr).
pub(crate) fn new(ctx: &Ctx, spec: &NewSpec, detached: bool, key: &str) -> Result<u8, Failure> {
    let key = DetachKey::parse(key).map_err(Failure::Usage)?;
    let r = create(ctx, spec)?;
    if detached || !tty::stdin_is_tty() {
        outln!("{}", r.label);
        if !detached {
            eprintln!(
                "tuic: created {}; not attaching: stdin is not a terminal",
                r.label
            );
        }
        return Ok(0);
    }
    attach_resolved(ctx, r, key, Duration::from_secs(120))
}

/// `tuic run CMD…`: runs CMD in a new session, prints its output, returns its exit code.
pub(crate) fn run(ctx: &Ctx, spec: &NewSpec) -> Result<u8, Failure> {
    let r = create(ctx, spec)?;
    let rt = runtime()?;
    let code = rt
        .block_on(attach::follow(
            &ctx.target.socket,
            &r.route_id,
            spec.separate_stderr,
        ))
        .map_err(|e| Failure::Failed(format!("{}: {e}", r.label)))?;
    Ok(code.map_or(1, |c| c.clamp(0, 255) as u8))
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Failed(format!("cannot start the runtime: {e}")))
}

/// `tuic attach TARGET`.
pub(crate) fn attach(
    ctx: &Ctx,
    t: &str,
    key: &str,
    reconnect_for: Duration,
) -> Result<u8, Failure> {
    let key = DetachKey::parse(key).map_err(Failure::Usage)?;
    let r = match resolve(ctx, t) {
        Ok(r) => r,
        Err(miss) => {
            // An exited session has left the list but still answers by id: say how it ended.
            let snap = ctx.send(&Request::new(
                "GET",
                &format!("/sessions/{}/terminal/snapshot", encode_id(t)),
            ))?;
            let v = snap.json().unwrap_or(Value::Null);
            if snap.status() == 200 && v["exited"] == json!(true) {
                return Err(exited_failure(t, &v));
            }
            return Err(miss);
        }
    };
    if !tty::stdin_is_tty() {
        return Err(Failure::Usage(
            "tuic attach needs a terminal: stdin is not a TTY (from scripts use `tuic capture` and `tuic send-keys`)"
                .into(),
        ));
    }
    attach_resolved(ctx, r, key, reconnect_for)
}

fn exited_failure(label: &str, v: &Value) -> Failure {
    Failure::Failed(match v["exit_code"].as_i64() {
        Some(c) => format!("session {label} has exited with code {c}"),
        None => format!("session {label} has exited (killed by a signal)"),
    })
}

fn attach_resolved(
    ctx: &Ctx,
    r: Resolved,
    key: DetachKey,
    reconnect_for: Duration,
) -> Result<u8, Failure> {
    let opts = attach::Options {
        socket: ctx.target.socket.clone(),
        route_id: r.route_id.clone(),
        label: r.label.clone(),
        detach: key,
        reconnect_for,
    };
    let rt = runtime()?;
    let raw = tty::RawMode::enter()
        .map_err(|e| Failure::Failed(format!("cannot put the terminal in raw mode: {e}")))?;
    // The session is shown on the alternate screen; leaving it gives the user's screen and
    // cursor back as they were, so the line below is printed where the cursor stood when
    // `tuic attach` started (the fresh line after the command), as tmux prints its own.
    tty::out(tty::ENTER.as_bytes());
    let outcome = rt.block_on(attach::run(&opts));
    tty::out(tty::RESET.as_bytes());
    drop(raw);
    // The stdin thread may sit in a read; the runtime must not wait for it.
    rt.shutdown_background();
    match outcome {
        Outcome::Detached => {
            eprintln!("[detached (from session {})]", r.label);
            Ok(0)
        }
        Outcome::Exited(code) => {
            match code {
                Some(c) => eprintln!("[session {} exited with code {c}]", r.label),
                None => eprintln!("[session {} exited (killed by a signal)]", r.label),
            }
            Ok(code.map_or(1, |c| c.clamp(0, 255) as u8))
        }
        Outcome::Gone(why) => Err(Failure::Failed(format!(
            "session {} is gone: {why}",
            r.label
        ))),
        Outcome::Unreachable(why) => Err(Failure::Failed(format!(
            "gave up re-attaching to {}: {why}",
            r.label
        ))),
    }
}

/// `tuic send-keys TARGET KEYS…` (`-l`: all literal).
pub(crate) fn send_keys(
    ctx: &Ctx,
    t: &str,
    words: &[String],
    literal: bool,
) -> Result<(), Failure> {
    let r = resolve(ctx, t)?;
    let bytes = keys::encode(words, literal);
    let data = String::from_utf8(bytes)
        .map_err(|_| Failure::Usage("the keys are not valid UTF-8".into()))?;
    session_call(
        ctx,
        "POST",
        &format!("/sessions/{}/write", encode_id(&r.route_id)),
        Some(json!({"data": data})),
    )?;
    Ok(())
}

/// `tuic capture TARGET [--lines N] [--ansi]`: the screen (or its last N rows with
/// scrollback) as text, or the screen as the escape sequences that redraw it.
pub(crate) fn capture(ctx: &Ctx, t: &str, lines: Option<usize>, ansi: bool) -> Result<(), Failure> {
    let r = resolve(ctx, t)?;
    let route = encode_id(&r.route_id);
    if ansi {
        let v = session_call(
            ctx,
            "GET",
            &format!("/sessions/{route}/terminal/snapshot"),
            None,
        )?;
        out!("{}{}", v["ansi"].as_str().unwrap_or_default(), tty::RESET);
        outln!();
        return Ok(());
    }
    let info = session_call(
        ctx,
        "GET",
        &format!("/sessions/{route}/terminal/scroll-info"),
        None,
    )?;
    let total = info["total_lines"].as_u64().unwrap_or(0) as usize;
    let screen = info["screen_lines"].as_u64().unwrap_or(0) as usize;
    // `-n N` counts back from the last written row, as `tail` would: the blank rows below it
    // are the empty part of the screen, so fetch them too and drop them before counting.
    let want = lines.map_or(screen, |n| n + screen).min(total);
    let v = session_call(
        ctx,
        "GET",
        &format!(
            "/sessions/{route}/terminal/lines?start={}&end={total}",
            total - want
        ),
        None,
    )?;
    let mut rows: Vec<&str> = v["lines"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    while rows.last().is_some_and(|l| l.trim().is_empty()) {
        rows.pop();
    }
    if let Some(n) = lines {
        rows.drain(..rows.len().saturating_sub(n));
    }
    for l in rows {
        outln!("{l}");
    }
    Ok(())
}

/// `tuic kill TARGET`.
pub(crate) fn kill(ctx: &Ctx, t: &str) -> Result<(), Failure> {
    let r = resolve(ctx, t)?;
    session_call(
        ctx,
        "DELETE",
        &format!("/sessions/{}", encode_id(&r.route_id)),
        None,
    )?;
    outln!("killed {}", r.label);
    Ok(())
}

/// `tuic resize TARGET COLS ROWS`.
pub(crate) fn resize(ctx: &Ctx, t: &str, cols: u16, rows: u16) -> Result<(), Failure> {
    let r = resolve(ctx, t)?;
    session_call(
        ctx,
        "POST",
        &format!("/sessions/{}/resize", encode_id(&r.route_id)),
        Some(json!({"rows": rows, "cols": cols})),
    )?;
    Ok(())
}

/// `tuic rename TARGET NAME`.
pub(crate) fn rename(ctx: &Ctx, t: &str, name: &str) -> Result<(), Failure> {
    let r = resolve(ctx, t)?;
    session_call(
        ctx,
        "PUT",
        &format!("/sessions/{}/name", encode_id(&r.route_id)),
        Some(json!({"name": name})),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ls_sorts_aliases_naturally_within_each_host() {
        let mut rows = vec![
            json!({"alias": "ro-10"}),
            json!({"alias": "ro-2", "connection_id": "boxb"}),
            json!({"alias": "ro-8"}),
            json!({"alias": "ro-1", "connection_id": "boxb"}),
            json!({"alias": "ro-9"}),
        ];
        sort_rows(&mut rows);
        let got: Vec<String> = rows.iter().map(target::label_of).collect();
        assert_eq!(got, ["ro-8", "ro-9", "ro-10", "boxb/ro-1", "boxb/ro-2"]);
    }

    #[test]
    fn table_has_host_column_and_lists_down_hosts() {
        let rows = vec![
            json!({"session_id": "s1", "alias": "tu-1", "cwd": "/w", "agent_type": "claude",
                   "agent_state": "idle"}),
            json!({"session_id": "s22", "alias": "tu-2", "cwd": "/x y", "display_name": "build\nlog",
                   "connection_id": "boxb", "address": "boxb/s22"}),
            json!({"session_id": "s3", "alias": "tu-3", "cwd": "/z", "agent_state": "idle",
                   "state": "needs_input"}),
        ];
        let down = vec![json!({"id": "boxc", "up": false, "last_error": "connection refused"})];
        assert_eq!(
            sessions_table(&rows, &down),
            "HOST   ALIAS  SESSION  NAME       AGENT   STATE        CWD\n\
             local  tu-1   s1       -          claude  idle         /w\n\
             boxb   tu-2   s22      build log  -       -            /x y\n\
             local  tu-3   s3       -          -       needs input  /z\n\
             boxc: offline (connection refused)\n"
        );
    }
}
