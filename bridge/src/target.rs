//! Which session a `TARGET` names, over the rows `GET /sessions` lists (a hub's list holds
//! every connected host's rows). Pure: no IO.
//!
//! A target matches a row by any of its names: PTY id, alias (`tu-3`), `TUIC_SESSION` id,
//! display name, and for a remote row the same names under its host (`boxb/tu-3`,
//! `boxb/<id>`, the row's `address`). An exact match wins; otherwise a unique prefix of a
//! name. Among the rows a bare name matches, this node's own win, as a relative path names
//! the file here: on a hub `tu-3` is the hub's tu-3 and boxb's needs `boxb/tu-3` (a bare
//! name still finds a remote row when no local one matches). Several rows matching is an
//! error listing them, as is no row at all.

use serde_json::Value;

/// One session a target resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The id every session route takes: the PTY id on this node, `host/id` for a remote row.
    pub route_id: String,
    /// A short label for messages: `host/alias` or `alias`.
    pub label: String,
    /// The host: a connection id, or `local`.
    pub host: String,
}

/// Why a target named no single session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// No row matches; the labels of every listed session.
    Unknown { candidates: Vec<String> },
    /// Several rows match; their labels.
    Ambiguous { candidates: Vec<String> },
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |c: &[String]| {
            if c.is_empty() {
                "(no sessions)".to_owned()
            } else {
                c.join(", ")
            }
        };
        match self {
            Miss::Unknown { candidates } => {
                write!(f, "no such session; sessions: {}", list(candidates))
            }
            Miss::Ambiguous { candidates } => {
                write!(f, "ambiguous; it matches: {}", list(candidates))
            }
        }
    }
}

