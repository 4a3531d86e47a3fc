//! The server instructions carried by `initialize` and `server/discover`, and served at
//! `GET /mcp/instructions`.
//!
//! A rule a tool description carries is not repeated here: a client reading both would pay
//! twice, and a client reading only descriptions would otherwise miss it. What stays is what
//! belongs to no single tool (worktrees, the one-call submit rule, mail and progress habits).
//! Rendering reads nothing from the host: [`InstructionContext`] is passed in, so the byte
//! budget test is reproducible.

/// Empty-state byte budget of the classic instructions (checked by the tests).
#[cfg(test)]
pub(crate) const CLASSIC_BUDGET: usize = 1600;
/// Empty-state byte budget of the collapsed (lazy discovery) instructions (checked by the
/// tests).
#[cfg(test)]
pub(crate) const COLLAPSED_BUDGET: usize = 1664;

/// The dynamic facts the instructions mention.
#[derive(Debug, Clone, Default)]
pub(crate) struct InstructionContext {
    /// Registered repository roots.
    pub repos: Vec<String>,
    /// Live sessions as `alias (cwd)`.
    pub sessions: Vec<String>,
    /// Registered peer count.
    pub peers: usize,
}

const ACK: &str = "You are connected to TUIC (tuicommander), the terminal host you run in. \
Say \"TUIC connected\" once at the start of your first reply on this connection, never again.\n";

const RULES: &str = "\nRules:\n\
- Worktrees: never run git worktree add/remove yourself; use repo action=worktree_create / worktree_remove so TUIC tracks them.\n\
- Submit: to send a command to another agent's terminal use ONE call, session action=submit with the whole text; never split text and Enter across calls, never poll-type.\n\
- Done: end a finished task with the marker line `suggest: [next step, ...]`; without it TUIC treats you as idle, not completed. Blocked on the user: ui action=toast sound=attention.\n\
- Mail: a line starting with [TUIC] in your terminal is a mail notice; read it with agent action=inbox before continuing. Urgent mail outranks your current step.\n\
- Progress: report each material phase change with progress (one line); report blockers at once.\n\
- Intent: at the start of every user task and on each material phase change, print `intent: <what you now do>` on its own line (never on the TUIC connected line); TUIC journals it.\n";

const CLASSIC_TOOLS: &str = "\nTools: session, agent, task, repo, ui, voice and friends are listed in tools/list with their actions; their descriptions are authoritative.\n";

const COLLAPSED_TOOLS: &str = "\nLazy discovery: tools/list shows only search_tools, get_tool_schema, call_tool (and progress). \
Call search_tools with keywords first, then get_tool_schema for the exact arguments, then call_tool {name, arguments}. \
Every TUIC tool (session, agent, task, repo, ui, voice, ...) is reachable this way.\n";

