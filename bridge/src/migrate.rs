//! Points agent MCP configs at the published bridge (see [`crate::install`]).
//!
//! Claude Code: `~/.claude.json`, an existing `~/.claude-private/.claude.json`, and
//! `<CLAUDE_CONFIG_DIR>/.claude.json` (canonical paths deduplicated; a relative
//! `CLAUDE_CONFIG_DIR` cannot be resolved before a launch directory is known and only warns).
//! In each, every stdio `mcpServers` entry (top level and per project) whose command is a
//! `tuic-bridge` inside a cargo `target/` dir or an older `mcp-bridge/<sha256>/` revision is
//! repointed at the published path. Custom commands (anything else), other transports and
//! disabled entries stay as they are. A configured absolute `tuic-bridge` command that is
//! missing or not executable produces a warning naming the config and the command.
//!
//! The file is edited textually (the old command's JSON string literal is replaced by the
//! new one) so the user's key order and formatting survive, and written through a temp file
//! and an atomic rename. Not here: Codex configs and the node's repair at start.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

/// What a migration did to one config file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Config files rewritten.
    pub updated: Vec<PathBuf>,
    /// Human-readable warnings (each names the config and the command).
    pub warnings: Vec<String>,
}

/// The Claude config files to look at, from `HOME` and `CLAUDE_CONFIG_DIR`.
pub fn claude_roots(
    home: Option<&Path>,
    claude_config_dir: Option<&str>,
) -> (Vec<PathBuf>, Vec<String>) {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut warnings = Vec::new();
    let mut push = |p: PathBuf| {
        let key = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        if !out
            .iter()
            .any(|q| std::fs::canonicalize(q).unwrap_or_else(|_| q.clone()) == key)
        {
            out.push(p);
        }
    };
    if let Some(h) = home {
        push(h.join(".claude.json"));
        let private = h.join(".claude-private").join(".claude.json");
        if private.exists() {
            push(private);
        }
    }
    if let Some(dir) = claude_config_dir.filter(|d| !d.is_empty()) {
        let dir = Path::new(dir);
        if dir.is_absolute() {
            push(dir.join(".claude.json"));
        } else {
            warnings.push(format!(
                "CLAUDE_CONFIG_DIR={} is relative and cannot be resolved before a launch \
                 directory is known; its config was not migrated",
                dir.display()
            ));
        }
    }
    (out, warnings)
}

fn is_bridge_command(cmd: &str) -> bool {
    Path::new(cmd)
        .file_name()
        .is_some_and(|n| n == "tuic-bridge")
}

/// Whether `cmd` is a bridge this migration owns: a cargo build output or an installed
/// revision. Anything else is the user's custom command and is preserved.
fn is_managed(cmd: &str, config_dir: &Path) -> bool {
    is_bridge_command(cmd)
        && (cmd.contains("/target/debug/")
            || cmd.contains("/target/release/")
            || Path::new(cmd).starts_with(config_dir.join("mcp-bridge")))
}

fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The stdio server entries of a Claude config: top-level and per-project `mcpServers`.
fn server_entries(doc: &Value) -> Vec<&Value> {
    let mut maps = vec![doc.get("mcpServers")];
    if let Some(projects) = doc.get("projects").and_then(Value::as_object) {
        maps.extend(projects.values().map(|p| p.get("mcpServers")));
    }
    maps.into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .flat_map(|m| m.values())
        .filter(|e| {
            let stdio = e
                .get("type")
                .and_then(Value::as_str)
                .is_none_or(|t| t == "stdio");
            let disabled = e.get("disabled").and_then(Value::as_bool) == Some(true);
            stdio && !disabled
        })
        .collect()
}

