//! `session action=list`: this node's rows, then other hosts' rows from the extension's
//! `ext::SessionSource`, rendered straight from the ready rows — the whole list or one page
//! of it, with the paging of `GET /sessions` (`routes/sessions_list.rs`): `limit` rows
//! (1..=10,000) after `cursor`, the key (`session_id` of a local row, `address` of another
//! host's) of the previous page's last row, answered as `next_cursor` while more follow; a
//! cursor whose row has left the list is `cursor_gone` (start again from the first page).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::args;
use crate::mcp::registry::{CallCtx, ToolError};
use crate::state::Node;

/// The most rows one page may ask for (as `GET /sessions`).
const PAGE_MAX: u64 = 10_000;

/// `list`'s arguments.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListArgs {
    /// Rows per page (1..=10,000); absent: the whole list.
    #[serde(default, deserialize_with = "args::uint")]
    limit: Option<u64>,
    /// The `next_cursor` of the previous page.
    #[serde(default, deserialize_with = "args::string")]
    cursor: Option<String>,
}

/// The list served after a hub's router saw the call (an address in `session_id`).
pub(super) fn list(node: &Arc<Node>, ctx: &CallCtx, a: &ListArgs) -> Result<Value, ToolError> {
    Ok(crate::mcp::registry::Answer::Json(list_json(node, ctx, a)?).into_value())
}

/// `session action=list` rendered straight from the ready rows: each row is serialized once
/// from its struct (no `Value` per row), then other hosts' rows, if any.
pub(super) fn list_rendered(
    node: &Arc<Node>,
    ctx: &CallCtx,
    args: &Map<String, Value>,
) -> Option<Result<String, ToolError>> {
    // An address of another host in session_id goes through the router like every action
    // (`serve`, which may wait for the owner); the plain list is a read of ready rows.
    if node.ext.session_address(args).is_some() {
        return None;
    }
    let a = match page_args(args) {
        Ok(a) => a,
        Err(e) => return Some(Err(e)),
    };
    Some(list_json(node, ctx, &a))
}

/// The paging fields of `args` (the other fields are the action's or ignored, as typed
/// parsing does).
fn page_args(args: &Map<String, Value>) -> Result<ListArgs, ToolError> {
    let mut m = Map::new();
    for k in ["limit", "cursor"] {
        if let Some(v) = args.get(k) {
            m.insert(k.to_owned(), v.clone());
        }
    }
    serde_json::from_value(Value::Object(m)).map_err(|e| ToolError::invalid(e.to_string()))
}

