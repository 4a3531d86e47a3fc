//! Launch composition for `agent action=spawn` and `POST /sessions/agent` (pure): the typed
//! arguments both take ([`SpawnArgs`]), the run configuration they select, `model`, the
//! per-agent trust handling (Codex's `trust_level` flag, Claude's screen answered by
//! `mail::trust`), the `CLAUDE_CODE_TMPDIR` default and the `launch_warning`.
//!
//! Order: a run configuration supplies command, argv, env and a default model; the caller's
//! `args` follow its argv and its `env` overrides its env; `model` overrides the default and
//! is composed as `--model <m>` unless the argv already names one (an explicit `model` next to
//! an argv `--model` is refused, naming both). Prompt placement stays in `spawn`: `{prompt}`
//! is substituted where authored, else appended — never deferred for a run configuration.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use crate::config::{Agents, RunConfig};

/// The spawn arguments, shared by MCP `agent action=spawn` and `POST /sessions/agent`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpawnArgs {
    /// The agent CLI, or the name of a run configuration (the literal `codex` selects the
    /// default Codex configuration when one is marked).
    #[serde(default)]
    pub command: Option<String>,
    /// A run configuration by name.
    #[serde(default)]
    pub run_config: Option<String>,
    /// Arguments (after a run configuration's argv).
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// The task prompt.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Extra environment (overrides a run configuration's; never substituted).
    #[serde(default)]
    pub env: HashMap<String, String>,
    /// Peer and PTY display name.
    #[serde(default)]
    pub name: Option<String>,
    /// Absent: derive from the prompt; null or "": none.
    #[serde(default, deserialize_with = "present")]
    pub pty_description: Option<Option<String>>,
    /// The model, composed as `--model <m>`.
    #[serde(default)]
    pub model: Option<String>,
    /// Exempt from automatic idle closure.
    #[serde(default)]
    pub keep_open: bool,
}

/// A present field (even `null`) is `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// The two agents with launch semantics of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Agent {
    Claude,
    Codex,
}

/// Why a launch was refused (400 / `invalid_arguments`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LaunchError {
    #[error("command or run_config is required")]
    NoCommand,
    #[error("unknown run configuration {name}; configured: {configured:?}")]
    UnknownRunConfig {
        name: String,
        configured: Vec<String>,
    },
    #[error("model {model} conflicts with {flag} already in {place}; give one or the other")]
    ModelConflict {
        model: String,
        flag: String,
        place: &'static str,
    },
}

impl LaunchError {
    /// The stable error code.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Self::NoCommand => "invalid_arguments",
            Self::UnknownRunConfig { .. } => "unknown_run_config",
            Self::ModelConflict { .. } => "model_conflict",
        }
    }
}

/// A composed launch (before prompt placement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Composed {
    /// The executable.
    pub command: String,
    /// Its argv without the prompt.
    pub args: Vec<String>,
    /// Environment for the child (TUIC_SESSION / TUIC_PARENT are applied later).
    pub env: HashMap<String, String>,
    /// The selected run configuration.
    pub run_config: Option<String>,
    /// The agent launched (by executable, or a wrapper configuration's `agent`).
    pub agent: Option<Agent>,
    /// Answer Claude's startup trust question on the child's screen.
    pub answer_claude_trust: bool,
    /// A directory to create before spawning (the `CLAUDE_CODE_TMPDIR` default).
    pub create_dir: Option<PathBuf>,
    /// Adjustments the caller should know about (`launch_warning`).
    pub warnings: Vec<String>,
}

fn basename(command: &str) -> &str {
    Path::new(command)
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or(command)
}

/// The agent an executable is, by its name.
pub(crate) fn agent_of(command: &str) -> Option<Agent> {
    match basename(command) {
        "claude" => Some(Agent::Claude),
        "codex" => Some(Agent::Codex),
        _ => None,
    }
}

/// The `--model`/`-m` flag already in `args`, as written.
fn model_flag(args: &[String]) -> Option<String> {
    args.iter()
        .find(|a| {
            *a == "--model" || *a == "-m" || a.starts_with("--model=") || a.starts_with("-m=")
        })
        .cloned()
}

/// The Codex override that marks `cwd` trusted for this launch only.
pub(crate) fn codex_trust_override(cwd: &Path) -> String {
    format!("projects.\"{}\".trust_level=\"trusted\"", cwd.display())
}

