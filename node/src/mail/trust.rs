//! Claude Code's startup folder-trust question, answered for spawned children when
//! `agents.claude.skip_trust_dialog` is on (the default).
//!
//! Only the exact question is answered: the dialog's title and its whole paragraph (compared
//! with the terminal's wrapping undone), exactly the two options `1. Yes, I trust this folder`
//! and `2. No, exit`, and the selection still on the option the release focuses by default
//! (`1.`; a selection someone moved is left alone). Any other question on the same dialog —
//! managed settings, MCP servers, a different wording — is never answered. The answer is one
//! Enter, written once; the watcher ends then, at the child's exit, or after
//! `mail_prompt_delivery_timeout_ms`. Codex needs no answer: `mail::launch` starts it with
//! the `trust_level` override instead. Fixture screens and their provenance:
//! `mail/fixtures/README.md`.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::session::Session;
use crate::session::capture::Capture;

/// What the watcher uses of its node: where its task runs, when it stops, how the Enter is
/// written, and how long it watches.
pub(crate) struct TrustWatch {
    pub(crate) tasks: TaskTracker,
    pub(crate) shutdown: CancellationToken,
    pub(crate) capture: Arc<Capture>,
    pub(crate) limit: Duration,
}

const TITLE: &str = "Accessing workspace:";
const QUESTION: &str = "Quick safety check: Is this a project you created or one you trust? (Like your own code, a well-known open source project, or work from your team). If not, take a moment to review what's in this folder first.";
const YES: &str = "1. Yes, I trust this folder";
const NO: &str = "2. No, exit";
/// The selection marker Claude Code draws before the focused option.
const CURSOR: char = '❯';

/// Whether `screen` shows Claude's startup trust question, unanswered, with the selection on
/// `Yes, I trust this folder`.
pub(crate) fn claude_trust_question(screen: &str) -> bool {
    let flat = screen.split_whitespace().collect::<Vec<_>>().join(" ");
    if !flat.contains(TITLE) || !flat.contains(QUESTION) {
        return false;
    }
    let options: Vec<(bool, &str)> = screen
        .lines()
        .map(str::trim)
        .filter_map(|l| {
            let (selected, rest) = match l.strip_prefix(CURSOR) {
                Some(r) => (true, r.trim_start()),
                None => (false, l),
            };
            let numbered = rest
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
            numbered.then_some((selected, rest))
        })
        .collect();
    options == [(true, YES), (false, NO)]
}

/// Watches a spawned Claude child's screen and answers the trust question once.
pub(crate) fn answer_claude(w: TrustWatch, s: Arc<Session>) {
    let rt = tokio::runtime::Handle::current();
    let _g = rt.enter();
    let TrustWatch {
        tasks,
        shutdown,
        capture,
        limit,
    } = w;
    tasks.spawn(async move {
        let deadline = tokio::time::Instant::now() + limit;
        let mut out = s.wake();
        loop {
            if s.exit().is_some() {
                return;
            }
            let screen = s.screen().grid.screen().join("\n");
            if claude_trust_question(&screen) {
                let (s2, cap) = (s.clone(), capture.clone());
                let r = tokio::task::spawn_blocking(move || s2.write(b"\r", &cap)).await;
                match r {
                    Ok(Ok(())) => {
                        tracing::info!(source = "agent_spawn", session = %s.id, "answered Claude Code's folder trust question")
                    }
                    _ => {
                        tracing::warn!(source = "agent_spawn", session = %s.id, "could not answer Claude Code's folder trust question")
                    }
                }
                return;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(deadline) => return,
                r = out.changed() => if r.is_err() { return; },
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRUST: &str = include_str!("fixtures/claude_trust_2.1.197.txt");
    const MANAGED: &str = include_str!("fixtures/claude_managed_settings_2.1.197.txt");
    const CODEX: &str = include_str!("fixtures/codex_trust_directory.txt");

    fn at(screen: &str) -> String {
        screen.replace("{cwd}", "/home/u/fresh-repo")
    }

    #[test]
    fn the_exact_trust_question_is_recognised() {
        assert!(claude_trust_question(&at(TRUST)));
        // Wrapped differently (a narrower terminal): still the same question.
        let narrow = at(TRUST).replace("(Like your\n own code", "(Like\n your own code");
        assert!(claude_trust_question(&narrow));
    }

    #[test]
    fn other_questions_and_moved_selections_are_left_alone() {
        assert!(!claude_trust_question(&at(MANAGED)), "another question");
        assert!(!claude_trust_question(&at(CODEX)), "Codex's screen");
        let moved = at(TRUST)
            .replace(" ❯ 1. Yes", "   1. Yes")
            .replace("   2. No, exit", " ❯ 2. No, exit");
        assert!(!claude_trust_question(&moved), "selection moved to No");
        let reworded = at(TRUST).replace("one you trust?", "one you own?");
        assert!(!claude_trust_question(&reworded), "a different wording");
        let third = at(TRUST).replace(
            "   2. No, exit\n",
            "   2. No, exit\n   3. Yes, and remember\n",
        );
        assert!(!claude_trust_question(&third), "a third option");
        let answered = at(TRUST).replace(" ❯ 1. Yes, I trust this folder\n   2. No, exit\n", "");
        assert!(!claude_trust_question(&answered), "no options left");
    }
}
