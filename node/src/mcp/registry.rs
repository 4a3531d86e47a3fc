//! The tool registry: native tools (one file each under `tools/`) plus tools that come and go
//! at run time, the filters that apply at listing *and* at dispatch, the collapsed
//! search/schema/call surface, and `notifications/tools/list_changed` when the surface moves.
//!
//! It does not know the transport: `transport.rs` hands it a [`CallCtx`] and gets back a tool
//! result value or a [`ToolError`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::{Map, Value, json};

use crate::state::Node;

mod meta;
use meta::meta_listings;

/// Who is calling, resolved per request by the transport.
#[derive(Debug, Clone, Default)]
pub struct CallCtx {
    /// The caller came over IPC, or TCP loopback without proxy headers.
    pub loopback: bool,
    /// The protocol session, when the request carried (or recovered) one.
    pub mcp_session: Option<String>,
    /// The TUIC identity bound to that session.
    pub tuic_session: Option<String>,
    /// The client's name from this request's `_meta`, if it names one.
    pub client_name: Option<String>,
    /// The protocol session's remembered "needs the collapsed catalogue" flag.
    pub session_meta_tools: bool,
    /// The protocol session's client named itself Claude Code at initialize.
    pub session_claude_code: bool,
    /// `params._meta.progressToken` of this `tools/call`: progress of a proxied call is
    /// relayed to the caller's `GET /mcp` stream under it.
    pub progress_token: Option<Value>,
}

impl CallCtx {
    /// Whether the caller is Claude Code: this request's `_meta` client name decides, else
    /// the name given at initialize.
    pub fn claude_code(&self) -> bool {
        match &self.client_name {
            Some(c) => is_claude_code(Some(c)),
            None => self.session_claude_code,
        }
    }

    /// Whether this caller gets the collapsed surface. A request that names its client decides
    /// by itself; the session's flag (from initialize) is the fallback.
    pub fn collapsed(&self, cfg: &crate::config::Config) -> bool {
        cfg.collapse_tools
            || match &self.client_name {
                Some(c) => client_requires_meta_tools(Some(c)),
                None => self.session_meta_tools,
            }
    }
}

/// A tool-level failure, answered as a result with `isError: true`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    /// Human message; it names the next step when there is one.
    pub message: String,
    /// Stable code for scripts (`not_available`, `loopback_only`, `removed`, ...).
    pub code: &'static str,
    /// Extra structured fields (`replacement`, `next_step`, ...).
    pub extra: Map<String, Value>,
}

impl ToolError {
    /// A plain error with a code.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code,
            extra: Map::new(),
        }
    }
    /// Bad arguments.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_arguments", message)
    }
    /// The capability belongs to a part of tuic that this build does not contain yet.
    pub fn not_available(tool: &str, action: &str, owner: &str) -> Self {
        Self::new(
            "not_available",
            format!("{tool} action={action} is not available in this build: it needs {owner}"),
        )
        .with("tool", json!(tool))
        .with("action", json!(action))
    }
    /// A removed action: says where it went.
    pub fn removed(tool: &str, action: &str, replacement: &str) -> Self {
        Self::new(
            "removed",
            format!("{tool} action={action} was removed; use {replacement} instead"),
        )
        .with("replacement", json!(replacement))
    }
    /// Adds a structured field.
    pub fn with(mut self, k: &str, v: Value) -> Self {
        self.extra.insert(k.into(), v);
        self
    }
    /// The JSON body carried in the error content.
    pub fn to_json(&self) -> Value {
        let mut m = self.extra.clone();
        m.insert("error".into(), json!(self.message));
        m.insert("code".into(), json!(self.code));
        Value::Object(m)
    }
}

/// A synchronous tool handler. The registry decides where it runs: actions whose
/// [`ToolDef::exec`] says [`Exec::Blocking`] on the blocking pool, the rest inline (they only
/// read memory); a panic becomes a tool error either way.
pub(crate) type Handler = fn(&Arc<Node>, &CallCtx, &Map<String, Value>) -> Result<Value, ToolError>;

