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

/// The one state a person sees for a session, in the web list, the session view and `tuic ls`
/// (`state` on every row). Derived from the finer observations ([`session_state`]); a hub sets
/// `host_offline` on the rows it keeps for a node that is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Output is arriving, an agent is starting or working, or a program other than the shell
    /// is in the foreground (a command started from the shell, or the session's own program
    /// when it is not a shell: `sleep`, a build, htop, vim).
    Working,
    /// A shell at its prompt: no foreground job, no agent, quiet.
    Idle,
    /// A question or confirmation waits on screen.
    NeedsInput,
    /// A detected agent that is idle or has completed its task.
    Done,
    /// The session's process ended.
    Exited,
    /// The host running the session is unreachable (set by a hub, never by a node).
    HostOffline,
}

/// The observations [`session_state`] decides from.
#[derive(Debug, Clone, Copy, Default)]
pub struct StateInputs {
    /// The process ended.
    pub exited: bool,
    /// Busy/idle from output.
    pub shell: Option<ShellState>,
    /// The detected agent's state, if an agent was detected.
    pub agent: Option<AgentState>,
    /// A question waits on screen ([`question_on_screen`]).
    pub question: bool,
    /// The terminal's foreground process group is not the session's own process (a command
    /// started from the shell runs).
    pub command_running: bool,
    /// The foreground process is a shell ([`is_shell`]); unknown counts as a shell, so a
    /// session whose foreground cannot be read is never reported busy by this alone.
    pub foreground_is_shell: bool,
}

/// The session's one state, in this order: exited; output arriving is working; a question on
/// screen needs input; a detected agent is working while starting or working and done when idle
/// or completed; otherwise a foreground program other than the shell (a command started from
/// it, or the session's own program when that is not a shell) is working, and a quiet shell at
/// its prompt is idle.
pub fn session_state(i: StateInputs) -> SessionState {
    if i.exited {
        return SessionState::Exited;
    }
    if i.shell == Some(ShellState::Busy) {
        return SessionState::Working;
    }
    if i.question || i.agent == Some(AgentState::AwaitingInput) {
        return SessionState::NeedsInput;
    }
    match i.agent {
        Some(AgentState::Starting | AgentState::Working) => SessionState::Working,
        Some(_) => SessionState::Done,
        None if i.command_running || !i.foreground_is_shell => SessionState::Working,
        None => SessionState::Idle,
    }
}

/// Interactive shells, by process name (`-bash` as a login shell shows it).
pub const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "fish", "dash", "ash", "ksh", "mksh", "pdksh", "tcsh", "csh", "yash",
    "nu", "elvish", "xonsh", "pwsh", "busybox",
];

/// Whether a foreground process name is a shell ([`SHELLS`]).
pub fn is_shell(comm: &str) -> bool {
    let base = comm.rsplit('/').next().unwrap_or(comm);
    SHELLS.contains(&base.trim_start_matches('-'))
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

/// A question waiting on screen as a UI shows it: the whole question and, for an agent's
/// numbered menu, its choices. A session row carries the one pending now (`question`), so a page
/// opened after it appeared — a reload, another device, a hub's mirrored row — can answer it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Question {
    /// The question in full: the `(y/n)` line, or a menu's lines above its choices (box borders
    /// dropped), one per line.
    pub text: String,
    /// A numbered menu's choices in order, without their numbers (empty for a `(y/n)` prompt).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// The menu is a selector (a `❯` marks the current choice): pressing the digit answers it,
    /// no Enter after.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub select: bool,
}

/// A choice line of a numbered menu (`❯ 1. Yes`, `  2. No`): its number and label.
fn menu_choice(line: &str) -> Option<(u32, bool, String)> {
    let t = line.trim_matches(|c: char| c.is_whitespace() || c == '│');
    let (marked, t) = match t.strip_prefix('❯').or_else(|| t.strip_prefix('>')) {
        Some(rest) => (true, rest.trim_start()),
        None => (false, t),
    };
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    let n: u32 = t[..digits].parse().ok()?;
    let label = t[digits..].strip_prefix(". ")?.trim();
    (!label.is_empty()).then(|| (n, marked, label.to_owned()))
}

