//! `POST /progress/list` merged newest first over the hub and every connection, paged with
//! one cursor that holds each source's position.

use super::*;

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
pub(super) async fn progress_list(fed: Arc<Federation>, req: Request, next: Next) -> Response {
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

#[cfg(test)]
mod tests {
    use super::*;

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