/// The future an [`AsyncHandler`] returns.
pub(crate) type ToolFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, ToolError>> + Send>>;

/// An asynchronous action handler, for actions that sleep on an event (`agent action=wait`,
/// `session action=wait|submit`) instead of holding a blocking thread; a blocking part of it
/// goes through [`on_blocking_pool`]. Dropping the future (the call went away) cancels it.
pub(crate) type AsyncHandler = fn(Arc<Node>, CallCtx, Map<String, Value>) -> ToolFuture;

/// Runs blocking tool work (PTY writes, commits, spawns, git, a hub's routed call) on the
/// blocking pool and awaits it; a panic there is the tool error `internal` naming the tool.
/// The registry runs every [`Exec::Blocking`] action through it, and async handlers use it
/// for their blocking steps, so no tool code parks an async worker (`block_in_place`,
/// `block_on`).
pub(crate) async fn on_blocking_pool<T: Send + 'static>(
    tool: &str,
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    // The caller's span (an MCP call's `mcp_session`) rides along: what the work logs goes
    // to that protocol session's `notifications/message` too.
    let span = tracing::Span::current();
    match tokio::task::spawn_blocking(move || span.in_scope(work)).await {
        Ok(r) => r,
        Err(_) => Err(panicked(tool)),
    }
}

/// The tool error of a handler that panicked (logged once here).
fn panicked(tool: &str) -> ToolError {
    tracing::warn!(source = "mcp", tool, "tool handler panicked");
    ToolError::new("internal", format!("tool {tool} failed unexpectedly"))
}

/// How one action runs; the registry reads it from [`ToolDef::exec`].
#[derive(Debug, Clone, Copy)]
pub enum Exec {
    /// In place on the async worker: it only reads memory (an action not named runs so).
    Inline,
    /// May sleep, spawn, write PTYs or touch disk: on the blocking pool ([`on_blocking_pool`]).
    Blocking,
    /// A future that sleeps on events (or a hub's router) instead of holding a thread; it may
    /// hand the call back to [`run_here`], which then takes the inline/blocking split.
    Async(AsyncHandler),
    /// A hot listing answered as rendered JSON text; `None` from the handler sends the call
    /// down the value path (async, then blocking/inline).
    Rendered(RenderedHandler),
}

/// One native tool.
#[derive(Debug, Clone)]
pub struct ToolDef {
    /// Public name (contract: never renamed).
    pub name: &'static str,
    /// App-facing summary, at most 70 characters, for `GET /mcp/status`; not sent to models.
    pub summary: &'static str,
    /// The full MCP description.
    pub description: &'static str,
    /// The action strings, as in the schema's enum.
    pub actions: &'static [&'static str],
    /// Builds the input schema.
    pub schema: fn() -> Value,
    /// The handler.
    pub handler: Handler,
    /// How its actions run: `(action, mode)`, `""` for a tool without an `action` field as a
    /// whole, `"*"` for every action (an async front such as a hub's router). An action not
    /// named runs [`Exec::Inline`]. Rendered is tried first, then async, then blocking.
    pub exec: &'static [(&'static str, Exec)],
    /// Upstream-style tool: a returned object with a `content` array *is* the MCP
    /// `CallToolResult` and becomes the JSON-RPC result unchanged (native tools: false, their
    /// values travel as compact JSON text).
    pub passthrough: bool,
}

/// A tool's answer: a JSON value, or the same value already rendered as compact JSON text (a
/// hot listing serializes its typed rows once, without building a `Value` per row).
#[derive(Debug)]
pub enum Answer {
    /// A value, rendered by the transport.
    Value(Value),
    /// Compact JSON text as `serde_json::to_string` writes it (no raw control characters).
    Json(String),
}

impl Answer {
    /// The answer as a value (parses a rendered one; for callers off the hot path).
    pub fn into_value(self) -> Value {
        match self {
            Answer::Value(v) => v,
            Answer::Json(s) => serde_json::from_str(&s).unwrap_or(Value::Null),
        }
    }
}