/// [`question_on_screen`] with what a UI needs to answer it: the full question and a numbered
/// menu's choices (1, 2, 3… in order, at most 9, near the bottom of the screen).
pub fn question_detail(screen: &str) -> Option<Question> {
    let line = question_on_screen(screen)?;
    let rows: Vec<&str> = screen.lines().collect();
    let last = rows.iter().rposition(|l| !l.trim().is_empty())?;
    let from = last.saturating_sub(24);
    // The lowest run of numbered choices counting up from 1.
    let mut end = None;
    for i in (from..=last).rev() {
        if menu_choice(rows[i]).is_some() {
            end = Some(i);
            break;
        }
    }
    let menu = end.and_then(|end| {
        let mut start = end;
        while start > from && menu_choice(rows[start - 1]).is_some() {
            start -= 1;
        }
        let choices: Vec<(u32, bool, String)> = rows[start..=end]
            .iter()
            .filter_map(|l| menu_choice(l))
            .collect();
        let counts_up = choices.iter().enumerate().all(|(i, c)| c.0 == i as u32 + 1);
        (counts_up && choices.len() >= 2 && choices.len() <= 9).then_some((start, choices))
    });
    let Some((start, choices)) = menu else {
        return Some(Question {
            text: line,
            options: Vec::new(),
            select: false,
        });
    };
    // The question: the text lines right above the choices, up to a blank line or a box's
    // top (at most 6 lines).
    let border = |l: &str| l.trim().chars().all(|c| "╭╮╰╯─│┌┐└┘ ".contains(c));
    let mut text = Vec::new();
    for l in rows[from..start].iter().rev() {
        if l.trim().is_empty() || border(l) || text.len() == 6 {
            break;
        }
        text.push(
            l.trim_matches(|c: char| c.is_whitespace() || c == '│')
                .to_owned(),
        );
    }
    text.reverse();
    Some(Question {
        text: if text.is_empty() {
            line
        } else {
            text.join("\n")
        },
        select: choices.iter().any(|c| c.1),
        options: choices.into_iter().map(|c| c.2).collect(),
    })
}

/// The agent state from the observations.
pub fn agent_state(
    shell: Option<ShellState>,
    screen_tail: &str,
    output_since_detect: bool,
) -> AgentState {
    agent_state_from_marks(
        shell,
        question_on_screen(screen_tail).is_some(),
        screen_tail.contains("suggest: ["),
        output_since_detect,
    )
}

/// [`agent_state`] from what was read off the screen: a question waits (`question`), the
/// `suggest: [` completion marker shows (`completed`).
pub fn agent_state_from_marks(
    shell: Option<ShellState>,
    question: bool,
    completed: bool,
    output_since_detect: bool,
) -> AgentState {
    if !output_since_detect {
        return AgentState::Starting;
    }
    if shell == Some(ShellState::Busy) {
        return AgentState::Working;
    }
    if question {
        return AgentState::AwaitingInput;
    }
    if completed {
        AgentState::Completed
    } else {
        AgentState::Idle
    }
}

/// A rate-limit notice on screen: the line's text and, when the line carries it in the
/// `…|<unix seconds>` form agents print, the reset time in Unix milliseconds.
pub fn rate_limit_on_screen(screen_tail: &str) -> Option<(String, Option<u64>)> {
    let marks = [
        "rate limit",
        "usage limit",
        "limit reached",
        "quota exceeded",
        "too many requests",
    ];
    let line = screen_tail.lines().rev().find(|l| {
        let l = l.to_ascii_lowercase();
        marks.iter().any(|m| l.contains(m))
    })?;
    let text = line.trim();
    let reset_at = text.rsplit_once('|').and_then(|(_, t)| {
        let t = t.trim();
        (t.len() == 10 && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse::<u64>().ok().map(|s| s * 1000))
            .flatten()
    });
    Some((text.to_owned(), reset_at))
}

/// An error an agent reports on screen: the last line that starts (after a bullet or tree
/// glyph) with `API Error` or `Error:`.
pub fn error_on_screen(screen_tail: &str) -> Option<String> {
    screen_tail.lines().rev().find_map(|l| {
        let t = l.trim_start_matches(|c: char| {
            c.is_whitespace() || matches!(c, '●' | '⎿' | '│' | '✗' | '×' | '!' | '-' | '*')
        });
        (t.starts_with("API Error") || t.starts_with("Error:")).then(|| t.trim_end().to_owned())
    })
}

/// Whether a process is a persistent integration helper an agent keeps running (an MCP
/// server, the tuic bridge, a language server, a keep-awake or key agent) rather than work.
pub fn is_helper(comm: &str) -> bool {
    let c = comm.to_ascii_lowercase();
    c.contains("mcp")
        || c.starts_with("tuic")
        || c.contains("lsp")
        || c.contains("language-server")
        || c.contains("language_server")
        || matches!(c.as_str(), "caffeinate" | "ssh-agent" | "gpg-agent")
}

