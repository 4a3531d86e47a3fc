//! Progress and operations across the hub's nodes: `POST /progress/list` merged newest first
//! over the hub and every connection (paged with one cursor that holds each source's
//! position), `GET /progress/projects`, `GET /agents` and `GET /metrics` merged with the
//! connection named, Progress Flow routed to the owner of a `<connection>/<session>`
//! address, and each node's `progress-recorded` events relayed onto the hub's bus.
//!
//! A connection that is down (or fails to answer) is named in the answer's `hosts` /
//! `connections` rows with its error; its entries are simply absent. The hub only reads the
//! nodes' own routes with their tokens; it never writes to a node's journal.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http_body_util::BodyExt;
use serde_json::{Map, Value, json};
use tuic_node::error::ApiError;
use tuic_proto::events::Event;

use crate::federation::{Conn, Federation, describe};

/// Longest wait for one node's answer to a merged view.
const NODE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request body read here (the node's own limit).
const MAX_BODY: usize = 2 * 1024 * 1024;
/// The name of the hub's own rows.
const LOCAL: &str = "local";

/// The middleware (installed inside the node's request boundary, beside `proxy::intercept`).
pub async fn intercept(State(fed): State<Arc<Federation>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let m = req.method().clone();
    match (m, path) {
        (Method::POST, "/progress/list") => progress_list(fed, req, next).await,
        (Method::GET, "/progress/projects") => projects(fed, req, next).await,
        (Method::GET, "/agents") => agents(fed, req, next).await,
        (Method::GET, "/metrics") => metrics(fed, req, next).await,
        (Method::POST, "/progress/flow" | "/progress/flow/detail") => flow(fed, req, next).await,
        _ => next.run(req).await,
    }
}

fn bad(msg: impl Into<String>) -> Response {
    ApiError::bad_request(msg).into_response()
}

fn unavailable(id: &str, why: &str) -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "owner_unavailable",
        format!("connection {id} is unavailable: {why}"),
    )
    .into_response()
}

async fn split_body(req: Request) -> Result<(axum::http::request::Parts, Bytes), Response> {
    let (parts, body) = req.into_parts();
    match http_body_util::Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => Ok((parts, b.to_bytes())),
        Err(_) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "request body too large",
        )
        .into_response()),
    }
}

/// Runs the hub's own handler for `parts` with `body` and reads its JSON answer.
async fn local_json(
    next: Next,
    parts: axum::http::request::Parts,
    body: Bytes,
) -> (StatusCode, Value) {
    let resp = next.run(Request::from_parts(parts, Body::from(body))).await;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// One node's answer to `method path` (JSON), or why there is none.
async fn node_json(
    fed: &Federation,
    conn: &Conn,
    method: reqwest::Method,
    path_and_query: &str,
    body: Option<Value>,
) -> Result<(u16, Value), String> {
    if !conn.snapshot().up {
        return Err("not connected".into());
    }
    let mut req = fed
        .http
        .request(method, format!("{}{path_and_query}", conn.url))
        .header(reqwest::header::COOKIE, conn.cookie())
        .timeout(NODE_TIMEOUT);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.map_err(|e| describe(&e))?;
    let status = r.status().as_u16();
    let v = r.json::<Value>().await.map_err(|e| describe(&e))?;
    Ok((status, v))
}

/// A hub list cursor: each source's position (`None`: from the newest; `Some(None)`:
/// exhausted).
type Positions = Vec<(String, Option<Option<u64>>)>;

fn parse_cursor(v: Option<&Value>) -> Result<Positions, String> {
    let s = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => s,
        Some(_) => return Err("cursor must be the nextCursor string of the previous page".into()),
    };
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (host, pos) = p
                .split_once(':')
                .ok_or_else(|| format!("cursor {s:?} is not a nextCursor value"))?;
            let pos = match pos {
                "end" => Some(None),
                "" => None,
                n => {
                    Some(Some(n.parse::<u64>().map_err(|_| {
                        format!("cursor {s:?} is not a nextCursor value")
                    })?))
                }
            };
            Ok((host.to_owned(), pos))
        })
        .collect()
}