/// A handler whose answer is rendered JSON text (see [`Answer::Json`]); `None` when this call
/// is not one it renders (it then goes the value path, [`Exec::Async`] first).
pub(crate) type RenderedHandler =
    fn(&Arc<Node>, &CallCtx, &Map<String, Value>) -> Option<Result<String, ToolError>>;

/// What a dispatch produced: the answer (or tool error) and whether it passes through.
pub(crate) type Dispatched = (Result<Answer, ToolError>, bool);

impl ToolDef {
    /// The rendered handler of this action, if it has one.
    fn rendered(&self, action: &str) -> Option<RenderedHandler> {
        self.exec.iter().find_map(|(a, m)| match m {
            Exec::Rendered(h) if *a == action => Some(*h),
            _ => None,
        })
    }

    /// The async handler of this action (its own, or the tool's `"*"` front).
    fn asynchronous(&self, action: &str) -> Option<AsyncHandler> {
        self.exec.iter().find_map(|(a, m)| match m {
            Exec::Async(h) if *a == action || *a == "*" => Some(*h),
            _ => None,
        })
    }

    /// Whether this action runs on the blocking pool.
    pub(crate) fn blocking(&self, action: &str) -> bool {
        self.exec
            .iter()
            .any(|(a, m)| *a == action && matches!(m, Exec::Blocking))
    }

    /// The MCP `Tool` object.
    pub fn listing(&self) -> Value {
        json!({"name": self.name, "description": self.description, "inputSchema": (self.schema)()})
    }
}

/// Tools that belong to another server and are proxied (the upstream MCP servers): listed
/// after the native ones, searched, and called with their result passed through unchanged.
/// The implementor applies its own filters at listing *and* at dispatch.
pub trait ToolSource: Send + Sync + std::fmt::Debug {
    /// Changes whenever the set of tools this source lists changes.
    fn generation(&self) -> u64;
    /// The MCP `Tool` objects a caller may see, already filtered and named as callable.
    fn listings(&self) -> Vec<Value>;
    /// Whether `name` is in this source's namespace (then a failure is a tool error, not
    /// an unknown tool).
    fn owns(&self, name: &str) -> bool;
    /// The listing of one callable tool, or why it cannot be called.
    fn schema(&self, name: &str) -> Result<Value, ToolError>;
    /// Calls one tool; the value is the upstream's `CallToolResult` as it came.
    fn call<'a>(
        &'a self,
        node: &'a Arc<Node>,
        ctx: &'a CallCtx,
        name: &'a str,
        args: Map<String, Value>,
    ) -> futures::future::BoxFuture<'a, Result<Value, ToolError>>;
}

/// What one BM25 index was built from; a different key means a rebuild.
type IndexKey = ((Vec<String>, bool, bool), u64, Vec<u64>);

/// A built search index and the result rows it ranks.
#[derive(Debug)]
struct Corpus {
    index: crate::upstream::search::Index,
    /// name → search result row (`{name, summary}`).
    rows: std::collections::HashMap<String, Value>,
}

/// Meta-tools of the collapsed surface.
pub(crate) const META_TOOLS: &[&str] = &["search_tools", "get_tool_schema", "call_tool"];

/// The registry.
#[derive(Debug)]
pub struct Registry {
    native: Vec<&'static ToolDef>,
    /// Tools added at run time (test fixtures), by name.
    dynamic: RwLock<Vec<Arc<ToolDef>>>,
    /// Bumped by every add/remove of a run-time tool.
    dynamic_generation: AtomicU64,
    /// Proxied tools, installed at start: this node's upstream MCP servers, then the
    /// upstream tools its hub offers (`hub.{name}__{tool}`). Namespaces never overlap.
    sources: RwLock<Vec<Arc<dyn ToolSource>>>,
    /// The `search_tools` index, rebuilt when the tool set it was built from changes.
    index: Mutex<Option<(IndexKey, Arc<Corpus>)>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            native: crate::mcp::tools::NATIVE.to_vec(),
            dynamic: RwLock::new(Vec::new()),
            dynamic_generation: AtomicU64::new(0),
            sources: RwLock::new(Vec::new()),
            index: Mutex::new(None),
        }
    }
}

