//! What a session's row derives from `/proc` and the screen, kept ready: the foreground process,
//! the agent seen in it, its background work, and the screen's question / completion marks.
//!
//! A [`Probe`] is taken by [`Session::probe`] (the foreground process group from the PTY, its
//! name from `/proc`, and for agents their descendants and their screen). The session monitor
//! takes one per live session every tick and stores it, so `GET /sessions` and `session
//! action=list` assemble rows from ready state without touching `/proc` or the screen
//! ([`Session::listed_row`]); single-session readers that decide something (submit, wake,
//! status) take a fresh one ([`Session::row`]). Time-derived parts (`shell_state`, and
//! `agent_state` while output streams) are computed when the row is built, from the session's
//! own output and input stamps, so they are never stale; the rest is at most one monitor tick
//! old. The row's fields are assembled in one place (`Session::build_row`), so a new field
//! needs no change here.

use std::sync::atomic::Ordering;

use super::{Session, activity, lock};

/// The derived state of one session at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probe {
    /// The foreground process group leader's name (`None` once exited or when unknown).
    pub foreground_process: Option<String>,
    /// A coding agent was detected in the foreground at this probe.
    pub agent_in_foreground: bool,
    /// The foreground agent has a live descendant doing work (helpers excluded).
    pub background_work: bool,
    /// The foreground process group leader is stopped (paused): the row's `standby`.
    pub standby: bool,
    /// A question waits on screen (read for every session, for the row's `state`).
    pub question: bool,
    /// That question in full with its choices, kept while it shows (the row's `question`).
    pub question_detail: Option<activity::Question>,
    /// The foreground process group is not the session's own process: a command started from
    /// the shell runs.
    pub command_running: bool,
    /// For sessions with a detected agent: the completion marker is on screen.
    pub completed: bool,
    /// The feed generation the screen marks were read at (`None`: not read).
    screen_at: Option<u64>,
}

impl Session {
    /// Reads the derived state now (the PTY's foreground group, `/proc`, and an agent's screen
    /// when it changed since `prev` was read), updates the detected agent, and stores it as
    /// the session's ready state. Blocking (`/proc`): call off the async workers.
    pub fn probe(&self) -> Probe {
        let prev = lock(&self.probe).clone();
        let pgid = if self.exit().is_none() {
            lock(&self.master).process_group_leader()
        } else {
            None
        };
        let fg = pgid.and_then(activity::foreground_process);
        let detected = fg
            .as_ref()
            .and_then(|(comm, argv)| activity::detect_agent(comm, argv));
        let agent = {
            let mut a = lock(&self.agent);
            match (detected, *a) {
                (Some(name), Some((prev, _))) if prev == name => {}
                // Output after the input that launched the agent (or any output, when the
                // agent is the session's own program) shows it has started.
                (Some(name), _) => *a = Some((name, self.last_input_ms.load(Ordering::Relaxed))),
                (None, _) => {}
            }
            *a
        };
        // Only an agent in the foreground can have background work of its own.
        let background_work = detected.is_some() && pgid.is_some_and(activity::background_work);
        let mut p = Probe {
            foreground_process: fg.map(|(comm, _)| comm),
            agent_in_foreground: detected.is_some(),
            background_work,
            standby: pgid.is_some_and(activity::stopped),
            command_running: pgid.is_some_and(|g| Some(g as u32) != self.pid),
            ..Probe::default()
        };
        // The feed generation, bumped after each read is fed: the screen changes only with
        // output (a resize clears the stamp). Read before the screen, so a feed racing the
        // read makes the next probe read it again.
        let fed = *self.wake.borrow();
        match prev {
            Some(q) if q.screen_at == Some(fed) => {
                p.question = q.question;
                p.question_detail = q.question_detail;
                p.completed = q.completed;
                p.screen_at = Some(fed);
            }
            // Bulk plain text is still arriving in a session without an agent: reading the
            // screen would apply the held-back text on every tick. Keep the last marks and read
            // again once the output settles (the state is `working` meanwhile anyway).
            Some(q) if agent.is_none() && self.screen_pending() => {
                p.question = q.question;
                p.question_detail = q.question_detail;
            }
            _ => {
                let tail = self.screen().grid.screen().join("\n");
                p.question_detail = activity::question_detail(&tail);
                p.question = p.question_detail.is_some();
                p.completed = agent.is_some() && tail.contains("suggest: [");
                p.screen_at = Some(fed);
            }
        }
        *lock(&self.probe) = Some(p.clone());
        p
    }

    /// The stored derived state, or a fresh probe when none was taken yet.
    pub fn probed(&self) -> Probe {
        let stored = lock(&self.probe).clone();
        stored.unwrap_or_else(|| self.probe())
    }

    /// Forgets the screen marks, so the next probe reads the screen again (after a resize).
    pub(super) fn screen_changed(&self) {
        if let Some(p) = lock(&self.probe).as_mut() {
            p.screen_at = None;
        }
    }

    /// The list row from the ready state (see the module docs): no `/proc`, no screen.
    pub fn listed_row(&self) -> super::SessionRow {
        let p = self.probed();
        self.build_row(&p)
    }

