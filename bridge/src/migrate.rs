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
//! and an atomic rename.
//!
//! Codex: `$CODEX_HOME/config.toml`, else `~/.codex/config.toml`. Each `[mcp_servers.<name>]`
//! table with a managed `command = "…"` (a plain basic string) is repointed unless the table
//! says `enabled = false`; the edit is line-based so comments and layout survive. Inline-table
//! entries and escaped strings are left alone. A dry run ([`Report::dry_run`]) only lists
//! the files that need it: the primary node runs `tuic-bridge install --if-needed` at start,
//! which publishes and rewrites only then.

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
    /// Plan only: `updated` lists the files that would be rewritten; nothing is written.
    pub dry_run: bool,
    /// A config already names the published path but no executable is there yet.
    pub needs_publish: bool,
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
        if cmd == new_cmd && !executable(Path::new(cmd)) {
            report.needs_publish = true;
        }
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
    if report.dry_run {
        report.updated.push(file.to_path_buf());
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
    migrate_claude_into(
        home,
        claude_config_dir,
        published,
        config_dir,
        Report::default(),
    )
}

/// [`migrate_claude`] continuing `report` (e.g. a dry run's).
pub fn migrate_claude_into(
    home: Option<&Path>,
    claude_config_dir: Option<&str>,
    published: &Path,
    config_dir: &Path,
    mut report: Report,
) -> Report {
    let (roots, warnings) = claude_roots(home, claude_config_dir);
    report.warnings.extend(warnings);
    for file in roots {
        if let Err(e) = migrate_claude_file(&file, published, config_dir, &mut report) {
            report.warnings.push(format!("{e:#}"));
        }
    }
    report
}

/// The Codex config file, from `CODEX_HOME` or `HOME`.
pub fn codex_config(home: Option<&Path>, codex_home: Option<&str>) -> Option<PathBuf> {
    match codex_home.filter(|c| !c.is_empty()) {
        Some(c) => Some(Path::new(c).join("config.toml")),
        None => home.map(|h| h.join(".codex").join("config.toml")),
    }
}

/// A `command = "..."` line's value, when it is a plain basic string.
fn toml_command(line: &str) -> Option<(usize, usize)> {
    let t = line.trim_start();
    let rest = t.strip_prefix("command")?.trim_start().strip_prefix('=')?;
    let rest_trim = rest.trim_start();
    let value = rest_trim.strip_prefix('"')?;
    let end = value.find('"')?;
    let v = &value[..end];
    if v.contains('\\') {
        return None;
    }
    let after = value[end + 1..].trim();
    if !(after.is_empty() || after.starts_with('#')) {
        return None;
    }
    let start = line.len() - value.len();
    Some((start, start + end))
}

/// Migrates the Codex config at `file` to `published`.
pub fn migrate_codex_file(
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
    let new_cmd = published.to_string_lossy().into_owned();
    if new_cmd.contains(['"', '\\']) {
        anyhow::bail!(
            "{}: cannot write {new_cmd} as a TOML basic string",
            file.display()
        );
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    // Per [mcp_servers.*] table: its command line (index, value span) and whether disabled.
    let mut edits: Vec<(usize, usize, usize)> = Vec::new();
    let mut table_cmd: Option<(usize, usize, usize)> = None;
    let mut in_server = false;
    let mut disabled = false;
    let flush = |cmd: Option<(usize, usize, usize)>,
                 disabled: bool,
                 edits: &mut Vec<_>,
                 report: &mut Report| {
        if let Some((i, a, b)) = cmd {
            let value = &lines[i][a..b];
            if disabled {
                return;
            }
            if value == new_cmd && !executable(Path::new(value)) {
                report.needs_publish = true;
            }
            if is_managed(value, config_dir) && value != new_cmd {
                edits.push((i, a, b));
            } else if is_bridge_command(value)
                && Path::new(value).is_absolute()
                && !executable(Path::new(value))
            {
                report.warnings.push(format!(
                    "{}: MCP command {value} is missing or not executable",
                    file.display()
                ));
            }
        }
    };
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            flush(table_cmd.take(), disabled, &mut edits, report);
            in_server = t.starts_with("[mcp_servers.") && !t.starts_with("[[");
            disabled = false;
            continue;
        }
        if !in_server {
            continue;
        }
        if let Some((a, b)) = toml_command(line) {
            table_cmd = Some((i, a, b));
        } else if t.replace(' ', "").starts_with("enabled=false") {
            disabled = true;
        }
    }
    flush(table_cmd.take(), disabled, &mut edits, report);
    if edits.is_empty() {
        return Ok(());
    }
    if report.dry_run {
        report.updated.push(file.to_path_buf());
        return Ok(());
    }
    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    for (i, a, b) in edits {
        out[i].replace_range(a..b, &new_cmd);
    }
    let out = out.concat();
    let tmp = file.with_extension(format!("toml.tuic-tmp-{}", std::process::id()));
    let perms = std::fs::metadata(file)?.permissions();
    std::fs::write(&tmp, out.as_bytes()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, perms)?;
    std::fs::rename(&tmp, file).with_context(|| format!("replacing {}", file.display()))?;
    report.updated.push(file.to_path_buf());
    Ok(())
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

    #[test]
    fn codex_tables_are_repointed_line_by_line() {
        let t = tempfile::tempdir().unwrap();
        let cfg = t.path().join("cfg");
        let published = cfg.join("mcp-bridge/abc/tuic-bridge");
        let file = t.path().join("config.toml");
        let original = "# my codex config\nmodel = \"o3\"\n\n[mcp_servers.tuic]\ncommand = \"/w/target/debug/tuic-bridge\" # managed\nenv_vars = [\"TUIC_SESSION\"]\n\n[mcp_servers.off]\ncommand = \"/w/target/debug/tuic-bridge\"\nenabled = false\n\n[mcp_servers.custom]\ncommand = \"/usr/local/bin/my-wrapper\"\n";
        std::fs::write(&file, original).unwrap();
        let mut r = Report::default();
        migrate_codex_file(&file, &published, &cfg, &mut r).unwrap();
        assert_eq!(r.updated, vec![file.clone()]);
        let text = std::fs::read_to_string(&file).unwrap();
        let expected = original.replacen(
            "/w/target/debug/tuic-bridge",
            published.to_str().unwrap(),
            1,
        );
        assert_eq!(text, expected);
        let mut again = Report::default();
        migrate_codex_file(&file, &published, &cfg, &mut again).unwrap();
        assert!(again.updated.is_empty());
    }
}