fn list_json(node: &Arc<Node>, ctx: &CallCtx, a: &ListArgs) -> Result<String, ToolError> {
    #[derive(serde::Serialize)]
    struct Row<'a> {
        #[serde(flatten)]
        row: &'a crate::session::SessionRow,
        is_caller: bool,
    }
    if let Some(l) = a.limit
        && !(1..=PAGE_MAX).contains(&l)
    {
        return Err(ToolError::invalid(format!(
            "limit must be between 1 and {PAGE_MAX} (got {l})"
        )));
    }
    let local = node.sessions.rows();
    // Extension hook (`ext::SessionSource`): other hosts' rows with their addresses.
    let remote = node.ext.remote_rows();
    let total = local.len() + remote.len();
    let key = |i: usize| -> String {
        match local.get(i) {
            Some(r) => r.session_id.clone(),
            None => remote[i - local.len()].address(),
        }
    };
    let start = match &a.cursor {
        None => 0,
        Some(c) => (0..total)
            .find(|&i| key(i) == *c)
            .map(|i| i + 1)
            .ok_or_else(|| {
                ToolError::new(
                    "cursor_gone",
                    format!(
                        "the row {c} the cursor names has left the list: list again from the first page"
                    ),
                )
                .with("cursor", json!(c))
            })?,
    };
    let end = a.limit.map_or(total, |l| {
        start
            .saturating_add(usize::try_from(l).unwrap_or(usize::MAX))
            .min(total)
    });
    let caller = ctx.tuic_session.as_deref();
    let mut out = Vec::with_capacity(256 + (end - start) * 320);
    out.extend_from_slice(b"{\"count\":");
    out.extend_from_slice(total.to_string().as_bytes());
    if end < total {
        out.extend_from_slice(b",\"next_cursor\":");
        let _ = serde_json::to_writer(&mut out, &key(end - 1));
    }
    out.extend_from_slice(b",\"sessions\":[");
    let nl = local.len();
    let mut first = true;
    for r in &local[start.min(nl)..end.min(nl)] {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        let row = Row {
            row: r,
            is_caller: caller == Some(r.tuic_session.as_str()),
        };
        // Writing into a Vec cannot fail; the rows always serialize.
        let _ = serde_json::to_writer(&mut out, &row);
    }
    for v in &remote[start.saturating_sub(nl)..end.saturating_sub(nl)] {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut out, v);
    }
    out.extend_from_slice(b"]}");
    // serde_json output and ASCII framing are UTF-8.
    Ok(String::from_utf8(out).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::CreateRequest;

    fn rendered(n: &Arc<Node>, ctx: &CallCtx, args: Value) -> Result<Value, ToolError> {
        let Value::Object(m) = args else {
            unreachable!()
        };
        list_rendered(n, ctx, &m)
            .unwrap()
            .map(|s| serde_json::from_str(&s).unwrap())
    }

    /// The rendered list is the rows as values with `is_caller`, and counts them.
    #[test]
    fn rendered_list_equals_the_rows_as_values() {
        let f = crate::mcp::tool_tests::fixture();
        let (dir, n) = (&f.dir, &f.node);
        let made: Vec<_> = (0..3)
            .map(|i| {
                n.sessions
                    .create(CreateRequest {
                        shell: Some("/bin/sh".into()),
                        cwd: Some(dir.path().display().to_string()),
                        name: Some(format!("row \"{i}\" \\ ✓")),
                        ..CreateRequest::default()
                    })
                    .unwrap()
            })
            .collect();
        let ctx = CallCtx {
            tuic_session: Some(made[1].tuic_session.clone()),
            ..CallCtx::default()
        };
        // Fresh shells change state while they start (prompt, foreground process): compare
        // reads taken while the rows stood still (the same rows before and after), bounded.
        let as_values = || -> Vec<Value> {
            n.sessions
                .rows()
                .into_iter()
                .map(|r| {
                    let mut v = json!(r);
                    v["is_caller"] = json!(r.tuic_session == made[1].tuic_session);
                    v
                })
                .collect()
        };
        let mut tries = 0;
        let (got, want, listed) = loop {
            let before = as_values();
            let got = rendered(n, &ctx, json!({})).unwrap();
            let listed = list(n, &ctx, &ListArgs::default()).unwrap();
            let want = as_values();
            tries += 1;
            if before == want || tries == 1_000 {
                break (got, want, listed);
            }
            std::thread::yield_now();
        };
        assert_eq!(got, json!({"count": 3, "sessions": want}));
        assert_eq!(listed, got);
        for s in made {
            s.kill();
        }
    }

    /// Pages of `limit` rows follow each other by `next_cursor` and cover the list once; a
    /// cursor whose row is gone and a bad limit are refused with their codes.
    #[test]
    fn pages_follow_the_cursor_and_a_gone_cursor_is_refused() {
        let f = crate::mcp::tool_tests::fixture();
        let (dir, n) = (&f.dir, &f.node);
        let made: Vec<_> = (0..5)
            .map(|_| {
                n.sessions
                    .create(CreateRequest {
                        shell: Some("/bin/sh".into()),
                        cwd: Some(dir.path().display().to_string()),
                        ..CreateRequest::default()
                    })
                    .unwrap()
            })
            .collect();
        let ctx = CallCtx::default();
        let ids = |v: &Value| -> Vec<String> {
            v["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["session_id"].as_str().unwrap().to_owned())
                .collect()
        };
        let whole = ids(&rendered(n, &ctx, json!({})).unwrap());
        assert_eq!(whole.len(), 5);
        let mut paged = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let mut args = json!({"action": "list", "limit": 2});
            if let Some(c) = &cursor {
                args["cursor"] = json!(c);
            }
            let page = rendered(n, &ctx, args).unwrap();
            assert_eq!(page["count"], 5, "{page}");
            let got = ids(&page);
            assert!(got.len() <= 2);
            paged.extend(got);
            pages += 1;
            match page["next_cursor"].as_str() {
                Some(c) => {
                    assert_eq!(c, paged.last().unwrap(), "the cursor is the last row's key");
                    cursor = Some(c.to_owned());
                }
                None => break,
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(paged, whole, "the pages are the list, once, in order");

        // A cursor naming no row of the list (its row left) is refused, not guessed.
        let e = rendered(n, &ctx, json!({"limit": 2, "cursor": "no-such-row"})).unwrap_err();
        assert_eq!(e.code, "cursor_gone", "{e:?}");
        for bad in [
            json!({"limit": 0}),
            json!({"limit": 10_001}),
            json!({"limit": "x"}),
        ] {
            let e = rendered(n, &ctx, bad.clone()).unwrap_err();
            assert_eq!(e.code, "invalid_arguments", "{bad}: {e:?}");
        }
        for s in made {
            s.kill();
        }
    }
}
