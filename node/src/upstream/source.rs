//! What the registry's `ToolSource` (in `mcp/upstreams.rs`) serves of the upstreams: the
//! ready upstreams' filtered tools and the dispatch of `{name}__{tool}` calls (also relayed
//! for a node over the peer link).

use super::supervisor::{qualified, tool_name};
use super::*;

impl Upstreams {
    /// Changes whenever the listed tool set changes (`ToolSource::generation`).
    pub(crate) fn tool_generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// The ready upstreams' filtered tools, named `{name}__{tool}`.
    pub(crate) fn tool_listings(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for e in self.entries() {
            let l = lock(&e.live);
            if l.status != Status::Ready {
                continue;
            }
            out.extend(l.tools.iter().filter_map(|t| qualified(&e, t)));
        }
        out
    }

    /// Whether `name` is in an upstream's namespace.
    pub(crate) fn owns_tool(&self, name: &str) -> bool {
        config::split_name(name).is_some_and(|(n, _)| self.by_name(n).is_some())
    }

    /// The listing of one callable upstream tool, or why it cannot be called.
    pub(crate) fn tool_schema(&self, name: &str) -> Result<Value, ToolError> {
        let (e, tool) = self.resolve(name)?;
        let l = lock(&e.live);
        l.tools
            .iter()
            .find(|t| tool_name(t) == Some(tool))
            .and_then(|t| qualified(&e, t))
            .ok_or_else(|| unknown_tool(&e.def.name, tool))
    }
}

impl Upstreams {
    /// A call relayed for a node over the peer link (the hub's end): `progress` receives the
    /// upstream's progress params (with a `progressToken` of no meaning to the caller, which
    /// replaces it), and `deadline` — the node caller's — caps the upstream's own
    /// `timeout_secs`, so a call that runs out of time is cancelled upstream
    /// (`notifications/cancelled` on stdio) exactly as a local one is.
    pub async fn call_relayed(
        &self,
        name: &str,
        args: Map<String, Value>,
        progress: Option<client::ProgressSink>,
        deadline: Duration,
    ) -> Result<Value, ToolError> {
        let progress = progress.map(|sink| (Value::Null, sink));
        self.call_with(name, args, progress, Some(deadline)).await
    }

    pub(crate) async fn call_with(
        &self,
        name: &str,
        args: Map<String, Value>,
        progress: Option<(Value, client::ProgressSink)>,
        deadline: Option<Duration>,
    ) -> Result<Value, ToolError> {
        let (e, tool) = self.resolve(name)?;
        let own = Duration::from_secs(e.def.timeout_secs);
        let timeout = deadline.map_or(own, |d| d.min(own));
        let started = std::time::Instant::now();
        let client = match self.client_of(&e, tool)? {
            Some(c) => c,
            None => {
                // Down (circuit open, failed, reconnecting): ask for an attempt now and wait
                // for its outcome within the call's deadline, so an upstream that is back is
                // used at once instead of after the breaker's backoff.
                self.await_attempt(&e, timeout).await;
                self.client_of(&e, tool)?.ok_or_else(|| unavailable(&e))?
            }
        };
        let params = json!({"name": tool, "arguments": Value::Object(args)});
        let timeout = timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        let r = client
            .request("tools/call", params, timeout, progress)
            .await;
        // The breaker counts proxied calls as it counts health checks: a success closes it, a
        // failure of the connection (not an error the upstream answered) counts toward it.
        // A timeout counts only when it was the upstream's own deadline, not a caller's
        // shorter one.
        let counts = match &r {
            Ok(_) => false,
            Err(UpstreamError::Timeout(_)) => timeout >= own,
            Err(err) => matches!(
                err,
                UpstreamError::Transport(_) | UpstreamError::Closed(_) | UpstreamError::Protocol(_)
            ),
        };
        match &r {
            Ok(_) => {
                let mut l = lock(&e.live);
                if l.breaker.failures() > 0
                    && l.client.as_ref().is_some_and(|c| Arc::ptr_eq(c, &client))
                {
                    l.breaker.success();
                }
            }
            Err(err) if counts => self.call_failed(&e, &client, err),
            Err(_) => {}
        }
        r.map_err(|err| {
            if matches!(
                err,
                UpstreamError::NeedsAuth { .. } | UpstreamError::AuthFailed(_)
            ) {
                // A NeedsAuth on any request moves the upstream to needs_auth.
                *lock(&e.auth_lost) = Some(err.clone());
                e.auth_lost_signal.notify_one();
            }
            ToolError::new(err.code(), format!("upstream {}: {err}", e.def.name))
                .with("upstream", json!(e.def.name))
        })
    }

