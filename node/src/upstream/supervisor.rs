//! One supervisor task per enabled upstream: connect (stdio child or Streamable HTTP), list
//! the tools, serve until the connection dies, a health check fails past the breaker's
//! threshold or the definition changes, and reconnect as the breaker says; [`spawn`] starts
//! them all and watches the file for hand edits.

use super::*;

impl Upstreams {
    /// The supervisor of one upstream: connect, serve, reconnect as the breaker says.
    pub(super) async fn supervise(self: Arc<Self>, e: Arc<Entry>) {
        let name = e.def.name.clone();
        loop {
            if e.stop.is_cancelled() {
                break;
            }
            let tun = self.env.tuning();
            let btun = breaker::Tuning::from_config(&tun);
            {
                let mut l = lock(&e.live);
                if l.status != Status::CircuitOpen && l.status != Status::Failed {
                    l.status = Status::Connecting;
                }
                l.next_retry_at_ms = None;
                l.btun = Some(btun);
            }
            let connect_timeout = Duration::from_millis(tun.upstream_connect_timeout_ms.max(100));
            let attempt = tokio::select! {
                _ = e.stop.cancelled() => break,
                r = self.connect(&e, connect_timeout) => r,
            };
            let failure = match attempt {
                Ok((client, tools, note, events)) => {
                    {
                        let mut l = lock(&e.live);
                        l.breaker.success();
                        l.status = Status::Ready;
                        l.protocol = client.protocol();
                        l.tools = tools;
                        l.tools_note = note;
                        l.client = Some(client.clone());
                        l.connected_at_ms = Some(crate::logs::now_ms());
                    }
                    tracing::info!(source = "upstream", upstream = %name, protocol = %client.protocol(), tools = lock(&e.live).tools.len(), "upstream ready");
                    self.bump();
                    e.attempted.notify_waiters();
                    let end = self.serve(&e, &client, events).await;
                    {
                        let mut l = lock(&e.live);
                        l.client = None;
                        l.tools.clear();
                        l.tools_note = None;
                    }
                    self.bump();
                    client.shutdown().await;
                    match end {
                        Ended::Stop => break,
                        Ended::Kick => continue,
                        Ended::Failed(err, verdict) => Some((err, Some(verdict))),
                    }
                }
                Err(err) => Some((err, None)),
            };
            let Some((err, verdict)) = failure else {
                continue;
            };
            let msg = err.to_string();
            tracing::warn!(source = "upstream", upstream = %name, error = %msg, "upstream failed");
            self.set_error(&e, &msg);
            if matches!(
                err,
                UpstreamError::NeedsAuth { .. }
                    | UpstreamError::Origin(_)
                    | UpstreamError::AuthFailed(_)
            ) {
                {
                    let mut l = lock(&e.live);
                    if let UpstreamError::NeedsAuth { www_authenticate } = &err {
                        l.challenge = Some(www_authenticate.clone());
                    }
                    // A flow started meanwhile keeps saying so.
                    l.status = if self.oauth.pending(&e.def.id).is_none() {
                        Status::NeedsAuth
                    } else {
                        Status::Authorizing
                    };
                }
                e.attempted.notify_waiters();
                tokio::select! {
                    _ = e.stop.cancelled() => break,
                    _ = e.kick.notified() => continue,
                }
            }
            let verdict = verdict.unwrap_or_else(|| lock(&e.live).breaker.failure(&btun));
            let health = Duration::from_millis(tun.upstream_health_interval_ms.max(10));
            let pause = match verdict {
                Verdict::Degraded { .. } => {
                    lock(&e.live).status = Status::Connecting;
                    // A short pause, so a crash loop cannot spin before the breaker opens.
                    btun.base / 4
                }
                Verdict::Open { backoff, retry } => {
                    tracing::info!(source = "upstream", upstream = %name, backoff_ms = backoff.as_millis() as u64, retry, "upstream circuit open");
                    let mut l = lock(&e.live);
                    l.status = Status::CircuitOpen;
                    l.next_retry_at_ms = Some(crate::logs::now_ms() + backoff.as_millis() as u64);
                    backoff
                }
                Verdict::Failed => {
                    let mut l = lock(&e.live);
                    l.status = Status::Failed;
                    l.next_retry_at_ms = Some(crate::logs::now_ms() + health.as_millis() as u64);
                    health
                }
            };
            // Calls waiting for this attempt look again now that its outcome is published.
            e.attempted.notify_waiters();
            tokio::select! {
                _ = e.stop.cancelled() => break,
                _ = e.kick.notified() => {}
                _ = e.probe.notified() => {
                    tracing::debug!(source = "upstream", upstream = %name, "a call asked for a retry now");
                }
                _ = tokio::time::sleep(pause) => {}
            }
        }
        tracing::debug!(source = "upstream", upstream = %name, "upstream supervisor ended");
    }

