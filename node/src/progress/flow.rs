//! Progress Flow: what an agent session and its subagents are doing, read from the agents' own
//! transcript files (`POST /progress/flow`, `POST /progress/flow/detail`).
//!
//! Claude Code writes the parent transcript to `<config>/projects/<cwd-slug>/<uuid>.jsonl` and
//! each subagent's turns to `<config>/projects/<cwd-slug>/<uuid>/subagents/agent-<id>.jsonl`;
//! the parent holds the `Agent` (formerly `Task`) call with its timestamp and prompt, and the
//! subagent is joined to it by comparing that prompt with the subagent's decoded first
//! message. A subagent whose join fails renders from its own file. Codex writes one rollout
//! log per session under `<CODEX_HOME>/sessions/YYYY/MM/DD/`; it has no subagents.
//!
//! Inputs are a PTY id and an agent id, never a path: every path component comes from the
//! session's cwd, the agent process's environment (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, `HOME`)
//! and the transcript names found on disk. Only sessions identified as `claude` or `codex`
//! are read. Each file is read through a byte cursor kept in [`Cache`], so a refresh parses
//! only what was appended; a line cut off at the end of the file waits for its newline, and a
//! complete line that is not JSON is skipped and counted. Tool results are never kept; tool
//! activity is a count (at most [`MAX_TOOL_NAMES`] names, the rest counted as `other`).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;
use serde_json::{Value, json};

/// Distinct tool names counted per transcript; the rest are `other`.
pub const MAX_TOOL_NAMES: usize = 32;
/// Messages retained per transcript for the detail view (the newest).
pub const MAX_MESSAGES: usize = 200;
/// Characters kept of one message.
pub const MAX_MESSAGE_CHARS: usize = 2_000;
/// Transcript files whose cursors are kept.
const MAX_FILES: usize = 512;
/// Day folders of Codex rollouts looked at, newest first.
const CODEX_DAYS: usize = 14;

/// Why a flow was not built.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// No live or recent session by that id.
    #[error("no session {0}")]
    UnknownSession(String),
    /// The session runs no agent TUIC can read transcripts of.
    #[error(
        "session {id} is not identified as claude or codex ({found}); Progress Flow reads only agent sessions, so another tab's transcript is never shown"
    )]
    NotAnAgent {
        /// Session id.
        id: String,
        /// What was found instead.
        found: String,
    },
    /// The agent has written no transcript yet (or it is not where its environment says).
    #[error("no transcript found for session {0} yet")]
    NoTranscript(String),
    /// The agent id is not among the subagents on disk.
    #[error("session {session} has no subagent {agent}")]
    UnknownAgent {
        /// Session id.
        session: String,
        /// Agent id asked for.
        agent: String,
    },
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
}

/// One message kept for the detail view (tool results never are).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: String,
    /// Its text, cut to [`MAX_MESSAGE_CHARS`].
    pub text: String,
    /// When, as the transcript says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// An `Agent` call in a parent transcript.
#[derive(Debug, Clone, PartialEq)]
struct Spawn {
    tool_use_id: String,
    timestamp: Option<String>,
    description: Option<String>,
    prompt: String,
    subagent_type: Option<String>,
}

/// What a transcript said so far.
#[derive(Debug, Clone, Default)]
struct Parsed {
    session_uuid: Option<String>,
    cwd: Option<String>,
    first_user: Option<String>,
    first_ts: Option<String>,
    last_ts: Option<String>,
    spawns: Vec<Spawn>,
    finished: HashSet<String>,
    tools: BTreeMap<String, u64>,
    other_tools: u64,
    messages: VecDeque<Message>,
    message_count: u64,
    last_reply: Option<String>,
}

/// Which agent wrote a file (its line format).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Claude,
    Codex,
}

/// A file's byte cursor and what was parsed up to it.
#[derive(Debug, Clone)]
struct FileState {
    format: Format,
    offset: u64,
    lines: u64,
    skipped: u64,
    pending_bytes: u64,
    parsed: Parsed,
}

