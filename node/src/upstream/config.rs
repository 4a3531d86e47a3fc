//! `mcp-upstreams.json`: the upstream MCP servers a node proxies, their validation, the tool
//! filters, and the `{base, config}` save that applies only the caller's delta to the latest
//! file under the config lock (the `PUT /mcp/upstreams` contract).
//!
//! The file is the user's and has the shape the upstream project documents
//! (`{"servers": [{id, name, transport, enabled, timeout_secs, tool_filter, auth?}]}`), so a
//! user can bring theirs; keys this version does not know are kept. Secrets never stay in the
//! file: a bearer `auth.token` in a save moves to the vault, bound to the server's origin, and
//! the file keeps `auth: {"type": "bearer"}`. Locking and atomic publication are
//! [`crate::config::ConfigFile`]'s; this module owns only what is specific to upstreams.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::config::{self, ConfigFile, SaveError};

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct UpstreamsFile {
    /// The servers, in the user's order (listing order follows it).
    #[serde(default)]
    pub servers: Vec<ServerDef>,
    /// Keys this version does not know, kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One upstream server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerDef {
    /// Stable identity: saves are indexed by it, credentials are stored under it.
    pub id: String,
    /// The namespace prefix of its tools (`{name}__{tool}`): `[a-z0-9_-]+`, no `__`.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// A disabled server is kept in the file and in the status, but not started.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Deadline of one proxied `tools/call` (60 s).
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Which of its tools are listed and callable.
    #[serde(default, skip_serializing_if = "ToolFilter::is_empty")]
    pub tool_filter: ToolFilter,
    /// Authentication metadata (`{"type": "bearer"}` or `{"type": "oauth2", ...}`); the secret
    /// itself lives in the vault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Value>,
    /// Keys this version does not know, kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn yes() -> bool {
    true
}

fn default_timeout() -> u64 {
    60
}

/// The transport of a server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Transport {
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout.
    Stdio {
        /// The program (`~` expanded).
        command: String,
        /// Its arguments (`~` expanded).
        #[serde(default)]
        args: Vec<String>,
        /// Extra environment.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
        /// Working directory (`~` expanded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
    },
    /// MCP Streamable HTTP at `url`.
    Http {
        /// The MCP endpoint.
        url: String,
        /// Which protocol era to speak: `auto` (default), `legacy` or `modern`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        protocol: Option<String>,
    },
}

/// Allow and deny globs (`*`, `?`) over the upstream's own tool names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ToolFilter {
    /// When present, only matching tools are exposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Matching tools are never exposed (applied after `allow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<Vec<String>>,
}

impl ToolFilter {
    /// No filter at all.
    pub fn is_empty(&self) -> bool {
        self.allow.is_none() && self.deny.is_none()
    }

    /// Whether the upstream tool `tool` is exposed. Applied at listing *and* at dispatch.
    pub fn allows(&self, tool: &str) -> bool {
        if let Some(allow) = &self.allow
            && !allow.iter().any(|p| glob_match(p, tool))
        {
            return false;
        }
        !self
            .deny
            .as_ref()
            .is_some_and(|d| d.iter().any(|p| glob_match(p, tool)))
    }
}

/// Glob match: `*` is any run of characters, `?` one character, everything else literal.
pub fn glob_match(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = s.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // The last `*` seen and the text position it was tried at, for backtracking.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The separator between an upstream's name and its tool in a proxied tool name.
pub const SEPARATOR: &str = "__";

/// Splits `{name}__{tool}` at the first separator (names never contain it).
pub fn split_name(qualified: &str) -> Option<(&str, &str)> {
    qualified
        .split_once(SEPARATOR)
        .filter(|(n, t)| !n.is_empty() && !t.is_empty())
}

/// The scheme-host-port origin of an HTTP(S) URL, lowercased; `None` when it is not one.
pub fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next()?;
    // Userinfo is not part of the origin (and never a place for credentials here).
    let host_port = authority.rsplit('@').next()?.to_ascii_lowercase();
    if host_port.is_empty() {
        return None;
    }
    let default = if scheme == "http" { ":80" } else { ":443" };
    let host_port = host_port
        .strip_suffix(default)
        .map(str::to_owned)
        .unwrap_or(host_port);
    Some(format!("{scheme}://{host_port}"))
}