    /// Connects and lists the tools.
    pub(super) async fn connect(
        &self,
        e: &Entry,
        timeout: Duration,
    ) -> Result<
        (
            Arc<Client>,
            Vec<Value>,
            Option<String>,
            tokio::sync::mpsc::Receiver<ClientEvent>,
        ),
        UpstreamError,
    > {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let client = match &e.def.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let c =
                    stdio::StdioClient::spawn(&e.def.name, command, args, env, cwd.as_deref(), tx)?;
                let init = c
                    .request(
                        "initialize",
                        client::initialize_params(crate::mcp::protocol::LEGACY_DEFAULT),
                        timeout,
                        None,
                    )
                    .await;
                let init = match init {
                    Ok(r) => r,
                    Err(err) => {
                        let (n, last) = c.garbage();
                        c.shutdown().await;
                        if n > 0 {
                            return Err(UpstreamError::Protocol(format!(
                                "{err}; {n} stdout line(s) were not JSON-RPC, the last: {}",
                                last.unwrap_or_default()
                            )));
                        }
                        return Err(err);
                    }
                };
                let v = init
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or(crate::mcp::protocol::LEGACY_DEFAULT);
                c.set_protocol(v);
                c.notify("notifications/initialized", json!({})).await;
                Arc::new(Client::Stdio(c))
            }
            Transport::Http { url, .. } => {
                let (choice, deprecated) = era_choice(&e.def);
                if deprecated {
                    tracing::warn!(source = "upstream", upstream = %e.def.name,
                        "a server-level \"protocol\" is deprecated; move it to transport.protocol");
                }
                let c = http::HttpClient::new(
                    &e.def.name,
                    url,
                    choice,
                    self.bearer_source(&e.def),
                    tx,
                )?;
                c.connect(timeout).await?;
                Arc::new(Client::Http(c))
            }
        };
        match list_tools(&client, &e.def.name, timeout).await {
            Ok((tools, note)) => Ok((client, tools, note, rx)),
            Err(err) => {
                client.shutdown().await;
                Err(err)
            }
        }
    }

    /// Serves a connected upstream: health checks on the tick, tool refreshes on
    /// `list_changed`, until it dies, fails, is kicked or stopped.
    pub(super) async fn serve(
        &self,
        e: &Entry,
        client: &Arc<Client>,
        mut events: tokio::sync::mpsc::Receiver<ClientEvent>,
    ) -> Ended {
        loop {
            let tun = self.env.tuning();
            let btun = breaker::Tuning::from_config(&tun);
            let mut health = Duration::from_millis(tun.upstream_health_interval_ms.max(10));
            let degraded = {
                let mut l = lock(&e.live);
                l.btun = Some(btun);
                l.breaker.failures() > 0
            };
            if degraded {
                // Failed calls made it degraded: probe at the backoff base, not the slow tick,
                // so a dead upstream opens the circuit and a restarted one is seen soon.
                health = health.min(btun.base);
            }
            let timeout = Duration::from_millis(tun.upstream_connect_timeout_ms.max(100));
            let refresh = tokio::select! {
                _ = e.stop.cancelled() => return Ended::Stop,
                _ = e.kick.notified() => return Ended::Kick,
                _ = e.auth_lost_signal.notified() => {
                    if let Some(err) = lock(&e.auth_lost).take() {
                        return Ended::Failed(err, Verdict::Failed);
                    }
                    continue;
                }
                _ = e.broken_signal.notified() => {
                    if let Some((err, verdict)) = lock(&e.broken).take() {
                        return Ended::Failed(err, verdict);
                    }
                    continue;
                }
                why = client.closed() => {
                    let verdict = lock(&e.live).breaker.failure(&breaker::Tuning::from_config(&tun));
                    return Ended::Failed(UpstreamError::Closed(why), verdict);
                }
                ev = events.recv() => ev.is_some(),
                _ = tokio::time::sleep(health) => true,
            };
            if !refresh {
                continue;
            }
            let checked = tokio::select! {
                _ = e.stop.cancelled() => return Ended::Stop,
                r = list_tools(client, &e.def.name, timeout) => r,
            };
            match checked {
                Ok((tools, note)) => {
                    let changed = {
                        let mut l = lock(&e.live);
                        l.breaker.success();
                        l.tools_note = note;
                        let changed = l.tools != tools;
                        l.tools = tools;
                        changed
                    };
                    if changed {
                        tracing::info!(source = "upstream", upstream = %e.def.name, "upstream tools changed");
                        self.bump();
                    }
                }
                Err(err) => {
                    let verdict = lock(&e.live)
                        .breaker
                        .failure(&breaker::Tuning::from_config(&tun));
                    self.set_error(e, &err.to_string());
                    tracing::warn!(source = "upstream", upstream = %e.def.name, error = %err, ?verdict, "upstream health check failed");
                    // A connection that is gone (a stdio child that exited) is not served on,
                    // whatever the breaker says: it reconnects now.
                    if !matches!(verdict, Verdict::Degraded { .. })
                        || matches!(err, UpstreamError::Closed(_))
                    {
                        return Ended::Failed(err, verdict);
                    }
                }
            }
            // A flood of list_changed collapses: at most one refresh per debounce period.
            tokio::select! {
                _ = e.stop.cancelled() => return Ended::Stop,
                _ = tokio::time::sleep(REFRESH_DEBOUNCE) => {}
            }
        }
    }
}

