//! `ui action=tab` (spec "ui tool — tab URL schemes"): `tuic://open/<abs path>` (a file view:
//! markdown rendered, code highlighted), `tuic://edit/<abs path>` (an editor that saves through
//! the root-gated `POST /fs/write-external`) and `http(s)` URLs open a tab in every attached
//! UI of this host, as one `mcp-tab` event. Other `tuic://` actions are refused
//! (`tuic://open-repo` names `repo action=add`), as are custom schemes and paths outside the
//! registered repositories (the same gate as the file routes).
//!
//! Scope (spec): a focused file tab switches the UI to the registered repository that owns the
//! path (`switch_repo`); `focus=false` never changes the visible repository. URL tabs take the
//! caller's registered repository as their scope.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use tuic_proto::events::Event;

use crate::args;
use crate::mcp::registry::ToolError;
use crate::state::Node;

/// What a tab URL asks for.
#[derive(Debug, PartialEq, Eq)]
enum Tab {
    File(String),
    Edit(String),
    Url(String),
}

fn parse(url: &str) -> Result<Tab, ToolError> {
    let lower = url.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("tuic://") {
        let action = rest.split(['/', '?', '#']).next().unwrap_or("");
        let raw_rest = &url["tuic://".len() + action.len()..];
        let path = || -> Result<String, ToolError> {
            let decoded = percent_encoding::percent_decode_str(raw_rest)
                .decode_utf8()
                .map_err(|_| ToolError::invalid("ui tab: the path is not valid UTF-8"))?;
            // `tuic://open//abs` and `tuic://open/abs` both name `/abs`.
            let p = format!("/{}", decoded.trim_start_matches('/'));
            if decoded.is_empty() || p == "/" {
                return Err(ToolError::invalid(format!(
                    "ui tab: tuic://{action}/<absolute path> needs a path"
                )));
            }
            Ok(p)
        };
        return match action {
            "open" => Ok(Tab::File(path()?)),
            "edit" => Ok(Tab::Edit(path()?)),
            "open-repo" => Err(ToolError::new(
                "unsupported_scheme",
                "ui tab accepts tuic://open and tuic://edit only; use repo action=add for tuic://open-repo intent",
            )),
            other => Err(ToolError::new(
                "unsupported_scheme",
                format!(
                    "ui tab: tuic://{other} is not a tab action; tuic://open/<path> and tuic://edit/<path> are"
                ),
            )),
        };
    }
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Ok(Tab::Url(url.to_owned()));
    }
    Err(ToolError::new(
        "unsupported_scheme",
        format!(
            "ui tab: {url} is not http(s), tuic://open or tuic://edit; custom URL schemes do not work inside tabs"
        ),
    ))
}

/// The registered root that holds `path`, checked like every file route (absolute, no `..`,
/// inside a root, resolved beneath it).
fn gate(roots: &[PathBuf], path: &str) -> Result<PathBuf, ToolError> {
    let forbidden = |e: crate::error::ApiError| ToolError::new("outside_roots", e.to_string());
    crate::beneath::locate(path, roots, crate::beneath::Dots::Refuse).map_err(forbidden)?;
    let p = std::path::Path::new(path);
    let (root, _) = crate::beneath::root_of(p, roots).map_err(forbidden)?;
    Ok(root)
}

/// The typed arguments of `ui action=tab` (`crate::args`).
#[derive(Debug, Deserialize)]
pub(super) struct TabArgs {
    #[serde(default, deserialize_with = "args::string")]
    url: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    title: Option<String>,
    #[serde(default, deserialize_with = "args::boolean")]
    focus: Option<bool>,
    #[serde(default, deserialize_with = "args::string")]
    id: Option<String>,
}

/// `ui action=tab`.
pub(super) fn tab(
    node: &Arc<Node>,
    args: TabArgs,
    origin_repo: Option<String>,
    origin_session: Option<String>,
) -> Result<Value, ToolError> {
    let url = args
        .url
        .filter(|u| !u.is_empty())
        .ok_or_else(|| ToolError::invalid("ui: url is required"))?;
    let url = url.as_str();
    let focus = args.focus.unwrap_or(true);
    let tab_id = args
        .id
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let roots = node.repos.roots();
    let caller_repo = origin_repo.as_deref().and_then(|o| {
        roots
            .iter()
            .filter(|r| std::path::Path::new(o).starts_with(r))
            .max_by_key(|r| r.as_os_str().len())
            .map(|r| r.to_string_lossy().into_owned())
    });
    let (kind, path, repo) = match parse(url)? {
        Tab::File(p) | Tab::Edit(p) if p.contains('\0') => {
            return Err(ToolError::invalid("ui tab: the path contains a NUL byte"));
        }
        Tab::File(p) => {
            let root = gate(&roots, &p)?;
            if !std::path::Path::new(&p).is_file() {
                return Err(ToolError::new(
                    "not_found",
                    format!("ui tab: {p} is not a file"),
                ));
            }
            ("file", Some(p), Some(root.to_string_lossy().into_owned()))
        }
        Tab::Edit(p) => {
            let root = gate(&roots, &p)?;
            ("edit", Some(p), Some(root.to_string_lossy().into_owned()))
        }
        Tab::Url(_) => ("url", None, caller_repo.clone()),
    };
    let title = args
        .title
        .or_else(|| {
            path.as_deref()
                .and_then(|p| std::path::Path::new(p).file_name())
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| url.to_owned());
    // A focused file tab switches to the repository owning the path; background never does.
    let switch_repo = (focus && kind != "url")
        .then(|| repo.clone())
        .flatten()
        .or_else(|| {
            (focus && kind == "url")
                .then(|| caller_repo.clone())
                .flatten()
        });
    let mut ev = json!({
        "tab_id": tab_id, "kind": kind, "url": url, "title": title,
        "focus": focus,
    });
    if let Some(p) = &path {
        ev["path"] = json!(p);
    }
    if let Some(r) = &repo {
        ev["repo_path"] = json!(r);
    }
    if let Some(r) = &switch_repo {
        ev["switch_repo"] = json!(r);
    }
    if let Some(s) = &origin_session {
        ev["origin_session_id"] = json!(s);
    }
    node.bus.publish(Event::McpTab(ev.clone()));
    ev["ok"] = json!(true);
    Ok(ev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        assert_eq!(
            parse("tuic://open/tmp/a.md").unwrap(),
            Tab::File("/tmp/a.md".into())
        );
        assert_eq!(
            parse("tuic://open//tmp/a%20b.md").unwrap(),
            Tab::File("/tmp/a b.md".into())
        );
        assert_eq!(
            parse("tuic://edit/tmp/x.rs").unwrap(),
            Tab::Edit("/tmp/x.rs".into())
        );
        assert_eq!(
            parse("https://example.com/x").unwrap(),
            Tab::Url("https://example.com/x".into())
        );
        let e = parse("tuic://open-repo/tmp/r").unwrap_err();
        assert!(e.message.contains("repo action=add"), "{e:?}");
        assert!(
            parse("tuic://other/x")
                .unwrap_err()
                .message
                .contains("tuic://other")
        );
        assert!(parse("vscode://file/x").is_err());
        assert!(parse("tuic://open").is_err());
    }
}