/// Migrates one Claude config file to `published`.
pub fn migrate_claude_file(
    file: &Path,
    published: &Path,
    config_dir: &Path,
    report: &mut Report,
) -> anyhow::Result<()> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
    };
    let doc: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON; left unchanged", file.display()))?;
    let new_cmd = published.to_string_lossy().into_owned();
    let mut replace: Vec<String> = Vec::new();
    for entry in server_entries(&doc) {
        let Some(cmd) = entry.get("command").and_then(Value::as_str) else {
            continue;
        };
        if is_managed(cmd, config_dir) && cmd != new_cmd {
            if !replace.iter().any(|c| c == cmd) {
                replace.push(cmd.to_owned());
            }
        } else if is_bridge_command(cmd)
            && Path::new(cmd).is_absolute()
            && !executable(Path::new(cmd))
        {
            report.warnings.push(format!(
                "{}: MCP command {cmd} is missing or not executable",
                file.display()
            ));
        }
    }
    if replace.is_empty() {
        return Ok(());
    }
    let mut out = text.clone();
    for old in &replace {
        let old_lit = serde_json::to_string(old).expect("string");
        let new_lit = serde_json::to_string(&new_cmd).expect("string");
        out = out.replace(&old_lit, &new_lit);
    }
    // The textual edit must leave a document that differs only in those commands.
    let check: Value = serde_json::from_str(&out).context("the edited config is not JSON")?;
    anyhow::ensure!(
        server_entries(&check)
            .iter()
            .filter_map(|e| e.get("command").and_then(Value::as_str))
            .all(|c| !replace.iter().any(|o| o == c)),
        "{}: could not rewrite the bridge command",
        file.display()
    );
    let tmp = file.with_extension(format!("json.tuic-tmp-{}", std::process::id()));
    let perms = std::fs::metadata(file)?.permissions();
    std::fs::write(&tmp, out.as_bytes()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, perms)?;
    std::fs::rename(&tmp, file).with_context(|| format!("replacing {}", file.display()))?;
    report.updated.push(file.to_path_buf());
    Ok(())
}

/// Migrates every Claude config root; failures become warnings so one bad file never
/// blocks the others.
pub fn migrate_claude(
    home: Option<&Path>,
    claude_config_dir: Option<&str>,
    published: &Path,
    config_dir: &Path,
) -> Report {
    let (roots, warnings) = claude_roots(home, claude_config_dir);
    let mut report = Report {
        warnings,
        ..Default::default()
    };
    for file in roots {
        if let Err(e) = migrate_claude_file(&file, published, config_dir, &mut report) {
            report.warnings.push(format!("{e:#}"));
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repoints_managed_commands_and_keeps_the_rest() {
        let t = tempfile::tempdir().unwrap();
        let cfg = t.path().join("cfg");
        let published = cfg.join("mcp-bridge/abc/tuic-bridge");
        let home = t.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let file = home.join(".claude.json");
        let original = r#"{
  "zeta": 1,
  "mcpServers": {
    "tuic": {"command": "/src/tuic/target/debug/tuic-bridge", "args": []},
    "mine": {"command": "/opt/custom/tuic-bridge-wrapper"},
    "http": {"type": "http", "url": "http://x/target/debug/tuic-bridge"}
  },
  "projects": {"/p": {"mcpServers": {"t2": {"command": "/old/cfg/target/release/tuic-bridge"}}}},
  "alpha": 2
}"#;
        std::fs::write(&file, original).unwrap();
        let r = migrate_claude(Some(&home), None, &published, &cfg);
        assert_eq!(r.updated, vec![file.clone()]);
        let text = std::fs::read_to_string(&file).unwrap();
        // Formatting and key order survive; only the managed commands changed.
        assert!(text.starts_with("{\n  \"zeta\": 1,"), "{text}");
        let p = published.to_str().unwrap();
        assert_eq!(text.matches(p).count(), 2, "{text}");
        assert!(text.contains("/opt/custom/tuic-bridge-wrapper"));
        assert!(text.contains("http://x/target/debug/tuic-bridge"));
        // Idempotent.
        let again = migrate_claude(Some(&home), None, &published, &cfg);
        assert!(again.updated.is_empty());
    }

    #[test]
    fn warns_about_missing_custom_bridge_and_relative_override() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join(".claude.json"),
            r#"{"mcpServers":{"tuic":{"command":"/nowhere/bin/tuic-bridge"}}}"#,
        )
        .unwrap();
        let r = migrate_claude(
            Some(&home),
            Some("rel/dir"),
            Path::new("/p/tuic-bridge"),
            t.path(),
        );
        assert!(r.updated.is_empty());
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
        assert!(r.warnings.iter().any(|w| w.contains("relative")));
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains(".claude.json") && w.contains("/nowhere/bin/tuic-bridge"))
        );
    }

    #[test]
    fn override_root_is_included_and_deduplicated() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        std::fs::create_dir_all(home.join(".claude-private")).unwrap();
        std::fs::write(home.join(".claude-private/.claude.json"), "{}").unwrap();
        let (roots, w) = claude_roots(Some(&home), Some(home.to_str().unwrap()));
        assert!(w.is_empty());
        assert_eq!(
            roots,
            vec![
                home.join(".claude.json"),
                home.join(".claude-private/.claude.json")
            ]
        );
    }
}