fn text<'a>(row: &'a Value, k: &str) -> Option<&'a str> {
    row.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The host a row belongs to (`local` for this node's own).
pub fn host_of(row: &Value) -> String {
    text(row, "connection_id").unwrap_or("local").to_owned()
}

/// A row's label: `host/alias` for remote rows, the alias for local ones.
pub fn label_of(row: &Value) -> String {
    let name = text(row, "alias")
        .or_else(|| text(row, "session_id"))
        .unwrap_or("?");
    match text(row, "connection_id") {
        Some(h) => format!("{h}/{name}"),
        None => name.to_owned(),
    }
}

/// Every name a row answers to.
fn names(row: &Value) -> Vec<String> {
    let own: Vec<&str> = ["session_id", "alias", "tuic_session", "display_name"]
        .iter()
        .filter_map(|k| text(row, k))
        .collect();
    match text(row, "connection_id") {
        Some(h) => {
            let mut v: Vec<String> = own.iter().map(|n| format!("{h}/{n}")).collect();
            v.extend(text(row, "address").map(str::to_owned));
            // The bare names too: `tu-3` finds boxb's tu-3 when no other host has one.
            v.extend(own.iter().map(|n| (*n).to_owned()));
            v
        }
        None => {
            let mut v: Vec<String> = own.iter().map(|n| (*n).to_owned()).collect();
            v.extend(own.iter().map(|n| format!("local/{n}")));
            v
        }
    }
}

fn resolved(row: &Value) -> Resolved {
    let route_id = text(row, "address")
        .filter(|_| text(row, "connection_id").is_some())
        .or_else(|| text(row, "session_id"))
        .unwrap_or_default()
        .to_owned();
    Resolved {
        route_id,
        label: label_of(row),
        host: host_of(row),
    }
}

/// This node's rows among `rs` when there are any, else `rs`.
fn local_first(rs: Vec<&Value>) -> Vec<&Value> {
    let local: Vec<&Value> = rs
        .iter()
        .copied()
        .filter(|r| text(r, "connection_id").is_none())
        .collect();
    if local.is_empty() { rs } else { local }
}

/// Resolves `target` over `rows`.
pub fn resolve(rows: &[Value], target: &str) -> Result<Resolved, Miss> {
    let pick = |hit: &dyn Fn(&str) -> bool| -> Vec<&Value> {
        rows.iter()
            .filter(|r| names(r).iter().any(|n| hit(n)))
            .collect()
    };
    let labels = |rs: &[&Value]| rs.iter().map(|r| label_of(r)).collect::<Vec<_>>();
    let exact = local_first(pick(&|n| n == target));
    let found = if exact.is_empty() {
        local_first(pick(&|n| n.starts_with(target)))
    } else {
        exact
    };
    match found.as_slice() {
        [one] => Ok(resolved(one)),
        [] => Err(Miss::Unknown {
            candidates: labels(&rows.iter().collect::<Vec<_>>()),
        }),
        many => Err(Miss::Ambiguous {
            candidates: labels(many),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rows() -> Vec<Value> {
        vec![
            json!({"session_id": "a1b2", "alias": "tu-1", "tuic_session": "u-1", "display_name": "build"}),
            json!({"session_id": "c3d4", "alias": "tu-2", "tuic_session": "u-2"}),
            json!({"session_id": "e5f6", "alias": "tu-1", "connection_id": "boxb",
                   "address": "boxb/e5f6", "is_remote": true}),
            json!({"session_id": "a9z9", "alias": "tu-7", "connection_id": "boxb",
                   "address": "boxb/a9z9", "is_remote": true}),
        ]
    }

    #[test]
    fn exact_names_and_host_qualified_aliases() {
        let r = rows();
        let got = |t: &str| resolve(&r, t).map(|x| x.route_id);
        assert_eq!(got("boxb/tu-1"), Ok("boxb/e5f6".into()));
        assert_eq!(got("local/tu-1"), Ok("a1b2".into()));
        assert_eq!(got("tu-2"), Ok("c3d4".into()));
        assert_eq!(got("build"), Ok("a1b2".into()));
        assert_eq!(got("u-2"), Ok("c3d4".into()));
        assert_eq!(got("tu-7"), Ok("boxb/a9z9".into()));
        assert_eq!(got("boxb/e5f6"), Ok("boxb/e5f6".into()));
        assert_eq!(resolve(&r, "boxb/tu-1").unwrap().host, "boxb");
        assert_eq!(resolve(&r, "boxb/tu-1").unwrap().label, "boxb/tu-1");
    }

    #[test]
    fn a_local_alias_wins_over_a_remote_one_and_the_remote_needs_its_host() {
        let r = rows();
        // `tu-1` is both this hub's and boxb's: the local one, as a relative path is.
        assert_eq!(resolve(&r, "tu-1").unwrap().route_id, "a1b2");
        assert_eq!(resolve(&r, "boxb/tu-1").unwrap().route_id, "boxb/e5f6");
        // A prefix too: `a` starts local a1b2 and boxb's a9z9.
        assert_eq!(resolve(&r, "a").unwrap().route_id, "a1b2");
        // Two remote hosts with one alias and no local one stay ambiguous.
        let mut two = r.clone();
        two.push(
            json!({"session_id": "q1", "alias": "tu-7", "connection_id": "boxc",
                        "address": "boxc/q1", "is_remote": true}),
        );
        assert_eq!(
            resolve(&two, "tu-7"),
            Err(Miss::Ambiguous {
                candidates: vec!["boxb/tu-7".into(), "boxc/tu-7".into()]
            })
        );
    }

    #[test]
    fn unique_prefixes_resolve_and_shared_ones_list_candidates() {
        let r = rows();
        assert_eq!(resolve(&r, "c3").unwrap().route_id, "c3d4");
        assert_eq!(resolve(&r, "boxb/a9").unwrap().route_id, "boxb/a9z9");
        assert_eq!(
            resolve(&r, "tu-"),
            Err(Miss::Ambiguous {
                candidates: vec!["tu-1".into(), "tu-2".into()]
            })
        );
        assert_eq!(
            resolve(&r, "boxb/"),
            Err(Miss::Ambiguous {
                candidates: vec!["boxb/tu-1".into(), "boxb/tu-7".into()]
            })
        );
        let miss = resolve(&r, "nope").unwrap_err();
        assert_eq!(
            miss.to_string(),
            "no such session; sessions: tu-1, tu-2, boxb/tu-1, boxb/tu-7"
        );
    }
}