impl UpstreamsFile {
    /// Checks every server; the message names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        let mut ids = HashMap::new();
        let mut names = HashMap::new();
        for (i, s) in self.servers.iter().enumerate() {
            let at = |f: &str| format!("servers[{i}].{f}");
            if s.id.trim().is_empty() {
                return Err(format!("{}: must not be empty", at("id")));
            }
            if let Some(j) = ids.insert(s.id.as_str(), i) {
                return Err(format!("{}: {:?} is also servers[{j}].id", at("id"), s.id));
            }
            let name_ok = !s.name.is_empty()
                && s.name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                })
                && !s.name.contains(SEPARATOR);
            if !name_ok {
                return Err(format!(
                    "{}: {:?} must match [a-z0-9_-]+ without \"__\" (it prefixes the tool names)",
                    at("name"),
                    s.name
                ));
            }
            if let Some(j) = names.insert(s.name.as_str(), i) {
                return Err(format!(
                    "{}: {:?} is also servers[{j}].name",
                    at("name"),
                    s.name
                ));
            }
            if !(1..=3600).contains(&s.timeout_secs) {
                return Err(format!("{}: must be 1..=3600", at("timeout_secs")));
            }
            match &s.transport {
                Transport::Stdio { command, .. } if command.trim().is_empty() => {
                    return Err(format!("{}: must not be empty", at("transport.command")));
                }
                Transport::Http {
                    protocol: Some(p), ..
                } if !matches!(p.as_str(), "auto" | "legacy" | "modern") => {
                    return Err(format!(
                        "{}: {p:?} must be \"auto\", \"legacy\" or \"modern\"",
                        at("transport.protocol")
                    ));
                }
                Transport::Http { url, .. } if origin_of(url).is_none() => {
                    return Err(format!(
                        "{}: {url:?} is not an http(s) URL",
                        at("transport.url")
                    ));
                }
                Transport::Http { url, .. } if url.contains('@') => {
                    return Err(format!(
                        "{}: credentials do not belong in the URL; use auth",
                        at("transport.url")
                    ));
                }
                _ => {}
            }
            if let Some(a) = &s.auth {
                let kind = a.get("type").and_then(Value::as_str);
                if !matches!(kind, Some("bearer" | "oauth2")) {
                    return Err(format!(
                        "{}: must be \"bearer\" or \"oauth2\"",
                        at("auth.type")
                    ));
                }
                if !matches!(s.transport, Transport::Http { .. }) {
                    return Err(format!("{}: only http upstreams authenticate", at("auth")));
                }
            }
            for (list, f) in [
                (&s.tool_filter.allow, "allow"),
                (&s.tool_filter.deny, "deny"),
            ] {
                if list
                    .as_ref()
                    .is_some_and(|l| l.iter().any(String::is_empty))
                {
                    return Err(format!(
                        "{}: empty pattern",
                        at(&format!("tool_filter.{f}"))
                    ));
                }
            }
        }
        Ok(())
    }

    /// The server with id `id`.
    pub fn get(&self, id: &str) -> Option<&ServerDef> {
        self.servers.iter().find(|s| s.id == id)
    }
}

/// Errors of an upstream config save.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamSaveError {
    /// The request or the merged result is not a valid upstream config.
    #[error("invalid upstream config: {0}")]
    Invalid(String),
    /// The caller added an id that was added concurrently by someone else.
    #[error("server id {0:?} was added concurrently; reload and retry")]
    Conflict(String),
    /// Reading, locking or writing the file, or storing a credential, failed.
    #[error("upstream config file: {0:#}")]
    Io(anyhow::Error),
}

impl From<SaveError> for UpstreamSaveError {
    fn from(e: SaveError) -> Self {
        match e {
            SaveError::Io(e) => Self::Io(e),
            other => Self::Invalid(other.to_string()),
        }
    }
}

/// A secret a save hands to the vault: the server it belongs to and the bearer token.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCredential {
    /// Server id.
    pub id: String,
    /// The token.
    pub token: String,
}

/// The read side of a file: what it holds now (an absent file is an empty config).
pub fn load(file: &ConfigFile) -> anyhow::Result<UpstreamsFile> {
    let v = file.read_json()?;
    let parsed: UpstreamsFile = serde_json::from_value(v)
        .map_err(|e| anyhow::anyhow!("parsing {}: {e}", file.path().display()))?;
    parsed
        .validate()
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.path().display()))?;
    Ok(parsed)
}