/// The config facts that shape the surface; a change fires `tools/list_changed`.
pub(crate) fn surface_fingerprint(cfg: &crate::config::Config) -> (Vec<String>, bool, bool) {
    let mut d = cfg.disabled_native_tools.clone();
    d.sort();
    (d, cfg.collapse_tools, cfg.progress_tracking)
}

/// Whether a client name is Claude Code's (`clientInfo.name`).
pub(crate) fn is_claude_code(client: Option<&str>) -> bool {
    client.is_some_and(|c| c == "claude-code" || c.starts_with("claude-code-") || c == "claude")
}

/// Whether a client gets the collapsed catalogue whatever `collapse_tools` says.
pub(crate) fn client_requires_meta_tools(client: Option<&str>) -> bool {
    client.is_some_and(|c| c == "ego" || c.starts_with("grok-shell-"))
}

impl Registry {
    /// Every native tool, filtered or not (the `native_tools` catalogue).
    pub fn native(&self) -> &[&'static ToolDef] {
        &self.native
    }

    /// Adds a run-time tool; returns false when the name is taken.
    pub fn add(&self, def: Arc<ToolDef>) -> bool {
        let mut d = self.dynamic.write().unwrap_or_else(|p| p.into_inner());
        if self.native.iter().any(|n| n.name == def.name) || d.iter().any(|x| x.name == def.name) {
            return false;
        }
        d.push(def);
        self.dynamic_generation.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Installs a proxied-tool source; its tools are listed after those of earlier ones.
    pub fn add_source(&self, source: Arc<dyn ToolSource>) {
        self.sources
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(source);
    }

    /// The proxied-tool sources, in listing order.
    pub fn sources(&self) -> Vec<Arc<dyn ToolSource>> {
        self.sources
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The source whose namespace holds `name`.
    fn owner(&self, name: &str) -> Option<Arc<dyn ToolSource>> {
        self.sources().into_iter().find(|s| s.owns(name))
    }

    /// Removes a run-time tool.
    pub fn remove(&self, name: &str) -> bool {
        let mut d = self.dynamic.write().unwrap_or_else(|p| p.into_inner());
        let before = d.len();
        d.retain(|x| x.name != name);
        self.dynamic_generation.fetch_add(1, Ordering::Relaxed);
        d.len() != before
    }

    /// Whether a native tool is enabled by the config.
    pub fn enabled(cfg: &crate::config::Config, name: &str) -> bool {
        if cfg.disabled_native_tools.iter().any(|d| d == name) {
            return false;
        }
        name != "progress" || cfg.progress_tracking
    }

    /// The tools a caller may see and call, in catalogue order.
    pub fn visible(&self, cfg: &crate::config::Config) -> Vec<Arc<ToolDef>> {
        let mut out: Vec<Arc<ToolDef>> = self
            .native
            .iter()
            .filter(|t| Self::enabled(cfg, t.name))
            .map(|t| Arc::new((*t).clone()))
            .collect();
        out.extend(
            self.dynamic
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned(),
        );
        out
    }

    /// The callable tool of that name: an enabled native one, else a run-time one.
    fn find(&self, cfg: &crate::config::Config, name: &str) -> Option<Arc<ToolDef>> {
        if let Some(t) = self.native.iter().find(|t| t.name == name) {
            return Self::enabled(cfg, name).then(|| Arc::new((*t).clone()));
        }
        self.dynamic
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|t| t.name == name)
            .cloned()
    }

    /// The `tools/list` array: the full catalogue (then the meta-tools, which are callable
    /// on every surface), or the collapsed surface.
    pub fn list(&self, cfg: &crate::config::Config, collapsed: bool) -> Vec<Value> {
        if collapsed {
            let mut v = meta_listings();
            if let Some(p) = self.find(cfg, "progress") {
                v.push(p.listing());
            }
            return v;
        }
        let mut v: Vec<Value> = self.visible(cfg).iter().map(|t| t.listing()).collect();
        for src in self.sources() {
            v.extend(src.listings());
        }
        v.extend(meta_listings());
        v
    }

    /// Dispatches a `tools/call`. `Err` is a protocol error (unknown tool → -32602).
    pub async fn call(
        &self,
        node: &Arc<Node>,
        ctx: &CallCtx,
        name: &str,
        args: Map<String, Value>,
    ) -> Result<Dispatched, String> {
        let cfg = node.config();
        // The spec's pre-call gate: while a secret form is open, native ui/debug, upstream
        // tools and call_tool-wrapped calls of them are refused (nothing may watch the form).
        let target = match (name, args.get("name").and_then(Value::as_str)) {
            ("call_tool", Some(inner)) => inner,
            _ => name,
        };
        if (matches!(target, "ui" | "debug") || self.owner(target).is_some())
            && node.secrets.form_open(crate::logs::now_ms())
        {
            return Ok((
                Err(ToolError::new(
                    "secret_form_open",
                    format!(
                        "{target} is paused while a secret form is open; retry once the person answered it"
                    ),
                )),
                false,
            ));
        }
        if META_TOOLS.contains(&name) {
            return Ok(self.call_meta(node, ctx, name, args).await);
        }
        if let Some(src) = self.owner(name) {
            return Ok((
                src.call(node, ctx, name, args).await.map(Answer::Value),
                true,
            ));
        }
        // The filter applies at dispatch too: knowing a hidden name does not make it callable.
        let Some(def) = self.find(&cfg, name) else {
            if self.native.iter().any(|t| t.name == name) {
                return Ok((
                    Err(ToolError::new(
                        "disabled",
                        format!("tool {name} is disabled by disabled_native_tools"),
                    )),
                    false,
                ));
            }
            return Err(format!("unknown tool: {name}"));
        };
        let passthrough = def.passthrough;
        Ok((run(node, ctx, def, args).await, passthrough))
    }
}

/// Inputs that were renamed or removed: a caller still sending one is told what replaced it
/// instead of getting a bare "unknown property" (spec "MCP Native Tools": the old `project` and
/// `workspace_id` names are rejected; `agent spawn` rejects the removed alt-screen switches).
const RETIRED_INPUTS: &[(&str, &str)] = &[
    ("project", "pass the repository root as path"),
    (
        "workspace_id",
        "pass branch (repo worktree_lifecycle/worktree_remove) or path (the repository root)",
    ),
    (
        "allow_alt_screen",
        "it was removed: the per-agent prevent_alt_screen setting decides the screen flag",
    ),
    (
        "allowAltScreen",
        "it was removed: the per-agent prevent_alt_screen setting decides the screen flag",
    ),
];

/// Inputs a tool names in its schema, per native tool, computed once.
static NATIVE_INPUTS: std::sync::LazyLock<
    std::collections::HashMap<&'static str, std::collections::BTreeSet<String>>,
> = std::sync::LazyLock::new(|| {
    crate::mcp::tools::NATIVE
        .iter()
        .map(|t| {
            let keys = (t.schema)()
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            (t.name, keys)
        })
        .collect()
});

/// Refuses an input a native tool's schema does not declare, naming it. Upstream tools
/// validate their own inputs (their schema is theirs, passed through).
fn check_inputs(def: &ToolDef, args: &Map<String, Value>) -> Result<(), ToolError> {
    let Some(known) = NATIVE_INPUTS.get(def.name) else {
        return Ok(());
    };
    for k in args.keys() {
        if known.contains(k) {
            continue;
        }
        if let Some((_, instead)) = RETIRED_INPUTS.iter().find(|(old, _)| old == k) {
            return Err(ToolError::new(
                "retired_input",
                format!(
                    "{}: the input {k} is no longer accepted; {instead}",
                    def.name
                ),
            )
            .with("property", json!(k)));
        }
        return Err(ToolError::new(
            "unknown_property",
            format!(
                "{}: unknown property {k}; accepted: {}",
                def.name,
                known.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        )
        .with("property", json!(k)));
    }
    Ok(())
}

/// Runs one handler: blocking actions on the blocking pool, others inline; a panic becomes a
/// tool error either way. Inputs are checked against the tool's schema first.
async fn run(
    node: &Arc<Node>,
    ctx: &CallCtx,
    def: Arc<ToolDef>,
    args: Map<String, Value>,
) -> Result<Answer, ToolError> {
    check_inputs(&def, &args)?;
    let action = args.get("action").and_then(Value::as_str).unwrap_or("");
    // Remote rights (`rights::REMOTE_RIGHTS`), before any handler: a tool without actions is
    // `""`; an action the tool does not have is left to the tool's own error (unknown or
    // removed), which names the right next step.
    if def.actions.is_empty() {
        crate::mcp::rights::check(ctx, def.name, "")?;
    } else if def.actions.contains(&action) {
        crate::mcp::rights::check(ctx, def.name, action)?;
    }
    if let Some(h) = def.rendered(action) {
        let rendered =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(node, ctx, &args)))
                .unwrap_or_else(|_| Some(Err(panicked(def.name))));
        if let Some(r) = rendered {
            return r.map(Answer::Json);
        }
    }
    run_value(node, ctx, def, args).await.map(Answer::Value)
}

