//! What a session is doing: shell busy/idle from PTY activity, the foreground process, which
//! coding agent (if any) runs in it, and that agent's state.
//!
//! The classification is pure (inputs: timestamps, process names, recent screen text); the
//! one impure helper reads `/proc` for the foreground process name.

use serde::Serialize;

/// Quiet time after which a shell counts as idle.
pub const IDLE_AFTER_MS: u64 = 500;

/// Coding-agent CLIs recognised by process name or script name.
pub const AGENTS: &[&str] = &[
    "claude",
    "codex",
    "gemini",
    "opencode",
    "aider",
    "goose",
    "amp",
    "cursor-agent",
    "qwen",
    "crush",
];

/// `shell_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShellState {
    /// Output arrived recently.
    Busy,
    /// Quiet.
    Idle,
}

/// `agent_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentState {
    /// Detected, nothing observed since.
    Starting,
    /// Producing output.
    Working,
    /// A question or confirmation is on screen.
    AwaitingInput,
    /// Quiet and ready, without a completion marker.
    Idle,
    /// Quiet after the explicit `suggest: [ … ]` end-of-task marker.
    Completed,
}

/// Busy/idle from the last output time; `None` before the first observation.
pub fn shell_state(now_ms: u64, last_output_ms: Option<u64>) -> Option<ShellState> {
    let last = last_output_ms?;
    Some(if now_ms.saturating_sub(last) < IDLE_AFTER_MS {
        ShellState::Busy
    } else {
        ShellState::Idle
    })
}

/// The agent a process is, from its name and arguments.
pub fn detect_agent(comm: &str, argv: &[String]) -> Option<&'static str> {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_owned();
    let mut names = vec![base(comm)];
    // Node- and Python-hosted CLIs show up as `node`/`python`: look at the script too.
    names.extend(argv.iter().take(3).map(|a| base(a)));
    names.iter().find_map(|n| {
        let n = n.trim_end_matches(".js").trim_end_matches(".py");
        AGENTS.iter().copied().find(|a| n == *a)
    })
}

/// Whether screen text shows a question that waits for the user: a `(y/n)`-style prompt that
/// still ends its line (nothing typed after it yet), or an agent's confirmation menu near the
/// bottom of the screen.
pub fn question_on_screen(screen_tail: &str) -> Option<String> {
    let yes_no = ["(y/n)", "[y/n]", "[Y/n]", "[y/N]", "(yes/no)"];
    let menus = ["Do you want to", "❯ 1.", "Allow "];
    let mut lines = screen_tail.lines().rev().filter(|l| !l.trim().is_empty());
    if let Some(last) = lines.clone().next() {
        let t = last.trim_end();
        let t = t.trim_end_matches([':', '?', ' ']);
        if yes_no.iter().any(|m| t.ends_with(m)) {
            return Some(last.trim().to_owned());
        }
    }
    lines
        .by_ref()
        .take(8)
        .find(|l| menus.iter().any(|m| l.contains(m)))
        .map(|l| l.trim().to_owned())
}

/// The agent state from the observations.
pub fn agent_state(
    shell: Option<ShellState>,
    screen_tail: &str,
    output_since_detect: bool,
) -> AgentState {
    if !output_since_detect {
        return AgentState::Starting;
    }
    if shell == Some(ShellState::Busy) {
        return AgentState::Working;
    }
    if question_on_screen(screen_tail).is_some() {
        return AgentState::AwaitingInput;
    }
    if screen_tail.contains("suggest: [") {
        AgentState::Completed
    } else {
        AgentState::Idle
    }
}

/// The foreground process group leader's name and arguments, from `/proc`.
pub fn foreground_process(pgid: i32) -> Option<(String, Vec<String>)> {
    let comm = std::fs::read_to_string(format!("/proc/{pgid}/comm")).ok()?;
    let argv = std::fs::read(format!("/proc/{pgid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    Some((comm.trim().to_owned(), argv))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_state_is_omitted_before_first_observation() {
        assert_eq!(shell_state(1000, None), None);
        assert_eq!(shell_state(1000, Some(900)), Some(ShellState::Busy));
        assert_eq!(shell_state(5000, Some(900)), Some(ShellState::Idle));
    }

    #[test]
    fn agents_by_name_or_script() {
        assert_eq!(detect_agent("claude", &[]), Some("claude"));
        assert_eq!(
            detect_agent(
                "node",
                &["node".into(), "/usr/lib/node_modules/.bin/gemini".into()]
            ),
            Some("gemini")
        );
        assert_eq!(detect_agent("bash", &["bash".into()]), None);
    }

    #[test]
    fn completion_needs_the_marker() {
        let idle = Some(ShellState::Idle);
        assert_eq!(agent_state(idle, "> ", true), AgentState::Idle);
        assert_eq!(
            agent_state(idle, "done\nsuggest: [ \"next\" ]\n> ", true),
            AgentState::Completed
        );
        assert_eq!(
            agent_state(idle, "Proceed? (y/n)", true),
            AgentState::AwaitingInput
        );
        assert_eq!(
            agent_state(Some(ShellState::Busy), "", true),
            AgentState::Working
        );
        assert_eq!(agent_state(None, "", false), AgentState::Starting);
    }
}