fn servers_by_id(doc: &Value, what: &str) -> Result<Vec<(String, Value)>, UpstreamSaveError> {
    let Some(obj) = doc.as_object() else {
        return Err(UpstreamSaveError::Invalid(format!(
            "{what} must be a JSON object"
        )));
    };
    let servers = match obj.get("servers") {
        None => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(UpstreamSaveError::Invalid(format!(
                "{what}.servers must be an array"
            )));
        }
    };
    let mut out: Vec<(String, Value)> = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        let id = s
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                UpstreamSaveError::Invalid(format!("{what}.servers[{i}].id: a string is required"))
            })?;
        if out.iter().any(|(x, _)| x == id) {
            return Err(UpstreamSaveError::Invalid(format!(
                "{what}.servers[{i}].id: {id:?} appears twice"
            )));
        }
        out.push((id.to_owned(), s.clone()));
    }
    Ok(out)
}

/// Removes the read-only `auth.token_exists` projection.
fn strip_projection(server: &mut Value) {
    if let Some(a) = server.get_mut("auth").and_then(Value::as_object_mut) {
        a.remove("token_exists");
    }
}

/// The `{base, config}` save. Derives the base→desired delta per server id and applies it to
/// the latest file inside the lock: a server missing from `desired` is removed, a new one is
/// added (a conflict when someone else added the same id meanwhile), a changed one gets only
/// its changed fields, so concurrent edits to other fields or servers survive. Bearer tokens
/// in `desired` are taken out and returned for the vault. Returns the exact files before and
/// after the locked mutation.
pub fn save_delta(
    file: &ConfigFile,
    base: &Value,
    desired: &Value,
) -> Result<(UpstreamsFile, UpstreamsFile, Vec<NewCredential>), UpstreamSaveError> {
    let base_servers = servers_by_id(base, "base")?;
    let mut desired_servers = servers_by_id(desired, "config")?;
    let mut creds = Vec::new();
    for (id, s) in desired_servers.iter_mut() {
        strip_projection(s);
        if let Some(a) = s.get_mut("auth").and_then(Value::as_object_mut)
            && let Some(t) = a.remove("token")
        {
            let Some(token) = t.as_str().filter(|t| !t.trim().is_empty()) else {
                return Err(UpstreamSaveError::Invalid(format!(
                    "server {id:?}: auth.token must be a non-empty string"
                )));
            };
            a.insert("type".into(), json!("bearer"));
            creds.push(NewCredential {
                id: id.clone(),
                token: token.to_owned(),
            });
        }
    }
    let base_servers: Vec<(String, Value)> = base_servers
        .into_iter()
        .map(|(id, mut s)| {
            strip_projection(&mut s);
            (id, s)
        })
        .collect();
    // Top-level keys besides `servers` follow the generic object delta.
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("servers");
        }
        v
    };
    let mut top = Vec::new();
    config::diff(&mut Vec::new(), &strip(base), &strip(desired), &mut top);

    let (before, after, parsed) = file.update_json(
        |doc: &mut Value| -> Result<(), UpstreamSaveError> {
            if !doc.is_object() {
                *doc = json!({});
            }
            for (path, change) in top {
                config::apply(doc, &path, change);
            }
            let mut latest = match doc.get("servers") {
                Some(Value::Array(a)) => a.clone(),
                None => Vec::new(),
                Some(_) => {
                    return Err(UpstreamSaveError::Invalid(
                        "the file's servers is not an array; fix it by hand first".into(),
                    ));
                }
            };
            let pos = |latest: &[Value], id: &str| {
                latest
                    .iter()
                    .position(|s| s.get("id").and_then(Value::as_str) == Some(id))
            };
            for (id, _) in &base_servers {
                if !desired_servers.iter().any(|(d, _)| d == id)
                    && let Some(i) = pos(&latest, id)
                {
                    latest.remove(i);
                }
            }
            for (id, want) in &desired_servers {
                match base_servers.iter().find(|(b, _)| b == id) {
                    None => {
                        if pos(&latest, id).is_some() {
                            return Err(UpstreamSaveError::Conflict(id.clone()));
                        }
                        latest.push(want.clone());
                    }
                    Some((_, was)) => {
                        let mut delta = Vec::new();
                        config::diff(&mut Vec::new(), was, want, &mut delta);
                        match pos(&latest, id) {
                            Some(i) => {
                                for (path, change) in delta {
                                    config::apply(&mut latest[i], &path, change);
                                }
                            }
                            // Removed meanwhile: the caller's edit brings it back as desired.
                            None => latest.push(want.clone()),
                        }
                    }
                }
            }
            doc["servers"] = Value::Array(latest);
            Ok(())
        },
        |doc: &Value| -> Result<UpstreamsFile, UpstreamSaveError> {
            let f: UpstreamsFile = serde_json::from_value(doc.clone())
                .map_err(|e| UpstreamSaveError::Invalid(e.to_string()))?;
            f.validate().map_err(UpstreamSaveError::Invalid)?;
            for c in &creds {
                if !f
                    .get(&c.id)
                    .is_some_and(|s| matches!(s.transport, Transport::Http { .. }))
                {
                    return Err(UpstreamSaveError::Invalid(format!(
                        "server {:?}: a bearer token needs an http transport",
                        c.id
                    )));
                }
            }
            Ok(f)
        },
    )?;
    let before: UpstreamsFile = serde_json::from_value(before).unwrap_or_default();
    let _ = after;
    Ok((before, parsed, creds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        for (p, s, want) in [
            ("*", "anything", true),
            ("read_*", "read_file", true),
            ("read_*", "write_file", false),
            ("*_file", "read_file", true),
            ("r?ad", "read", true),
            ("r?ad", "rad", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("**", "", true),
        ] {
            assert_eq!(glob_match(p, s), want, "{p} vs {s}");
        }
    }

    #[test]
    fn filters_allow_then_deny() {
        let f = ToolFilter {
            allow: Some(vec!["get_*".into(), "echo".into()]),
            deny: Some(vec!["get_secret*".into()]),
        };
        assert!(f.allows("echo"));
        assert!(f.allows("get_time"));
        assert!(!f.allows("get_secret_key"));
        assert!(!f.allows("add"));
        assert!(ToolFilter::default().allows("x"));
    }

    #[test]
    fn names_split_at_the_first_separator() {
        assert_eq!(split_name("fs__read_file"), Some(("fs", "read_file")));
        assert_eq!(split_name("fs__a__b"), Some(("fs", "a__b")));
        assert_eq!(split_name("session"), None);
        assert_eq!(split_name("__x"), None);
    }

    #[test]
    fn origins() {
        assert_eq!(
            origin_of("http://127.0.0.1:8000/mcp").as_deref(),
            Some("http://127.0.0.1:8000")
        );
        assert_eq!(
            origin_of("HTTPS://Example.com:443/x?y").as_deref(),
            Some("https://example.com")
        );
        assert_eq!(origin_of("ftp://x"), None);
        assert_eq!(origin_of("not a url"), None);
    }

    fn server(id: &str, name: &str) -> Value {
        json!({"id": id, "name": name, "transport": {"type": "stdio", "command": "srv"}})
    }

    #[test]
    fn validation_names_the_field() {
        let bad = |v: Value| {
            let f: UpstreamsFile = serde_json::from_value(v).unwrap();
            f.validate().unwrap_err()
        };
        let e = bad(json!({"servers": [server("a", "Bad Name")]}));
        assert!(e.starts_with("servers[0].name"), "{e}");
        let e = bad(json!({"servers": [server("a", "x__y")]}));
        assert!(e.starts_with("servers[0].name"), "{e}");
        let e = bad(json!({"servers": [server("a", "x"), server("b", "x")]}));
        assert!(e.starts_with("servers[1].name"), "{e}");
        let e = bad(json!({"servers": [server("a", "x"), server("a", "y")]}));
        assert!(e.starts_with("servers[1].id"), "{e}");
        let e = bad(
            json!({"servers": [{"id": "h", "name": "h", "transport": {"type": "http", "url": "nope"}}]}),
        );
        assert!(e.starts_with("servers[0].transport.url"), "{e}");
        let mut s = server("a", "x");
        s["timeout_secs"] = json!(0);
        let e = bad(json!({"servers": [s]}));
        assert!(e.starts_with("servers[0].timeout_secs"), "{e}");
    }

    #[test]
    fn delta_save_keeps_concurrent_edits_and_refuses_a_double_add() {
        let d = tempfile::tempdir().unwrap();
        let file = ConfigFile::new(d.path().join("mcp-upstreams.json"));
        let empty = json!({"servers": []});
        let (_, after, _) = save_delta(
            &file,
            &empty,
            &json!({"servers": [server("a", "alpha"), server("b", "beta")]}),
        )
        .unwrap();
        assert_eq!(after.servers.len(), 2);
        let base = serde_json::to_value(&after).unwrap();
        // Writer 1 disables a; writer 2 (same stale base) changes b's timeout and removes nothing.
        let mut w1 = base.clone();
        w1["servers"][0]["enabled"] = json!(false);
        let mut w2 = base.clone();
        w2["servers"][1]["timeout_secs"] = json!(5);
        save_delta(&file, &base, &w1).unwrap();
        let (before, after, _) = save_delta(&file, &base, &w2).unwrap();
        assert!(!before.get("a").unwrap().enabled);
        assert!(!after.get("a").unwrap().enabled, "writer 1's edit survives");
        assert_eq!(after.get("b").unwrap().timeout_secs, 5);
        // A concurrent add survives a stale save; adding the same id twice conflicts.
        let mut w3 = base.clone();
        w3["servers"]
            .as_array_mut()
            .unwrap()
            .push(server("c", "gamma"));
        save_delta(&file, &base, &w3).unwrap();
        let mut w4 = base.clone();
        w4["servers"]
            .as_array_mut()
            .unwrap()
            .push(server("d", "delta"));
        let (_, after, _) = save_delta(&file, &base, &w4).unwrap();
        assert!(after.get("c").is_some() && after.get("d").is_some());
        let mut w5 = base.clone();
        w5["servers"]
            .as_array_mut()
            .unwrap()
            .push(server("c", "other"));
        assert!(matches!(
            save_delta(&file, &base, &w5),
            Err(UpstreamSaveError::Conflict(id)) if id == "c"
        ));
        // Omitting a server removes it; an invalid result changes nothing.
        let cur = serde_json::to_value(load(&file).unwrap()).unwrap();
        let mut rm = cur.clone();
        rm["servers"]
            .as_array_mut()
            .unwrap()
            .retain(|s| s["id"] != "d");
        let (_, after, _) = save_delta(&file, &cur, &rm).unwrap();
        assert!(after.get("d").is_none());
        let cur = serde_json::to_value(load(&file).unwrap()).unwrap();
        let mut bad = cur.clone();
        bad["servers"][0]["name"] = json!("BAD");
        assert!(matches!(
            save_delta(&file, &cur, &bad),
            Err(UpstreamSaveError::Invalid(_))
        ));
        assert_eq!(serde_json::to_value(load(&file).unwrap()).unwrap(), cur);
    }

    #[test]
    fn a_stale_save_does_not_erase_auth_written_meanwhile_and_tokens_leave_the_file() {
        let d = tempfile::tempdir().unwrap();
        let file = ConfigFile::new(d.path().join("mcp-upstreams.json"));
        let http = json!({"id": "h", "name": "remote", "transport": {"type": "http", "url": "http://127.0.0.1:9/mcp"}});
        let (_, after, _) = save_delta(&file, &json!({}), &json!({"servers": [http]})).unwrap();
        let base = serde_json::to_value(&after).unwrap();
        let mut with_token = base.clone();
        with_token["servers"][0]["auth"] = json!({"type": "bearer", "token": "s3cret"});
        let (_, after, creds) = save_delta(&file, &base, &with_token).unwrap();
        assert_eq!(
            creds,
            vec![NewCredential {
                id: "h".into(),
                token: "s3cret".into()
            }]
        );
        assert_eq!(
            after.get("h").unwrap().auth,
            Some(json!({"type": "bearer"}))
        );
        let raw = std::fs::read_to_string(file.path()).unwrap();
        assert!(!raw.contains("s3cret"), "{raw}");
        // A stale editor (base without auth) changes the timeout: auth stays.
        let mut stale = base.clone();
        stale["servers"][0]["timeout_secs"] = json!(9);
        let (_, after, _) = save_delta(&file, &base, &stale).unwrap();
        assert_eq!(
            after.get("h").unwrap().auth,
            Some(json!({"type": "bearer"}))
        );
        assert_eq!(after.get("h").unwrap().timeout_secs, 9);
        // A token for a stdio server is refused.
        let cur = serde_json::to_value(load(&file).unwrap()).unwrap();
        let mut bad = cur.clone();
        bad["servers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"id": "s", "name": "s", "transport": {"type": "stdio", "command": "x"}, "auth": {"token": "t"}}));
        assert!(matches!(
            save_delta(&file, &cur, &bad),
            Err(UpstreamSaveError::Invalid(_))
        ));
    }
}