/// [`run`] for the handlers that answer a value: async, blocking or inline.
async fn run_value(
    node: &Arc<Node>,
    ctx: &CallCtx,
    def: Arc<ToolDef>,
    args: Map<String, Value>,
) -> Result<Value, ToolError> {
    let action = args.get("action").and_then(Value::as_str).unwrap_or("");
    if let Some(h) = def.asynchronous(action) {
        use futures::FutureExt;
        let fut = h(node.clone(), ctx.clone(), args);
        return std::panic::AssertUnwindSafe(fut)
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Err(panicked(def.name)));
    }
    run_here(node, ctx, &def, args).await
}

/// Runs `def`'s synchronous handler for one call: an [`Exec::Blocking`] action on
/// the blocking pool, the rest inline; a panic becomes a tool error either way. An async
/// handler that first decided where a call is served (a hub's router) ends here too.
pub(crate) async fn run_here(
    node: &Arc<Node>,
    ctx: &CallCtx,
    def: &ToolDef,
    args: Map<String, Value>,
) -> Result<Value, ToolError> {
    let action = args.get("action").and_then(Value::as_str).unwrap_or("");
    if def.blocking(action) {
        let (n, c, h) = (node.clone(), ctx.clone(), def.handler);
        on_blocking_pool(def.name, move || h(&n, &c, &args)).await
    } else {
        let h = def.handler;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(node, ctx, &args)))
            .unwrap_or_else(|_| Err(panicked(def.name)))
    }
}