fn encode_cursor(p: &Positions) -> String {
    p.iter()
        .map(|(h, pos)| match pos {
            None => format!("{h}:"),
            Some(None) => format!("{h}:end"),
            Some(Some(n)) => format!("{h}:{n}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// One source's page in a merged list.
struct SourcePage {
    host: String,
    entries: Vec<Value>,
    total: u64,
}

/// `POST /progress/list?path=` merged over the hub and its nodes; `?connection=` (or a
/// `ptyId` address `<connection>/<pty>`) reads one source.
async fn progress_list(fed: Arc<Federation>, req: Request, next: Next) -> Response {
    let query = req.uri().query().unwrap_or("").to_owned();
    let pairs: Vec<(String, String)> = serde_urlencoded_pairs(&query);
    let path = pairs
        .iter()
        .find(|(k, _)| k == "path")
        .map(|(_, v)| v.clone());
    let only = pairs
        .iter()
        .find(|(k, _)| k == "connection")
        .map(|(_, v)| v.clone());
    let (parts, body) = match split_body(req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let mut input: Map<String, Value> = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(mut m)) => {
                if m.len() == 1
                    && let Some(Value::Object(i)) = m.remove("input")
                {
                    i
                } else {
                    m
                }
            }
            _ => return bad("the body must be a JSON object (the progress_list input)"),
        }
    };
    let Some(path) = path else {
        return bad("path is required: ?path=<repository root>");
    };
    // A ptyId address names its source.
    let mut only = only;
    if let Some(Value::String(p)) = input.get("ptyId").cloned()
        && let Some((conn, pty)) = p.split_once('/')
    {
        only = Some(conn.to_owned());
        input.insert("ptyId".into(), json!(pty));
    }
    if let Some(id) = only {
        let one = Bytes::from(Value::Object(input.clone()).to_string());
        if id == LOCAL {
            let mut parts = parts;
            parts.uri = format!("/progress/list?path={}", enc(&path))
                .parse()
                .unwrap_or(parts.uri);
            let (s, v) = local_json(next, parts, one).await;
            return (s, Json(v)).into_response();
        }
        let Some(conn) = fed.get(&id) else {
            return ApiError::not_found(format!("unknown connection {id}")).into_response();
        };
        return match node_json(
            &fed,
            &conn,
            reqwest::Method::POST,
            &format!("/progress/list?path={}", enc(&path)),
            Some(Value::Object(input)),
        )
        .await
        {
            Ok((s, mut v)) => {
                tag_entries(&mut v, &conn.id);
                (
                    StatusCode::from_u16(s).unwrap_or(StatusCode::BAD_GATEWAY),
                    Json(v),
                )
                    .into_response()
            }
            Err(e) => unavailable(&conn.id, &e),
        };
    }
    let positions = match parse_cursor(input.get("cursor")) {
        Ok(p) => p,
        Err(e) => return bad(e),
    };
    let limit = match input.get("limit") {
        None | Some(Value::Null) => 8,
        Some(v) => match v.as_i64() {
            Some(n) => n.clamp(1, 100),
            None => return bad("limit must be an integer"),
        },
    } as usize;
    let conns = fed.all();
    let mut hosts: Vec<String> = vec![LOCAL.to_owned()];
    hosts.extend(conns.iter().map(|c| c.id.clone()));
    let pos_of = |h: &str| {
        positions
            .iter()
            .find(|(x, _)| x == h)
            .map(|(_, p)| *p)
            .unwrap_or(None)
    };
    let source_input = |cursor: Option<u64>| {
        let mut i = input.clone();
        i.insert("limit".into(), json!(limit));
        match cursor {
            Some(c) => i.insert("cursor".into(), json!(c)),
            None => i.remove("cursor"),
        };
        Value::Object(i)
    };
    let mut pages: Vec<SourcePage> = Vec::new();
    let mut host_rows = Vec::new();
    let mut errors = Vec::new();
    // The hub's own journal.
    match pos_of(LOCAL) {
        Some(None) => host_rows.push(json!({"host": LOCAL, "up": true, "exhausted": true})),
        pos => {
            let mut parts = parts;
            parts.uri = format!("/progress/list?path={}", enc(&path))
                .parse()
                .unwrap_or(parts.uri);
            let body = Bytes::from(source_input(pos.flatten()).to_string());
            let (s, v) = local_json(next, parts, body).await;
            if !s.is_success() {
                return (s, Json(v)).into_response();
            }
            host_rows.push(json!({"host": LOCAL, "up": true, "total": v["total"]}));
            pages.push(page_of(LOCAL, v));
        }
    }
    let fetches = conns.iter().map(|c| {
        let fed = fed.clone();
        let c = c.clone();
        let pos = pos_of(&c.id);
        let body = source_input(pos.flatten());
        let path = path.clone();
        async move {
            if pos == Some(None) {
                return (c, pos, None);
            }
            let r = node_json(
                &fed,
                &c,
                reqwest::Method::POST,
                &format!("/progress/list?path={}", enc(&path)),
                Some(body),
            )
            .await;
            (c, pos, Some(r))
        }
    });
    for (c, _pos, r) in futures::future::join_all(fetches).await {
        match r {
            None => host_rows.push(json!({"host": c.id, "up": true, "exhausted": true})),
            Some(Ok((200, mut v))) => {
                tag_entries(&mut v, &c.id);
                host_rows.push(json!({"host": c.id, "up": true, "total": v["total"]}));
                pages.push(page_of(&c.id, v));
            }
            Some(Ok((s, v))) => {
                let e = v["error"].as_str().unwrap_or("error").to_owned();
                errors.push(c.id.clone());
                host_rows.push(json!({"host": c.id, "up": true, "error": format!("{s}: {e}")}));
            }
            Some(Err(e)) => {
                errors.push(c.id.clone());
                host_rows.push(json!({"host": c.id, "up": false, "offline": true, "error": e}));
            }
        }
    }
    // Merge newest first; ties by host then id, so the order is total and stable.
    let mut all: Vec<(usize, Value)> = pages
        .iter()
        .enumerate()
        .flat_map(|(i, p)| p.entries.iter().cloned().map(move |e| (i, e)))
        .collect();
    all.sort_by(|(ia, a), (ib, b)| {
        let t = |v: &Value| v["created_at_ms"].as_u64().unwrap_or(0);
        let id = |v: &Value| v["id"].as_u64().unwrap_or(0);
        t(b).cmp(&t(a))
            .then_with(|| pages[*ia].host.cmp(&pages[*ib].host))
            .then_with(|| id(b).cmp(&id(a)))
    });
    all.truncate(limit);
    let total: u64 = pages.iter().map(|p| p.total).sum();
    let mut next_positions: Positions = Vec::new();
    let mut more = false;
    for h in &hosts {
        let page = pages.iter().enumerate().find(|(_, p)| &p.host == h);
        let pos = match page {
            Some((i, p)) => {
                let taken: Vec<&Value> = all
                    .iter()
                    .filter(|(j, _)| *j == i)
                    .map(|(_, e)| e)
                    .collect();
                let left = p.total.saturating_sub(taken.len() as u64);
                match (taken.last(), left) {
                    (_, 0) => Some(None),
                    (Some(last), _) => Some(last["id"].as_u64()),
                    (None, _) => pos_of(h),
                }
            }
            // Exhausted before, or unreachable now: keep where it was.
            None => pos_of(h),
        };
        if pos != Some(None) && !errors.contains(h) {
            more = true;
        }
        next_positions.push((h.clone(), pos));
    }
    let entries: Vec<Value> = all.into_iter().map(|(_, e)| e).collect();
    Json(json!({
        "project": path,
        "entries": entries,
        "total": total,
        "nextCursor": more.then(|| encode_cursor(&next_positions)),
        "hosts": host_rows,
    }))
    .into_response()
}

fn page_of(host: &str, v: Value) -> SourcePage {
    let mut entries: Vec<Value> = v["entries"].as_array().cloned().unwrap_or_default();
    if host == LOCAL {
        for e in &mut entries {
            e["host"] = json!(LOCAL);
        }
    }
    SourcePage {
        host: host.to_owned(),
        entries,
        total: v["total"].as_u64().unwrap_or(0),
    }
}

/// Names the connection on every entry of a node's list answer.
fn tag_entries(v: &mut Value, conn: &str) {
    if let Some(a) = v.get_mut("entries").and_then(Value::as_array_mut) {
        for e in a {
            e["host"] = json!(conn);
            e["connection_id"] = json!(conn);
            if let Some(p) = e.get("pty_id").and_then(Value::as_str).map(str::to_owned) {
                e["pty_address"] = json!(format!("{conn}/{p}"));
            }
        }
    }
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn serde_urlencoded_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let d = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (d(k), d(v))
        })
        .collect()
}