/// Whether process `pid` has a live descendant that is not a helper (its background work),
/// from the `/proc/<pid>/task/<tid>/children` lists. Helpers' own children count as helpers.
pub fn background_work(pid: i32) -> bool {
    let mut stack = children(pid);
    let mut visited = 0;
    while let Some(p) = stack.pop() {
        visited += 1;
        if visited > 4096 {
            break;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if rest.trim_start().starts_with(['Z', 'X']) {
            continue;
        }
        let comm = head.split_once('(').map_or("", |(_, c)| c);
        if is_helper(comm) {
            continue;
        }
        return true;
    }
    false
}

fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// The foreground process group leader's name and arguments, from `/proc`.
/// Whether process `pid` is stopped (`T`, job control: `session action=pause` sends
/// SIGSTOP) — the row's `standby`.
pub fn stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().next().map(|st| st == "T")
        })
        .unwrap_or(false)
}

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
    fn a_menu_question_comes_whole_with_its_numbered_choices() {
        let screen = "$ claude\n╭────────────────────────────╮\n│ Edit file                  │\n╰────────────────────────────╯\n Do you want to make this edit to foo.rs?\n Lines 3-9 change.\n ❯ 1. Yes\n   2. Yes, and don't ask again this session\n   3. No, and tell Claude what to do differently (esc)\n\n";
        let q = question_detail(screen).unwrap();
        assert_eq!(
            q.text,
            "Do you want to make this edit to foo.rs?\nLines 3-9 change."
        );
        assert_eq!(
            q.options,
            [
                "Yes",
                "Yes, and don't ask again this session",
                "No, and tell Claude what to do differently (esc)"
            ]
        );
        assert!(q.select);
        // A yes/no prompt: the line, no choices.
        let q = question_detail("build ok\nDeploy now? (y/n) ").unwrap();
        assert_eq!(q.text, "Deploy now? (y/n)");
        assert!(q.options.is_empty() && !q.select);
        // Numbers that do not count up from 1 are not a menu; no question, no detail.
        let q = question_detail("Do you want to continue?\n 2. b\n 5. c\n").unwrap();
        assert!(q.options.is_empty());
        assert_eq!(
            question_detail("$ ls\n1. not a question\n2. at all\n"),
            None
        );
    }

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
    fn rate_limits_and_errors_on_screen() {
        assert_eq!(
            rate_limit_on_screen("work\nClaude usage limit reached|1767225600\n> "),
            Some((
                "Claude usage limit reached|1767225600".into(),
                Some(1_767_225_600_000)
            ))
        );
        assert_eq!(
            rate_limit_on_screen("  5-hour limit reached ∙ resets 3pm  \n"),
            Some(("5-hour limit reached ∙ resets 3pm".into(), None))
        );
        assert_eq!(rate_limit_on_screen("all good\n> "), None);
        assert_eq!(
            error_on_screen("● thinking\n  ⎿  API Error: 529 overloaded\n> "),
            Some("API Error: 529 overloaded".into())
        );
        assert_eq!(
            error_on_screen("Error: ENOENT x\n"),
            Some("Error: ENOENT x".into())
        );
        assert_eq!(error_on_screen("no Error: here mid-line\n"), None);
    }

    #[test]
    fn helpers_are_not_work() {
        assert!(is_helper("github-mcp-server"));
        assert!(is_helper("tuic-bridge"));
        assert!(is_helper("rust-analyzer-lsp"));
        assert!(!is_helper("cargo"));
        assert!(!is_helper("sleep"));
    }

    #[test]
    fn background_work_sees_a_live_child_but_not_a_helper() {
        let mut work = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 3 & wait"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = work.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !background_work(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "sleep child never seen"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = work.kill();
        let _ = work.wait();
        assert!(!background_work(std::process::id() as i32 + 0x3fff_0000));
    }

    #[test]
    fn one_state_per_session() {
        use SessionState as S;
        let idle = Some(ShellState::Idle);
        let base = StateInputs {
            shell: idle,
            foreground_is_shell: true,
            ..StateInputs::default()
        };
        let cases = [
            (
                StateInputs {
                    exited: true,
                    question: true,
                    ..base
                },
                S::Exited,
            ),
            (
                StateInputs {
                    shell: Some(ShellState::Busy),
                    question: true,
                    ..base
                },
                S::Working,
            ),
            (
                StateInputs {
                    question: true,
                    command_running: true,
                    ..base
                },
                S::NeedsInput,
            ),
            (
                StateInputs {
                    agent: Some(AgentState::AwaitingInput),
                    ..base
                },
                S::NeedsInput,
            ),
            (
                StateInputs {
                    agent: Some(AgentState::Starting),
                    ..base
                },
                S::Working,
            ),
            (
                StateInputs {
                    agent: Some(AgentState::Working),
                    ..base
                },
                S::Working,
            ),
            (
                StateInputs {
                    agent: Some(AgentState::Idle),
                    ..base
                },
                S::Done,
            ),
            (
                StateInputs {
                    agent: Some(AgentState::Completed),
                    ..base
                },
                S::Done,
            ),
            (
                StateInputs {
                    command_running: true,
                    ..base
                },
                S::Working,
            ),
            // A quiet shell at its prompt is idle, not done: done is an agent's.
            (base, S::Idle),
            (
                StateInputs {
                    shell: None,
                    ..base
                },
                S::Idle,
            ),
            // The session's own program is not a shell (`sleep 100`, htop, vim run directly):
            // quiet, it is still working.
            (
                StateInputs {
                    foreground_is_shell: false,
                    ..base
                },
                S::Working,
            ),
        ];
        for (i, (inputs, want)) in cases.into_iter().enumerate() {
            assert_eq!(session_state(inputs), want, "case {i}: {inputs:?}");
        }
        assert_eq!(
            serde_json::to_value(S::NeedsInput).unwrap(),
            serde_json::json!("needs_input")
        );
        assert_eq!(
            serde_json::to_value(S::Idle).unwrap(),
            serde_json::json!("idle")
        );
        assert!(is_shell("bash") && is_shell("-zsh") && is_shell("/bin/sh"));
        assert!(!is_shell("sleep") && !is_shell("htop") && !is_shell("vim"));
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