/// The required `action` argument of a tool, checked against its list.
pub(crate) fn action<'a>(
    def_name: &str,
    actions: &[&str],
    args: &'a Map<String, Value>,
) -> Result<&'a str, ToolError> {
    let a = args
        .get("action")
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::invalid(format!("{def_name}: action is required")))?;
    Ok(a).and_then(|a| {
        if actions.contains(&a) {
            Ok(a)
        } else {
            Err(ToolError::invalid(format!(
                "{def_name}: unknown action {a}; one of: {}",
                actions.join(", ")
            )))
        }
    })
}

/// The typed arguments of one call: the `action` checked against the tool's list
/// ([`action`]), then read into the tool's action enum `T` (one argument struct per action,
/// `crate::args::action`). A refused field is `invalid_arguments` naming it.
pub(crate) fn typed<T: serde::de::DeserializeOwned>(
    def_name: &str,
    actions: &[&str],
    args: &Map<String, Value>,
) -> Result<T, ToolError> {
    let a = action(def_name, actions, args)?;
    Ok(crate::args::action(a, args)?)
}

impl From<crate::args::ArgError> for ToolError {
    fn from(e: crate::args::ArgError) -> Self {
        ToolError::invalid(e.0)
    }
}

/// Standard schema: an `action` enum plus the given properties.
pub(crate) fn schema(actions: &[&str], props: Value) -> Value {
    let mut p = props.as_object().cloned().unwrap_or_default();
    p.insert(
        "action".into(),
        json!({"type": "string", "enum": actions, "description": "what to do"}),
    );
    json!({"type": "object", "properties": p, "required": ["action"], "additionalProperties": false})
}
