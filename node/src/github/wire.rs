//! The typed GitHub REST answers this service reads (only the fields used).

use serde::Deserialize;
use serde_json::Value;

// Typed GitHub answers: only the fields used.
#[derive(Debug, Deserialize)]
pub(super) struct User {
    pub(super) login: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct GitRef {
    #[serde(rename = "ref")]
    pub(super) name: String,
    pub(super) sha: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct Pull {
    pub(super) number: u64,
    pub(super) title: String,
    pub(super) state: String,
    #[serde(default)]
    pub(super) draft: bool,
    pub(super) user: Option<User>,
    pub(super) head: GitRef,
    pub(super) base: GitRef,
    pub(super) html_url: String,
    pub(super) created_at: Option<String>,
    pub(super) updated_at: Option<String>,
    pub(super) merged_at: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Label {
    pub(super) name: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct Issue {
    pub(super) number: u64,
    pub(super) title: String,
    pub(super) state: String,
    pub(super) state_reason: Option<String>,
    pub(super) user: Option<User>,
    #[serde(default)]
    pub(super) labels: Vec<Label>,
    pub(super) html_url: String,
    #[serde(default)]
    pub(super) comments: u64,
    pub(super) created_at: Option<String>,
    pub(super) updated_at: Option<String>,
    pub(super) closed_at: Option<String>,
    /// Present on pull requests (the issues listing includes them).
    pub(super) pull_request: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Runs {
    pub(super) workflow_runs: Vec<Run>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Run {
    pub(super) id: u64,
    pub(super) name: Option<String>,
    pub(super) head_sha: String,
    pub(super) head_branch: Option<String>,
    pub(super) status: Option<String>,
    pub(super) conclusion: Option<String>,
    pub(super) html_url: String,
    pub(super) run_number: Option<u64>,
    pub(super) created_at: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Jobs {
    pub(super) jobs: Vec<Job>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Job {
    pub(super) id: u64,
    pub(super) run_id: Option<u64>,
    pub(super) name: String,
    pub(super) head_sha: String,
    pub(super) conclusion: Option<String>,
    pub(super) html_url: Option<String>,
    #[serde(default)]
    pub(super) steps: Vec<Step>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Step {
    pub(super) name: String,
    pub(super) number: u64,
    pub(super) conclusion: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ErrorBody {
    pub(super) message: Option<String>,
}

pub(super) fn failed(conclusion: Option<&str>) -> bool {
    matches!(
        conclusion,
        Some("failure" | "timed_out" | "startup_failure")
    )
}