/// Renders the instructions for one surface.
pub(crate) fn render(ctx: &InstructionContext, collapsed: bool) -> String {
    let mut s = String::with_capacity(2048);
    s.push_str(ACK);
    s.push_str(RULES);
    s.push_str(if collapsed {
        COLLAPSED_TOOLS
    } else {
        CLASSIC_TOOLS
    });
    if !ctx.repos.is_empty() || !ctx.sessions.is_empty() || ctx.peers > 0 {
        s.push_str("\nState:\n");
        if !ctx.repos.is_empty() {
            s.push_str(&format!("- repos: {}\n", ctx.repos.join(", ")));
        }
        if !ctx.sessions.is_empty() {
            s.push_str(&format!("- sessions: {}\n", ctx.sessions.join(", ")));
        }
        if ctx.peers > 0 {
            s.push_str(&format!("- peers: {}\n", ctx.peers));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::mcp::registry::Registry;

    /// Measures every surface a client receives against its ceiling.
    #[test]
    fn mcp_instruction_surface_bytes_stay_within_budget() {
        let empty = InstructionContext::default();
        let classic = render(&empty, false);
        let collapsed = render(&empty, true);
        assert!(
            classic.len() <= CLASSIC_BUDGET,
            "classic {} > {CLASSIC_BUDGET}",
            classic.len()
        );
        assert!(
            collapsed.len() <= COLLAPSED_BUDGET,
            "collapsed {} > {COLLAPSED_BUDGET}",
            collapsed.len()
        );
        let reg = Registry::default();
        let mut all = Config::default();
        all.disabled_native_tools.clear();
        let surfaces = [
            ("instructions.classic.empty", classic.len(), CLASSIC_BUDGET),
            (
                "instructions.collapsed.empty",
                collapsed.len(),
                COLLAPSED_BUDGET,
            ),
            (
                "tools_list.default",
                serde_json::to_string(&reg.list(&Config::default(), false))
                    .unwrap()
                    .len(),
                // 14,000 before the story, automations and workflow tools (issue 19: +2.6 KB)
                // and the git-backed repo actions; 18,500 before the coordinator's
                // workflow_launch and workflow_story_create (+0.9 KB, 19,220 B measured);
                // 20,100 with the spec's `secret` tool (issue 47: +0.8 KB, 20,007 B measured);
                // spawn's spec parameters model and run_config (issue 45: +80 B after trimming
                // send's text); 20,700 with repo diff_summary/diff_file and ui tab's inputs
                // (issue 43: +0.45 KB after trimming, 20,637 B measured); +206 B for session
                // answer (ACP permission requests) and delivery_path acp_inbox_resource (issue
                // 48: 20,638 B before, 20,844 B after); the three meta-tools listed on the full
                // surface (issue 44: exactly their 590 B after trimming their descriptions,
                // `registry::meta::meta_listings`); secret run's consent sentence (issue 47,
                // the spec's consent templates: 78 B).
                20_906 + 590 + 78,
            ),
            (
                "tools_list.all_enabled",
                serde_json::to_string(&reg.list(&all, false)).unwrap().len(),
                // 21,000 with `secret` (issue 47); spawn's model and run_config (issue 45, +80 B);
                // repo diff actions and ui tab's inputs (issue 43, 21,620 B measured); session
                // answer and acp_inbox_resource (issue 48: +206 B, 21,827 B measured); the
                // meta-tools on the full surface (issue 44, their 590 B); secret run's consent
                // sentence (issue 47, 78 B).
                21_906 + 590 + 78,
            ),
            (
                "tools_list.collapsed",
                serde_json::to_string(&reg.list(&Config::default(), true))
                    .unwrap()
                    .len(),
                2_000,
            ),
        ];
        for (name, bytes, ceiling) in surfaces {
            assert!(
                bytes <= ceiling,
                "{name}: {bytes} bytes > ceiling {ceiling}"
            );
        }
        if let Ok(path) = std::env::var("TUIC_MCP_SURFACE_DUMP") {
            let dump: serde_json::Map<String, serde_json::Value> = [
                (
                    "instructions.classic.empty".to_string(),
                    classic.clone().into(),
                ),
                (
                    "instructions.collapsed.empty".to_string(),
                    collapsed.clone().into(),
                ),
                (
                    "tools_list.default".to_string(),
                    serde_json::to_string(&reg.list(&Config::default(), false))
                        .unwrap()
                        .into(),
                ),
            ]
            .into_iter()
            .collect();
            std::fs::write(path, serde_json::to_vec_pretty(&dump).unwrap()).unwrap();
        }
    }

    #[test]
    fn submit_rule_is_pinned_in_both_modes_and_catalogue_is_not_repeated() {
        for collapsed in [false, true] {
            let s = render(&InstructionContext::default(), collapsed);
            assert!(s.contains("use ONE call, session action=submit with the whole text"));
            assert!(s.contains("never run git worktree add/remove"));
            // The journal's observed intent kind depends on agents printing the marker alone
            // on a line the parser reads (`progress::intent::marker`).
            let rule = s
                .lines()
                .find(|l| l.starts_with("- Intent:"))
                .expect("the intent rule");
            assert!(
                rule.contains("`intent: <what you now do>` on its own line"),
                "{rule}"
            );
            assert!(rule.contains("start of every user task"), "{rule}");
            assert_eq!(
                crate::progress::intent::marker("intent: <what you now do>"),
                Some("<what you now do>")
            );
            // The per-action catalogue lives in tool descriptions only.
            assert!(!s.contains("keep_open"));
        }
    }
}