/// Selects the run configuration: `run_config` by name (unknown → refused listing the
/// configured ones), else a `command` equal to a name, else the literal `codex` → the Codex
/// configuration marked `default`.
fn select<'a>(agents: &'a Agents, a: &SpawnArgs) -> Result<Option<&'a RunConfig>, LaunchError> {
    if let Some(name) = &a.run_config {
        return agents
            .run_configs
            .iter()
            .find(|r| &r.name == name)
            .map(Some)
            .ok_or_else(|| LaunchError::UnknownRunConfig {
                name: name.clone(),
                configured: agents.run_configs.iter().map(|r| r.name.clone()).collect(),
            });
    }
    let Some(cmd) = a.command.as_deref() else {
        return Ok(None);
    };
    if let Some(r) = agents.run_configs.iter().find(|r| r.name == cmd) {
        return Ok(Some(r));
    }
    if cmd == "codex" {
        return Ok(agents.run_configs.iter().find(|r| {
            r.default
                && (r.agent.as_deref() == Some("codex")
                    || agent_of(&r.command) == Some(Agent::Codex))
        }));
    }
    Ok(None)
}

/// Composes the launch. `inherited` reads the node's own environment (a child inherits it);
/// `home` is the node user's home; `cwd` the canonical working directory.
pub(crate) fn compose(
    agents: &Agents,
    a: &SpawnArgs,
    cwd: &Path,
    home: &Path,
    inherited: &dyn Fn(&str) -> Option<String>,
) -> Result<Composed, LaunchError> {
    let rc = select(agents, a)?;
    let (command, mut args, mut env, default_model) = match rc {
        Some(r) => (
            r.command.clone(),
            r.args.clone(),
            r.env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<HashMap<_, _>>(),
            r.model.clone(),
        ),
        None => (
            a.command
                .clone()
                .filter(|c| !c.is_empty())
                .ok_or(LaunchError::NoCommand)?,
            Vec::new(),
            HashMap::new(),
            None,
        ),
    };
    if let (Some(m), Some(flag)) = (&a.model, rc.and_then(|r| model_flag(&r.args))) {
        return Err(LaunchError::ModelConflict {
            model: m.clone(),
            flag,
            place: "the run configuration's args",
        });
    }
    if let (Some(m), Some(flag)) = (&a.model, model_flag(&a.args)) {
        return Err(LaunchError::ModelConflict {
            model: m.clone(),
            flag,
            place: "args",
        });
    }
    args.extend(a.args.iter().cloned());
    // Caller values override the run configuration's; never substituted.
    env.extend(a.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut warnings = Vec::new();
    if let Some(m) = a.model.clone().or(default_model)
        && model_flag(&args).is_none()
    {
        args.splice(0..0, ["--model".to_owned(), m]);
    }
    let by_exe = agent_of(&command);
    let agent = by_exe.or_else(|| {
        rc.and_then(|r| match r.agent.as_deref() {
            Some("claude") => Some(Agent::Claude),
            Some("codex") => Some(Agent::Codex),
            _ => None,
        })
    });
    if by_exe.is_none()
        && let (Some(ag), Some(r)) = (agent, rc)
    {
        warnings.push(format!(
            "run configuration {} starts {:?} through the wrapper {}: TUIC cannot validate the flags it forwards",
            r.name,
            ag,
            command
        ));
    }
    let mut answer_claude_trust = false;
    let mut create_dir = None;
    match agent {
        Some(Agent::Codex) if agents.codex.skip_trust_dialog => {
            let flag = codex_trust_override(cwd);
            if !args.iter().any(|x| x == &flag) {
                args.splice(0..0, ["-c".to_owned(), flag]);
            }
        }
        Some(Agent::Claude) => {
            answer_claude_trust = agents.claude.skip_trust_dialog;
            if !env.contains_key("CLAUDE_CODE_TMPDIR") && inherited("CLAUDE_CODE_TMPDIR").is_none()
            {
                let dir = home.join("Gits/.tmp/claude/");
                env.insert("CLAUDE_CODE_TMPDIR".into(), dir.display().to_string());
                create_dir = Some(dir);
            }
        }
        _ => {}
    }
    Ok(Composed {
        command,
        args,
        env,
        run_config: rc.map(|r| r.name.clone()),
        agent,
        answer_claude_trust,
        create_dir,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents() -> Agents {
        Agents {
            run_configs: vec![
                RunConfig {
                    name: "fast".into(),
                    command: "claude".into(),
                    args: vec!["--verbose".into()],
                    model: Some("haiku".into()),
                    env: [("A".to_owned(), "rc".to_owned())].into(),
                    ..Default::default()
                },
                RunConfig {
                    name: "pinned".into(),
                    command: "claude".into(),
                    args: vec!["--model".into(), "opus".into()],
                    ..Default::default()
                },
                RunConfig {
                    name: "yolo".into(),
                    command: "codex".into(),
                    args: vec!["--dangerously-bypass-approvals-and-sandbox".into()],
                    default: true,
                    ..Default::default()
                },
                RunConfig {
                    name: "wrapped".into(),
                    command: "/opt/bin/cx".into(),
                    agent: Some("codex".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    fn args(v: serde_json::Value) -> SpawnArgs {
        serde_json::from_value(v).unwrap()
    }

    fn none(_: &str) -> Option<String> {
        None
    }

    const CWD: &str = "/work/repo";

    fn run(v: serde_json::Value) -> Result<Composed, LaunchError> {
        compose(
            &agents(),
            &args(v),
            Path::new(CWD),
            Path::new("/home/u"),
            &none,
        )
    }

    #[test]
    fn run_config_supplies_argv_env_and_model_the_caller_overrides() {
        let c = run(serde_json::json!({"command": "fast", "args": ["-x"], "env": {"A": "caller", "B": "{prompt}"}})).unwrap();
        assert_eq!(c.command, "claude");
        assert_eq!(c.args, ["--model", "haiku", "--verbose", "-x"]);
        assert_eq!(c.env["A"], "caller");
        assert_eq!(c.env["B"], "{prompt}", "env values are never substituted");
        let c = run(serde_json::json!({"run_config": "fast", "model": "sonnet"})).unwrap();
        assert_eq!(c.args, ["--model", "sonnet", "--verbose"]);
        assert_eq!(c.run_config.as_deref(), Some("fast"));
    }

    #[test]
    fn model_conflicts_with_an_argv_model_naming_both() {
        let e = run(serde_json::json!({"run_config": "pinned", "model": "haiku"})).unwrap_err();
        assert_eq!(e.code(), "model_conflict");
        let m = e.to_string();
        assert!(
            m.contains("haiku") && m.contains("--model") && m.contains("run configuration"),
            "{m}"
        );
        // Without a model parameter the argv's model stays authoritative.
        let c = run(serde_json::json!({"run_config": "pinned"})).unwrap();
        assert_eq!(c.args, ["--model", "opus"]);
        let e = run(serde_json::json!({"command": "claude", "args": ["-m", "x"], "model": "y"}))
            .unwrap_err();
        assert_eq!(e.code(), "model_conflict");
    }

    #[test]
    fn unknown_run_config_lists_the_configured_ones() {
        let e = run(serde_json::json!({"run_config": "nope"})).unwrap_err();
        assert_eq!(e.code(), "unknown_run_config");
        assert_eq!(
            e.to_string(),
            "unknown run configuration nope; configured: [\"fast\", \"pinned\", \"yolo\", \"wrapped\"]"
        );
    }

    #[test]
    fn literal_codex_selects_the_default_and_gets_the_trust_override() {
        let c = run(serde_json::json!({"command": "codex"})).unwrap();
        assert_eq!(c.run_config.as_deref(), Some("yolo"));
        assert_eq!(
            c.args,
            [
                "-c",
                "projects.\"/work/repo\".trust_level=\"trusted\"",
                "--dangerously-bypass-approvals-and-sandbox"
            ]
        );
        // A wrapper configuration: the override is forwarded and the caller warned.
        let c = run(serde_json::json!({"run_config": "wrapped"})).unwrap();
        assert_eq!(c.agent, Some(Agent::Codex));
        assert_eq!(c.args[0], "-c");
        assert!(
            c.warnings[0].contains("wrapper /opt/bin/cx"),
            "{:?}",
            c.warnings
        );
        // skip_trust_dialog off: no override.
        let mut a = agents();
        a.codex.skip_trust_dialog = false;
        a.run_configs.clear();
        let c = compose(
            &a,
            &args(serde_json::json!({"command": "codex"})),
            Path::new(CWD),
            Path::new("/h"),
            &none,
        )
        .unwrap();
        assert!(c.args.is_empty());
    }

    #[test]
    fn claude_gets_a_tmpdir_unless_one_is_given_or_inherited() {
        let c = run(serde_json::json!({"command": "/usr/bin/claude"})).unwrap();
        assert_eq!(c.env["CLAUDE_CODE_TMPDIR"], "/home/u/Gits/.tmp/claude/");
        assert_eq!(
            c.create_dir,
            Some(PathBuf::from("/home/u/Gits/.tmp/claude/"))
        );
        assert!(c.answer_claude_trust);
        let c = run(serde_json::json!({"command": "claude", "env": {"CLAUDE_CODE_TMPDIR": "/t"}}))
            .unwrap();
        assert_eq!(c.env["CLAUDE_CODE_TMPDIR"], "/t");
        assert_eq!(c.create_dir, None);
        let inherited = |k: &str| (k == "CLAUDE_CODE_TMPDIR").then(|| "/i".to_owned());
        let c = compose(
            &agents(),
            &args(serde_json::json!({"command": "claude"})),
            Path::new(CWD),
            Path::new("/h"),
            &inherited,
        )
        .unwrap();
        assert!(!c.env.contains_key("CLAUDE_CODE_TMPDIR"));
        assert_eq!(c.create_dir, None);
    }

    #[test]
    fn typed_arguments_refuse_unknown_fields() {
        let e = serde_json::from_value::<SpawnArgs>(
            serde_json::json!({"command": "x", "allow_alt_screen": true}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("allow_alt_screen"), "{e}");
        let a = args(serde_json::json!({"command": "x", "pty_description": null}));
        assert_eq!(a.pty_description, Some(None));
    }
}