    /// The connected client for a call of `tool`, `None` while the upstream is down.
    fn client_of(&self, e: &Entry, tool: &str) -> Result<Option<Arc<Client>>, ToolError> {
        let l = lock(&e.live);
        if !l.tools.iter().any(|t| tool_name(t) == Some(tool)) && l.client.is_some() {
            return Err(unknown_tool(&e.def.name, tool));
        }
        Ok(l.client.clone())
    }

    /// Asks the supervisor of a down upstream for a connect attempt now and waits (at most
    /// `limit`) for its outcome. Not for `needs_auth`/`authorizing`/`disabled`: a retry does
    /// not help those.
    async fn await_attempt(&self, e: &Entry, limit: Duration) {
        let attempted = e.attempted.notified();
        tokio::pin!(attempted);
        attempted.as_mut().enable();
        {
            let l = lock(&e.live);
            if l.client.is_some()
                || !matches!(
                    l.status,
                    Status::CircuitOpen | Status::Failed | Status::Connecting
                )
            {
                return;
            }
            if l.status != Status::Connecting {
                e.probe.notify_one();
            }
        }
        let _ = tokio::time::timeout(limit, attempted).await;
    }

    /// A proxied call failed on the connection: counted, recorded, and when the breaker says
    /// so the supervisor drops the connection and reconnects after its backoff.
    fn call_failed(&self, e: &Entry, client: &Arc<Client>, err: &UpstreamError) {
        let verdict = {
            let mut l = lock(&e.live);
            // A failure of a connection already replaced says nothing about the new one.
            if !l.client.as_ref().is_some_and(|c| Arc::ptr_eq(c, client)) {
                return;
            }
            let btun = l
                .btun
                .unwrap_or_else(|| breaker::Tuning::from_config(&crate::config::Tuning::default()));
            l.last_error = Some(err.to_string());
            l.last_error_at_ms = Some(crate::logs::now_ms());
            l.breaker.failure(&btun)
        };
        tracing::warn!(source = "upstream", upstream = %e.def.name, error = %err, ?verdict, "proxied call failed");
        if !matches!(verdict, Verdict::Degraded { .. }) {
            *lock(&e.broken) = Some((err.clone(), verdict));
        }
        // Wakes the serving loop either way: it re-reads the failures and probes sooner.
        e.broken_signal.notify_one();
    }

    /// The upstream and its own tool name for `{name}__{tool}`, with the filter applied:
    /// a hidden tool is refused here as it is hidden from the listing.
    pub(super) fn resolve<'n>(
        &self,
        qualified: &'n str,
    ) -> Result<(Arc<Entry>, &'n str), ToolError> {
        let Some((n, tool)) = config::split_name(qualified) else {
            return Err(ToolError::invalid(format!("no such tool: {qualified}")));
        };
        let e = self
            .by_name(n)
            .ok_or_else(|| ToolError::invalid(format!("no upstream named {n}")))?;
        if !e.def.tool_filter.allows(tool) {
            return Err(ToolError::new(
                "tool_filtered",
                format!("{qualified} is hidden by the tool_filter of upstream {n}"),
            )
            .with("upstream", json!(n)));
        }
        Ok((e, tool))
    }
}

pub(super) fn unknown_tool(upstream: &str, tool: &str) -> ToolError {
    ToolError::new(
        "unknown_tool",
        format!("upstream {upstream} lists no tool {tool}"),
    )
    .with("upstream", json!(upstream))
}

pub(super) fn unavailable(e: &Entry) -> ToolError {
    let l = lock(&e.live);
    let mut msg = format!("upstream {} is {}", e.def.name, l.status.as_str());
    if let Some(x) = &l.last_error {
        msg.push_str(&format!(" (last error: {x})"));
    }
    ToolError::new("upstream_unavailable", msg)
        .with("upstream", json!(e.def.name))
        .with("status", json!(l.status.as_str()))
}