    /// The question pending on screen at the last probe (no `/proc`, no screen read).
    pub fn pending_question(&self) -> Option<activity::Question> {
        lock(&self.probe).as_ref()?.question_detail.clone()
    }

    /// The list row if the monitor has probed this session already.
    pub(super) fn ready_row(&self) -> Option<super::SessionRow> {
        let p = lock(&self.probe).clone()?;
        Some(self.build_row(&p))
    }

    /// The `agent_state` of a detected agent from the probe and the current time.
    pub(super) fn agent_state_from(
        &self,
        p: &Probe,
        shell_state: Option<activity::ShellState>,
        since: u64,
    ) -> activity::AgentState {
        let last = self.last_output_ms.load(Ordering::Relaxed);
        // Millisecond stamps: output in the same millisecond as the launching input (a fast
        // agent answering at once) counts as started; no output at all never does.
        let st = activity::agent_state_from_marks(
            shell_state,
            p.question,
            p.completed,
            last > 0 && last >= since,
        );
        match st {
            activity::AgentState::Idle | activity::AgentState::Completed if p.background_work => {
                activity::AgentState::Working
            }
            st => st,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use serde_json::json;

    use crate::session::{CreateRequest, Registry, Session, SessionEnv};

    /// A registry of its own, outside any node: the session layer needs only its environment.
    fn registry(dir: &std::path::Path) -> Arc<Registry> {
        Arc::new(Registry::new(
            dir,
            SessionEnv::standalone(dir.join("mcp.sock")),
        ))
    }

    fn create(reg: &Arc<Registry>, cwd: &std::path::Path, args: &[&str]) -> Arc<Session> {
        reg.create(CreateRequest {
            shell: Some("/bin/sh".into()),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            cwd: Some(cwd.display().to_string()),
            ..CreateRequest::default()
        })
        .unwrap()
    }

    /// The row as a fresh probe sees it, as JSON (what the list serves).
    fn fresh(s: &Session) -> serde_json::Value {
        json!(s.row())
    }

    /// Waits (generously) until `f` holds, re-checking after each monitor tick.
    async fn until_tick(reg: &Registry, what: &str, mut f: impl FnMut() -> bool) {
        let mut ticks = reg.monitor_ticks();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !f() {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "timed out waiting for {what}");
            let _ = tokio::time::timeout(left, ticks.changed()).await;
        }
    }

    /// Waits until a whole monitor round started (and ended) after this call.
    async fn two_ticks(reg: &Registry) {
        let mut ticks = reg.monitor_ticks();
        ticks.borrow_and_update();
        for _ in 0..2 {
            tokio::time::timeout(Duration::from_secs(30), ticks.changed())
                .await
                .expect("a monitor tick")
                .unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn listed_rows_match_a_fresh_probe_and_follow_the_foreground() {
        let dir = tempfile::tempdir().unwrap();
        let n = registry(dir.path());
        let work = dir.path().join("w");
        std::fs::create_dir(&work).unwrap();
        let shell = create(&n, &work, &[]);
        let sleeper = create(&n, &work, &["-c", "exec sleep 600"]);
        let quiet = create(&n, &work, &["-c", "printf 'ready\\n'; exec cat"]);
        // Settle: the exec'd programs are in the foreground and every shell went quiet.
        until_tick(&n, "the foregrounds", || {
            fresh(&sleeper)["foreground_process"] == "sleep"
                && fresh(&quiet)["foreground_process"] == "cat"
                && [&shell, &sleeper, &quiet]
                    .iter()
                    .all(|s| fresh(s)["shell_state"] != "busy")
        })
        .await;
        // Once a whole monitor round ran after the state settled, the listed rows are exactly
        // what a fresh probe says.
        two_ticks(&n).await;
        let listed: Vec<serde_json::Value> = n.rows().iter().map(|r| json!(r)).collect();
        let mut probed: Vec<serde_json::Value> = [&shell, &sleeper, &quiet]
            .iter()
            .map(|s| fresh(s))
            .collect();
        probed.sort_by(|a, b| a["alias"].as_str().cmp(&b["alias"].as_str()));
        assert_eq!(listed, probed);
        assert_eq!(listed.len(), 3);
        // Every session probed: the async list path reads the same rows.
        let ready: Vec<serde_json::Value> = n
            .ready_rows()
            .expect("every session probed")
            .iter()
            .map(|r| json!(r))
            .collect();
        assert_eq!(ready, listed);

        // A foreground change shows in the list within a tick of a fresh probe seeing it.
        shell.write(b"exec sleep 600\n", &n.capture).unwrap();
        until_tick(&n, "the fresh probe to see sleep", || {
            fresh(&shell)["foreground_process"] == "sleep"
        })
        .await;
        two_ticks(&n).await;
        let row = n
            .rows()
            .into_iter()
            .find(|r| r.session_id == shell.id)
            .unwrap();
        assert_eq!(row.foreground_process.as_deref(), Some("sleep"));
        for s in [&shell, &sleeper, &quiet] {
            s.close();
        }
    }
}