/// Why [`Upstreams::serve`] returned.
pub(super) enum Ended {
    Stop,
    Kick,
    Failed(UpstreamError, Verdict),
}

/// The era an HTTP upstream is to speak: `transport.protocol` (as documented), else the old
/// server-level `protocol` (accepted; `true` asks for a deprecation warning), else `auto`.
pub(super) fn era_choice(def: &ServerDef) -> (http::EraChoice, bool) {
    let documented = match &def.transport {
        Transport::Http { protocol, .. } => protocol.as_deref(),
        Transport::Stdio { .. } => None,
    };
    let legacy_place = def.extra.get("protocol").and_then(Value::as_str);
    let (value, deprecated) = match (documented, legacy_place) {
        (Some(v), _) => (Some(v), false),
        (None, Some(v)) => (Some(v), true),
        (None, None) => (None, false),
    };
    let choice = match value {
        Some("legacy") => http::EraChoice::Legacy,
        Some("modern") => http::EraChoice::Modern,
        _ => http::EraChoice::Auto,
    };
    (choice, deprecated)
}

pub(super) fn tool_name(t: &Value) -> Option<&str> {
    t.get("name").and_then(Value::as_str)
}

/// `tools/list` with pagination. A result without `tools` is logged and reported in the
/// status (a silent "0 tools" is not diagnosable).
pub(super) async fn list_tools(
    client: &Client,
    upstream: &str,
    timeout: Duration,
) -> Result<(Vec<Value>, Option<String>), UpstreamError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_TOOL_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let r = client.request("tools/list", params, timeout, None).await?;
        match r.get("tools").and_then(Value::as_array) {
            Some(list) => tools.extend(
                list.iter()
                    .filter(|t| tool_name(t).is_some_and(|n| !n.is_empty()))
                    .cloned(),
            ),
            None => {
                let excerpt: String = r.to_string().chars().take(200).collect();
                tracing::warn!(source = "upstream", upstream, result = %excerpt, "tools/list answered without result.tools");
                return Ok((
                    tools,
                    Some(format!(
                        "tools/list answered without result.tools: {excerpt}"
                    )),
                ));
            }
        }
        cursor = r
            .get("nextCursor")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        if cursor.is_none() {
            let note = tools
                .is_empty()
                .then(|| "the upstream lists no tools".to_owned());
            return Ok((tools, note));
        }
    }
    Ok((
        tools,
        Some(format!(
            "tools/list pagination stopped after {MAX_TOOL_PAGES} pages"
        )),
    ))
}