/// Rows of every connection for `path`, each tagged, plus per-connection status rows.
async fn gather(fed: &Arc<Federation>, path: &str) -> (Vec<(Arc<Conn>, Value)>, Vec<Value>) {
    let conns = fed.all();
    let fetches = conns.iter().map(|c| {
        let fed = fed.clone();
        let c = c.clone();
        let path = path.to_owned();
        async move {
            let r = node_json(&fed, &c, reqwest::Method::GET, &path, None).await;
            (c, r)
        }
    });
    let mut ok = Vec::new();
    let mut rows = Vec::new();
    for (c, r) in futures::future::join_all(fetches).await {
        match r {
            Ok((200, v)) => {
                rows.push(json!({"connection_id": c.id, "up": true}));
                ok.push((c, v));
            }
            Ok((s, v)) => rows.push(json!({"connection_id": c.id, "up": true,
                "error": format!("{s}: {}", v["error"].as_str().unwrap_or("error"))})),
            Err(e) => {
                rows.push(json!({"connection_id": c.id, "up": false, "offline": true, "error": e}))
            }
        }
    }
    (ok, rows)
}

/// `GET /progress/projects`: the hub's and every node's projects, with the host named.
async fn projects(fed: Arc<Federation>, req: Request, next: Next) -> Response {
    let (parts, body) = match split_body(req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let (s, local) = local_json(next, parts, body).await;
    if !s.is_success() {
        return (s, Json(local)).into_response();
    }
    let mut projects: Vec<Value> = local["projects"].as_array().cloned().unwrap_or_default();
    for p in &mut projects {
        p["host"] = json!(LOCAL);
    }
    let (remote, connections) = gather(&fed, "/progress/projects").await;
    for (c, v) in remote {
        for mut p in v["projects"].as_array().cloned().unwrap_or_default() {
            p["host"] = json!(c.id);
            p["connection_id"] = json!(c.id);
            projects.push(p);
        }
    }
    projects.sort_by(|a, b| {
        b["last_at_ms"]
            .as_u64()
            .cmp(&a["last_at_ms"].as_u64())
            .then_with(|| a["host"].as_str().cmp(&b["host"].as_str()))
    });
    Json(json!({"projects": projects, "connections": connections})).into_response()
}

/// `GET /agents`: the hub's and every node's detected agents, with addresses.
async fn agents(fed: Arc<Federation>, req: Request, next: Next) -> Response {
    let (parts, body) = match split_body(req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let (s, local) = local_json(next, parts, body).await;
    if !s.is_success() {
        return (s, Json(local)).into_response();
    }
    let mut agents: Vec<Value> = local["agents"].as_array().cloned().unwrap_or_default();
    let mut scanned = local["sessions_scanned"].as_u64().unwrap_or(0);
    for a in &mut agents {
        a["host"] = json!(LOCAL);
    }
    let (remote, connections) = gather(&fed, "/agents").await;
    for (c, v) in remote {
        scanned += v["sessions_scanned"].as_u64().unwrap_or(0);
        for mut a in v["agents"].as_array().cloned().unwrap_or_default() {
            let sid = a["session_id"].as_str().unwrap_or_default().to_owned();
            a["host"] = json!(c.id);
            a["connection_id"] = json!(c.id);
            a["is_remote"] = json!(true);
            a["address"] = json!(format!("{}/{sid}", c.id));
            agents.push(a);
        }
    }
    Json(json!({"agents": agents, "sessions_scanned": scanned, "connections": connections}))
        .into_response()
}

/// `POST /progress/flow[/detail]` with `session_id` = `<connection>/<session>`: read on the
/// owning node (`local/<id>` on the hub itself); a plain id is the hub's own session.
async fn flow(fed: Arc<Federation>, req: Request, next: Next) -> Response {
    let (parts, body) = match split_body(req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let mut v: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return next.run(Request::from_parts(parts, Body::from(body))).await,
    };
    let Some(addr) = v["session_id"]
        .as_str()
        .filter(|s| s.contains('/'))
        .map(str::to_owned)
    else {
        return next.run(Request::from_parts(parts, Body::from(body))).await;
    };
    let (conn_id, sid) = match tuic_proto::peer::parse_address(&addr) {
        Ok(tuic_proto::peer::Address::Local(sid)) => (LOCAL.to_owned(), sid.to_owned()),
        Ok(tuic_proto::peer::Address::Remote { connection, peer }) => {
            (connection.to_owned(), peer.to_owned())
        }
        Err(e) => return bad(e.to_string()),
    };
    v["session_id"] = json!(sid);
    if conn_id == LOCAL {
        return next
            .run(Request::from_parts(parts, Body::from(v.to_string())))
            .await;
    }
    let Some(conn) = fed.get(&conn_id) else {
        return ApiError::not_found(format!("unknown connection {conn_id}")).into_response();
    };
    match node_json(
        &fed,
        &conn,
        reqwest::Method::POST,
        parts.uri.path(),
        Some(v),
    )
    .await
    {
        Ok((s, mut out)) => {
            if out.is_object() {
                out["connection_id"] = json!(conn.id);
            }
            (
                StatusCode::from_u16(s).unwrap_or(StatusCode::BAD_GATEWAY),
                Json(out),
            )
                .into_response()
        }
        Err(e) => unavailable(&conn.id, &e),
    }
}

/// `GET /metrics`: the hub's own exposition, the hub's federation gauges (connection up,
/// mirrored sessions, outbox depth per connection) and every reachable node's samples with a
/// `connection` label, one family block per metric name.
async fn metrics(fed: Arc<Federation>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    if !resp.status().is_success() {
        return resp;
    }
    let local = resp
        .into_body()
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    let mut families = Families::default();
    families.add(&local, None);
    families.add(&federation_text(&fed), None);
    let conns = fed.all();
    let fetches = conns.iter().map(|c| {
        let fed = fed.clone();
        let c = c.clone();
        async move {
            if !c.snapshot().up {
                return (c, None);
            }
            let r = fed
                .http
                .get(format!("{}/metrics", c.url))
                .header(reqwest::header::COOKIE, c.cookie())
                .timeout(NODE_TIMEOUT)
                .send()
                .await;
            let text = match r {
                Ok(r) if r.status().is_success() => r.text().await.ok(),
                _ => None,
            };
            (c, text)
        }
    });
    for (c, text) in futures::future::join_all(fetches).await {
        if let Some(t) = text {
            families.add(&t, Some(&c.id));
        }
    }
    (
        [(header::CONTENT_TYPE, tuic_node::ops::metrics::CONTENT_TYPE)],
        families.render(),
    )
        .into_response()
}

fn federation_text(fed: &Federation) -> String {
    use prometheus::{Encoder, IntGaugeVec, Opts, Registry, TextEncoder};
    let r = Registry::new();
    let vec = |name: &str, help: &str| {
        let g = IntGaugeVec::new(Opts::new(name, help), &["connection"]).expect("static metric");
        let _ = r.register(Box::new(g.clone()));
        g
    };
    let up = vec(
        "tuic_hub_connection_up",
        "Whether the hub's connection to a node is up (1) or down (0).",
    );
    let peer = vec(
        "tuic_hub_peer_link_up",
        "Whether the connection's peer link (cross-host mail) is up.",
    );
    let sessions = vec(
        "tuic_hub_connection_sessions",
        "Sessions mirrored from a node.",
    );
    let held = vec(
        "tuic_hub_outbox_held_messages",
        "Mail the hub holds for a node until it acknowledges, per connection.",
    );
    for c in fed.all() {
        let s = c.snapshot();
        up.with_label_values(&[&c.id]).set(i64::from(s.up));
        peer.with_label_values(&[&c.id]).set(i64::from(s.peer_up));
        sessions
            .with_label_values(&[&c.id])
            .set(s.sessions.len() as i64);
        held.with_label_values(&[&c.id])
            .set(fed.mail.held(&c.id) as i64);
    }
    let mut buf = Vec::new();
    let _ = TextEncoder::new().encode(&r.gather(), &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// Text-format families gathered from several expositions: each metric's `# HELP`/`# TYPE`
/// once, then every source's samples, a node's with its `connection` label added.
#[derive(Default)]
struct Families {
    order: Vec<String>,
    heads: std::collections::HashMap<String, Vec<String>>,
    samples: std::collections::HashMap<String, Vec<String>>,
}

impl Families {
    fn add(&mut self, text: &str, conn: Option<&str>) {
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(rest) = line
                .strip_prefix("# HELP ")
                .or_else(|| line.strip_prefix("# TYPE "))
            {
                let name = rest.split_whitespace().next().unwrap_or("").to_owned();
                if !self.heads.contains_key(&name) {
                    self.order.push(name.clone());
                    self.heads.insert(name.clone(), Vec::new());
                }
                let h = self.heads.get_mut(&name).expect("inserted");
                let kind = &line[..6];
                if !h.iter().any(|l| l.starts_with(kind)) {
                    h.push(line.to_owned());
                }
                current = Some(name);
                continue;
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some(fam) = current.clone() else { continue };
            let sample = match conn {
                None => line.to_owned(),
                Some(c) => with_label(line, c),
            };
            self.samples.entry(fam).or_default().push(sample);
        }
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for name in &self.order {
            for h in &self.heads[name] {
                out.push_str(h);
                out.push('\n');
            }
            for s in self.samples.get(name).into_iter().flatten() {
                out.push_str(s);
                out.push('\n');
            }
        }
        out
    }
}

/// `name{a="b"} v` → `name{connection="c",a="b"} v`; `name v` → `name{connection="c"} v`.
fn with_label(line: &str, conn: &str) -> String {
    let label = format!("connection=\"{conn}\"");
    match line.find(['{', ' ']) {
        Some(i) if line.as_bytes()[i] == b'{' => {
            let rest = &line[i + 1..];
            let sep = if rest.starts_with('}') { "" } else { "," };
            format!("{}{{{label}{sep}{rest}", &line[..i])
        }
        Some(i) => format!("{}{{{label}}}{}", &line[..i], &line[i..]),
        None => line.to_owned(),
    }
}

/// Relays a node's `progress-recorded` events onto the hub's bus, the connection named, so
/// a hub subscriber sees a `blocked` entry as soon as the node journals it. Runs until the
/// connection is removed; reconnects with the hub's backoff.
pub async fn relay_progress(fed: Arc<Federation>, conn: Arc<Conn>) {
    let mut backoff = crate::peerlink::reconnect_backoff(&fed.node);
    loop {
        let ran = tokio::select! {
            _ = conn.stop.cancelled() => return,
            r = relay_once(&fed, &conn) => r,
        };
        if ran {
            backoff = crate::peerlink::reconnect_backoff(&fed.node);
        }
        let delay = backoff.next().unwrap_or(Duration::from_secs(30));
        tokio::select! {
            _ = conn.stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// One subscription; whether it got as far as streaming.
async fn relay_once(fed: &Federation, conn: &Conn) -> bool {
    let r = fed
        .http
        .get(format!("{}/events?types=progress-recorded", conn.url))
        .header(reqwest::header::COOKIE, conn.cookie())
        .send()
        .await;
    let resp = match r {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => {
            tracing::debug!(conn = %conn.id, status = %r.status(), "progress relay refused");
            return false;
        }
        Err(e) => {
            tracing::debug!(conn = %conn.id, error = %describe(&e), "progress relay failed");
            return false;
        }
    };
    let mut dec = tuic_proto::sse::SseDecoder::new(1 << 20);
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let Ok(b) = chunk else { break };
        if dec.feed(&b).is_err() {
            break;
        }
        while let Some(ev) = dec.poll_event() {
            if ev.event != "progress-recorded" {
                continue;
            }
            let Ok(mut v) = serde_json::from_str::<Value>(&ev.data) else {
                continue;
            };
            if v.is_object() {
                v["host"] = json!(conn.id);
                v["connection_id"] = json!(conn.id);
                fed.node.bus.publish(Event::ProgressRecorded(v));
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_added_to_every_sample_form() {
        assert_eq!(
            with_label("tuic_sessions 3", "b"),
            "tuic_sessions{connection=\"b\"} 3"
        );
        assert_eq!(
            with_label("h_bucket{le=\"0.1\"} 1", "b"),
            "h_bucket{connection=\"b\",le=\"0.1\"} 1"
        );
        assert_eq!(with_label("x{} 1", "b"), "x{connection=\"b\"} 1");
    }

    #[test]
    fn families_merge_once_per_name() {
        let a = "# HELP m help\n# TYPE m gauge\nm 1\n";
        let mut f = Families::default();
        f.add(a, None);
        f.add(a, Some("b"));
        assert_eq!(
            f.render(),
            "# HELP m help\n# TYPE m gauge\nm 1\nm{connection=\"b\"} 1\n"
        );
    }

    #[test]
    fn cursors_round_trip() {
        let p: Positions = vec![
            ("local".into(), Some(Some(12))),
            ("b".into(), Some(None)),
            ("c".into(), None),
        ];
        let s = encode_cursor(&p);
        assert_eq!(s, "local:12,b:end,c:");
        assert_eq!(parse_cursor(Some(&json!(s))).unwrap(), p);
        assert!(parse_cursor(Some(&json!("local:x"))).is_err());
        assert!(parse_cursor(Some(&json!(5))).is_err());
    }
}