impl FileState {
    fn new(format: Format) -> Self {
        Self {
            format,
            offset: 0,
            lines: 0,
            skipped: 0,
            pending_bytes: 0,
            parsed: Parsed::default(),
        }
    }
}

/// Per-path byte cursors and parsed state, and which transcript each PTY claimed.
#[derive(Debug, Default)]
pub struct Cache {
    files: Mutex<HashMap<PathBuf, FileState>>,
    claims: Mutex<HashMap<String, PathBuf>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    s.chars().take(max - 1).chain(['…']).collect()
}

impl Parsed {
    fn tool(&mut self, name: &str) {
        if let Some(n) = self.tools.get_mut(name) {
            *n += 1;
        } else if self.tools.len() < MAX_TOOL_NAMES {
            self.tools.insert(name.to_owned(), 1);
        } else {
            self.other_tools += 1;
        }
    }

    fn message(&mut self, role: &str, text: &str, ts: Option<&str>) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        if role == "user" && self.first_user.is_none() {
            self.first_user = Some(text.to_owned());
        }
        if role == "assistant" {
            self.last_reply = Some(clip(text, MAX_MESSAGE_CHARS));
        }
        self.message_count += 1;
        if self.messages.len() == MAX_MESSAGES {
            self.messages.pop_front();
        }
        self.messages.push_back(Message {
            role: role.to_owned(),
            text: clip(text, MAX_MESSAGE_CHARS),
            timestamp: ts.map(str::to_owned),
        });
    }

    fn stamp(&mut self, ts: Option<&str>) {
        if let Some(t) = ts {
            if self.first_ts.is_none() {
                self.first_ts = Some(t.to_owned());
            }
            self.last_ts = Some(t.to_owned());
        }
    }

    /// One Claude Code transcript line.
    fn claude(&mut self, v: &Value) {
        let ts = v.get("timestamp").and_then(Value::as_str);
        if self.session_uuid.is_none() {
            self.session_uuid = v
                .get("sessionId")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if self.cwd.is_none() {
            self.cwd = v.get("cwd").and_then(Value::as_str).map(str::to_owned);
        }
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "user" && kind != "assistant" {
            return;
        }
        self.stamp(ts);
        let content = v.pointer("/message/content");
        match content {
            Some(Value::String(s)) => self.message(kind, s, ts),
            Some(Value::Array(items)) => {
                let mut text = String::new();
                for it in items {
                    match it.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            if let Some(t) = it.get("text").and_then(Value::as_str) {
                                if !text.is_empty() {
                                    text.push('\n');
                                }
                                text.push_str(t);
                            }
                        }
                        Some("tool_use") => {
                            let name = it.get("name").and_then(Value::as_str).unwrap_or("unknown");
                            self.tool(name);
                            if name == "Agent" || name == "Task" {
                                let input = it.get("input");
                                let s = |k: &str| {
                                    input
                                        .and_then(|i| i.get(k))
                                        .and_then(Value::as_str)
                                        .map(str::to_owned)
                                };
                                self.spawns.push(Spawn {
                                    tool_use_id: it
                                        .get("id")
                                        .and_then(Value::as_str)
                                        .unwrap_or_default()
                                        .to_owned(),
                                    timestamp: ts.map(str::to_owned),
                                    description: s("description"),
                                    prompt: s("prompt").unwrap_or_default(),
                                    subagent_type: s("subagent_type"),
                                });
                            }
                        }
                        Some("tool_result") => {
                            if let Some(id) = it.get("tool_use_id").and_then(Value::as_str) {
                                self.finished.insert(id.to_owned());
                            }
                        }
                        _ => {}
                    }
                }
                self.message(kind, &text, ts);
            }
            _ => {}
        }
    }

    /// One Codex rollout line.
    fn codex(&mut self, v: &Value) {
        let ts = v.get("timestamp").and_then(Value::as_str);
        let p = v.get("payload").unwrap_or(&Value::Null);
        match v.get("type").and_then(Value::as_str) {
            Some("session_meta") => {
                self.session_uuid = p.get("id").and_then(Value::as_str).map(str::to_owned);
                self.cwd = p.get("cwd").and_then(Value::as_str).map(str::to_owned);
            }
            Some("response_item") => {
                self.stamp(ts);
                match p.get("type").and_then(Value::as_str) {
                    Some("message") => {
                        let role = p.get("role").and_then(Value::as_str).unwrap_or("");
                        if role != "user" && role != "assistant" {
                            return;
                        }
                        let text: Vec<&str> = p
                            .get("content")
                            .and_then(Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .filter_map(|c| c.get("text").and_then(Value::as_str))
                                    .collect()
                            })
                            .unwrap_or_default();
                        self.message(role, &text.join("\n"), ts);
                    }
                    Some("function_call") | Some("custom_tool_call") | Some("local_shell_call") => {
                        let name = p.get("name").and_then(Value::as_str).unwrap_or("shell");
                        self.tool(name);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

/// A file's state after reading what was appended since its cursor.
#[derive(Debug, Clone)]
struct Snapshot {
    lines: u64,
    skipped: u64,
    pending_bytes: u64,
    parsed: Parsed,
}

impl Cache {
    /// Reads `path` from its cursor to the last complete line and returns the state.
    fn read(&self, path: &Path, format: Format) -> std::io::Result<Snapshot> {
        let mut st = lock(&self.files)
            .get(path)
            .filter(|s| s.format == format)
            .cloned()
            .unwrap_or_else(|| FileState::new(format));
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        if len < st.offset {
            // Rewritten or truncated: start over.
            st = FileState::new(format);
        }
        f.seek(SeekFrom::Start(st.offset))?;
        let mut r = BufReader::with_capacity(256 * 1024, f);
        let mut line = Vec::new();
        st.pending_bytes = 0;
        loop {
            line.clear();
            let n = r.read_until(b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            if line.last() != Some(&b'\n') {
                // Cut off mid-line: the writer has not finished it; read it next time.
                st.pending_bytes = n as u64;
                break;
            }
            st.offset += n as u64;
            let body = line.trim_ascii();
            if body.is_empty() {
                continue;
            }
            st.lines += 1;
            match serde_json::from_slice::<Value>(body) {
                Ok(v) => match format {
                    Format::Claude => st.parsed.claude(&v),
                    Format::Codex => st.parsed.codex(&v),
                },
                Err(_) => st.skipped += 1,
            }
        }
        let snap = Snapshot {
            lines: st.lines,
            skipped: st.skipped,
            pending_bytes: st.pending_bytes,
            parsed: st.parsed.clone(),
        };
        let mut files = lock(&self.files);
        if files.len() >= MAX_FILES
            && !files.contains_key(path)
            && let Some(k) = files.keys().next().cloned()
        {
            files.remove(&k);
        }
        files.insert(path.to_owned(), st);
        Ok(snap)
    }

    /// The transcript a PTY reads: its earlier claim while that file exists, else the
    /// newest file among `candidates` that no other PTY claimed.
    fn claim(
        &self,
        pty: &str,
        candidates: Vec<(PathBuf, std::time::SystemTime)>,
    ) -> Option<PathBuf> {
        let mut claims = lock(&self.claims);
        if let Some(p) = claims.get(pty)
            && p.exists()
        {
            return Some(p.clone());
        }
        let taken: HashSet<&PathBuf> = claims
            .iter()
            .filter(|(k, _)| k.as_str() != pty)
            .map(|(_, v)| v)
            .collect();
        let pick = candidates
            .into_iter()
            .filter(|(p, _)| !taken.contains(p))
            .max_by_key(|(_, t)| *t)
            .map(|(p, _)| p)?;
        claims.insert(pty.to_owned(), pick.clone());
        Some(pick)
    }
}

/// Claude's project folder name for a cwd: every character but ASCII letters and digits
/// becomes `-`.
pub fn cwd_slug(cwd: &str) -> String {
    cwd.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// One variable of a process's environment (`/proc/<pid>/environ`).
fn proc_env(pid: i32, key: &str) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    raw.split(|b| *b == 0).find_map(|kv| {
        let s = std::str::from_utf8(kv).ok()?;
        let (k, v) = s.split_once('=')?;
        (k == key && !v.is_empty()).then(|| v.to_owned())
    })
}

/// What a flow is built from: which agent, which pids to read the environment of.
#[derive(Debug, Clone)]
pub struct Target {
    /// PTY id.
    pub session_id: String,
    /// The session's start directory.
    pub cwd: String,
    /// `claude` or `codex` (checked by [`flow`]).
    pub agent_type: Option<String>,
    /// The agent process (foreground group leader) first, then the session's own process.
    pub pids: Vec<i32>,
}

impl Target {
    fn env(&self, key: &str) -> Option<String> {
        self.pids.iter().find_map(|p| proc_env(*p, key))
    }

    fn home(&self) -> Option<PathBuf> {
        self.env("HOME")
            .or_else(|| std::env::var("HOME").ok())
            .map(PathBuf::from)
    }
}

fn jsonl_files(dir: &Path) -> Vec<(PathBuf, std::time::SystemTime)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let at = m.modified().ok()?;
            m.is_file().then(|| (e.path(), at))
        })
        .collect()
}

fn claude_transcript(cache: &Cache, t: &Target) -> Option<PathBuf> {
    let config = t
        .env("CLAUDE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| t.home().map(|h| h.join(".claude")))?;
    let dir = config.join("projects").join(cwd_slug(&t.cwd));
    cache.claim(&t.session_id, jsonl_files(&dir))
}

fn codex_transcript(cache: &Cache, t: &Target) -> Option<PathBuf> {
    let home = t
        .env("CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| t.home().map(|h| h.join(".codex")))?;
    let root = home.join("sessions");
    // sessions/YYYY/MM/DD: the newest day folders first.
    let mut days = Vec::new();
    let sorted = |p: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(p)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v.reverse();
        v
    };
    'outer: for y in sorted(&root) {
        for m in sorted(&y) {
            for d in sorted(&m) {
                days.push(d);
                if days.len() >= CODEX_DAYS {
                    break 'outer;
                }
            }
        }
    }
    let want = std::fs::canonicalize(&t.cwd).unwrap_or_else(|_| PathBuf::from(&t.cwd));
    let mut candidates = Vec::new();
    for d in days {
        for (p, at) in jsonl_files(&d) {
            // The first line (session_meta) names the session's cwd.
            let cwd = std::fs::File::open(&p).ok().and_then(|f| {
                let mut first = String::new();
                BufReader::new(f).read_line(&mut first).ok()?;
                let v: Value = serde_json::from_str(first.trim()).ok()?;
                v.pointer("/payload/cwd")
                    .and_then(Value::as_str)
                    .map(PathBuf::from)
            });
            if cwd.is_some_and(|c| c == want || c == Path::new(&t.cwd)) {
                candidates.push((p, at));
            }
        }
    }
    cache.claim(&t.session_id, candidates)
}

fn subagents(transcript: &Path) -> Vec<(String, PathBuf)> {
    let dir = transcript.with_extension("").join("subagents");
    let mut v: Vec<(String, PathBuf)> = jsonl_files(&dir)
        .into_iter()
        .filter_map(|(p, _)| {
            let stem = p.file_stem()?.to_str()?;
            let id = stem.strip_prefix("agent-")?.to_owned();
            (!id.is_empty()).then_some((id, p))
        })
        .collect();
    v.sort();
    v
}

fn agent_kind(t: &Target) -> Result<Format, FlowError> {
    match t.agent_type.as_deref() {
        Some("claude") => Ok(Format::Claude),
        Some("codex") => Ok(Format::Codex),
        other => Err(FlowError::NotAnAgent {
            id: t.session_id.clone(),
            found: other.map_or_else(|| "no agent detected".into(), |a| format!("agent {a}")),
        }),
    }
}

fn tools_json(p: &Parsed) -> Value {
    let mut m: serde_json::Map<String, Value> =
        p.tools.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    if p.other_tools > 0 {
        m.insert("other".into(), json!(p.other_tools));
    }
    Value::Object(m)
}

/// The subagent rows of a parent, joined to its `Agent` calls.
fn agent_rows(cache: &Cache, parent: &Parsed, transcript: &Path) -> (Vec<Value>, u64) {
    let mut used = HashSet::new();
    let mut rows = Vec::new();
    let mut skipped = 0;
    for (id, path) in subagents(transcript) {
        let Ok(s) = cache.read(&path, Format::Claude) else {
            continue;
        };
        skipped += s.skipped;
        let first = s.parsed.first_user.clone().unwrap_or_default();
        let spawn = parent.spawns.iter().enumerate().find(|(i, sp)| {
            !used.contains(i) && sp.prompt.trim() == first.trim() && !first.is_empty()
        });
        let mut row = json!({
            "agent_id": id,
            "joined": spawn.is_some(),
            "tools": tools_json(&s.parsed),
            "messages": s.parsed.message_count,
            "lines": s.lines,
            "skipped_lines": s.skipped,
        });
        match spawn {
            Some((i, sp)) => {
                used.insert(i);
                row["prompt"] = json!(clip(&sp.prompt, MAX_MESSAGE_CHARS));
                row["started_at"] = json!(sp.timestamp.clone().or(s.parsed.first_ts.clone()));
                row["status"] = json!(if parent.finished.contains(&sp.tool_use_id) {
                    "done"
                } else {
                    "running"
                });
                if let Some(d) = &sp.description {
                    row["description"] = json!(d);
                }
                if let Some(t) = &sp.subagent_type {
                    row["subagent_type"] = json!(t);
                }
            }
            None => {
                row["prompt"] = json!(clip(&first, MAX_MESSAGE_CHARS));
                row["started_at"] = json!(s.parsed.first_ts);
                row["status"] = json!("unknown");
            }
        }
        if let Some(l) = &s.parsed.last_ts {
            row["last_at"] = json!(l);
        }
        if let Some(r) = &s.parsed.last_reply {
            row["report"] = json!(r);
        }
        rows.push(row);
    }
    let unmatched = parent.spawns.len().saturating_sub(used.len()) as u64;
    let _ = skipped;
    (rows, unmatched)
}

fn transcript_of(cache: &Cache, t: &Target) -> Result<(Format, PathBuf), FlowError> {
    let format = agent_kind(t)?;
    let path = match format {
        Format::Claude => claude_transcript(cache, t),
        Format::Codex => codex_transcript(cache, t),
    };
    path.map(|p| (format, p))
        .ok_or_else(|| FlowError::NoTranscript(t.session_id.clone()))
}

/// `POST /progress/flow`: the session's transcript summary and its subagents. Blocking.
pub fn flow(cache: &Cache, t: &Target) -> Result<Value, FlowError> {
    let (format, path) = transcript_of(cache, t)?;
    let s = cache
        .read(&path, format)
        .map_err(|_| FlowError::NoTranscript(t.session_id.clone()))?;
    let (agents, unmatched) = match format {
        Format::Claude => agent_rows(cache, &s.parsed, &path),
        Format::Codex => (Vec::new(), 0),
    };
    let skipped_total = s.skipped
        + agents
            .iter()
            .map(|a| a["skipped_lines"].as_u64().unwrap_or(0))
            .sum::<u64>();
    let mut out = json!({
        "session_id": t.session_id,
        "agent_type": t.agent_type,
        "transcript": {
            "session_uuid": s.parsed.session_uuid,
            "lines": s.lines,
            "skipped_lines": s.skipped,
            "pending_bytes": s.pending_bytes,
            "messages": s.parsed.message_count,
            "tools": tools_json(&s.parsed),
            "spawns": s.parsed.spawns.len(),
        },
        "agents": agents,
        "unmatched_spawns": unmatched,
        "skipped_lines": skipped_total,
    });
    if let Some(r) = &s.parsed.last_reply {
        out["transcript"]["last_reply"] = json!(r);
    }
    if let Some(l) = &s.parsed.last_ts {
        out["transcript"]["last_at"] = json!(l);
    }
    Ok(out)
}

/// `POST /progress/flow/detail`: one subagent's messages (tool results never kept). The
/// agent id must be one of the subagents on disk. Blocking.
pub fn detail(cache: &Cache, t: &Target, agent_id: &str) -> Result<Value, FlowError> {
    if agent_id.is_empty() {
        return Err(FlowError::Invalid("agent_id is required".into()));
    }
    let (format, path) = transcript_of(cache, t)?;
    if format != Format::Claude {
        return Err(FlowError::UnknownAgent {
            session: t.session_id.clone(),
            agent: agent_id.to_owned(),
        });
    }
    let Some((_, sub)) = subagents(&path).into_iter().find(|(id, _)| id == agent_id) else {
        return Err(FlowError::UnknownAgent {
            session: t.session_id.clone(),
            agent: agent_id.to_owned(),
        });
    };
    let parent = cache
        .read(&path, format)
        .map_err(|_| FlowError::NoTranscript(t.session_id.clone()))?;
    let (rows, _) = agent_rows(cache, &parent.parsed, &path);
    let row = rows
        .into_iter()
        .find(|r| r["agent_id"] == agent_id)
        .unwrap_or(Value::Null);
    let s = cache
        .read(&sub, Format::Claude)
        .map_err(|_| FlowError::NoTranscript(t.session_id.clone()))?;
    Ok(json!({
        "session_id": t.session_id,
        "agent": row,
        "messages": s.parsed.messages,
        "message_count": s.parsed.message_count,
        "skipped_lines": s.skipped,
        "pending_bytes": s.pending_bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn line(v: Value) -> String {
        format!("{v}\n")
    }

    #[test]
    fn slug_matches_claudes_folder_names() {
        assert_eq!(cwd_slug("/home/u/my.proj_x"), "-home-u-my-proj-x");
    }

    #[test]
    fn cursors_parse_only_appended_lines_and_count_bad_ones() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        let cache = Cache::default();
        let user = line(json!({"type": "user", "sessionId": "u1", "timestamp": "t0",
            "message": {"role": "user", "content": "do the thing\nwell"}}));
        let reply = line(
            json!({"type": "assistant", "timestamp": "t1", "message": {"role": "assistant",
            "content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "x", "name": "Bash", "input": {}}]}}),
        );
        std::fs::write(&p, format!("{user}not json\n{}", &reply[..15])).unwrap();
        let s = cache.read(&p, Format::Claude).unwrap();
        assert_eq!((s.lines, s.skipped), (2, 1));
        assert_eq!(s.pending_bytes, 15, "the cut line waits for its newline");
        assert_eq!(s.parsed.first_user.as_deref(), Some("do the thing\nwell"));
        assert!(s.parsed.tools.is_empty());
        // The writer finishes the line: only the appended bytes are parsed.
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&reply.as_bytes()[15..]).unwrap();
        drop(f);
        let s = cache.read(&p, Format::Claude).unwrap();
        assert_eq!((s.lines, s.skipped, s.pending_bytes), (3, 1, 0));
        assert_eq!(s.parsed.tools.get("Bash"), Some(&1));
        assert_eq!(s.parsed.last_reply.as_deref(), Some("ok"));
        assert_eq!(s.parsed.message_count, 2);
        // A rewritten (shorter) file starts over.
        std::fs::write(&p, &user).unwrap();
        let s = cache.read(&p, Format::Claude).unwrap();
        assert_eq!((s.lines, s.skipped), (1, 0));
    }

    #[test]
    fn tool_names_are_bounded() {
        let mut p = Parsed::default();
        for i in 0..40 {
            p.tool(&format!("t{i}"));
        }
        p.tool("t0");
        assert_eq!(p.tools.len(), MAX_TOOL_NAMES);
        assert_eq!(p.other_tools, 8);
        assert_eq!(p.tools["t0"], 2);
    }
}