pub(super) fn qualified(e: &Entry, t: &Value) -> Option<Value> {
    let n = tool_name(t)?;
    if !e.def.tool_filter.allows(n) {
        return None;
    }
    let mut v = t.clone();
    v["name"] = json!(format!("{}{}{n}", e.def.name, config::SEPARATOR));
    Some(v)
}

/// Loads the file, starts the upstreams and watches the file for hand edits; sweeps abandoned
/// OAuth flows. Called once when the node starts serving (the MCP side announces tool-set
/// changes from [`Upstreams::subscribe`]).
pub fn spawn(up: &Arc<Upstreams>) {
    let u = up.clone();
    up.env.tasks.spawn(async move {
        let up = u;
        let file = up.file.clone();
        let first = {
            let up2 = up.clone();
            tokio::task::spawn_blocking(move || {
                let f = config::load(&file);
                if let Ok(f) = &f {
                    up2.load_credentials(f);
                }
                f
            })
            .await
        };
        match first {
            Ok(Ok(f)) => up.apply(f, &[]).await,
            Ok(Err(e)) => {
                tracing::warn!(source = "upstream", error = %format!("{e:#}"), "mcp-upstreams.json is invalid; no upstream started")
            }
            Err(_) => {}
        }
        // Hand edits: poll the file's stamp, as config.json is.
        let path = up.file.path().to_path_buf();
        let stamp = |p: &std::path::Path| {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.modified().ok(), m.len()))
        };
        let mut last = stamp(&path);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = up.env.shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let now = stamp(&path);
            if now == last {
                continue;
            }
            last = now;
            let (file, up2) = (up.file.clone(), up.clone());
            let loaded = tokio::task::spawn_blocking(move || {
                let f = config::load(&file);
                if let Ok(f) = &f {
                    up2.load_credentials(f);
                }
                f
            })
            .await;
            match loaded {
                Ok(Ok(f)) if f != *lock(&up.applied) => {
                    tracing::info!(source = "upstream", "mcp-upstreams.json changed on disk; applying");
                    up.apply(f, &[]).await;
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(source = "upstream", error = %format!("{e:#}"), "mcp-upstreams.json is invalid; keeping the running upstreams")
                }
                Err(_) => {}
            }
        }
    });
    // The expiry sweep of abandoned OAuth flows: each rolls its upstream back to needs_auth.
    let up = up.clone();
    up.env.tasks.clone().spawn(async move {
        loop {
            let tun = up.env.tuning();
            let every =
                Duration::from_millis((tun.upstream_oauth_flow_timeout_ms / 4).clamp(50, 1_000));
            tokio::select! {
                _ = up.env.shutdown.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
            }
            for id in up.oauth.sweep(tun.upstream_oauth_callback_grace_ms) {
                up.oauth_ended(&id, false);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(v: Value) -> ServerDef {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_era_is_read_from_transport_protocol_and_the_old_place_still_works() {
        let url = "http://127.0.0.1:9/mcp";
        let documented = def(json!({"id": "a", "name": "a",
            "transport": {"type": "http", "url": url, "protocol": "legacy"}}));
        assert_eq!(era_choice(&documented), (http::EraChoice::Legacy, false));
        // It survives a save (the file keeps it where the docs put it).
        assert_eq!(
            serde_json::to_value(&documented).unwrap()["transport"]["protocol"],
            "legacy"
        );
        let old = def(json!({"id": "a", "name": "a", "protocol": "modern",
            "transport": {"type": "http", "url": url}}));
        assert_eq!(era_choice(&old), (http::EraChoice::Modern, true));
        let both = def(json!({"id": "a", "name": "a", "protocol": "modern",
            "transport": {"type": "http", "url": url, "protocol": "auto"}}));
        assert_eq!(era_choice(&both), (http::EraChoice::Auto, false));
        let none = def(json!({"id": "a", "name": "a", "transport": {"type": "http", "url": url}}));
        assert_eq!(era_choice(&none), (http::EraChoice::Auto, false));
        let bad: UpstreamsFile =
            serde_json::from_value(json!({"servers": [{"id": "a", "name": "a",
            "transport": {"type": "http", "url": url, "protocol": "newest"}}]}))
            .unwrap();
        let err = bad.validate().unwrap_err();
        assert!(err.contains("servers[0].transport.protocol"), "{err}");
    }
}
