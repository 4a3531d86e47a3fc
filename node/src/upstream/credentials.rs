//! An upstream's credentials: bearer tokens and OAuth token sets in the vault (bound to their
//! origin), the auth part of its status row, and the OAuth consent steps it drives through
//! [`super::oauth`].

use super::*;

impl Upstreams {
    /// Stores bearer tokens from a save, each bound to its server's origin, in one write per
    /// credential. Blocking (vault).
    pub(super) fn store_credentials(
        &self,
        file: &UpstreamsFile,
        creds: &[config::NewCredential],
    ) -> anyhow::Result<()> {
        for c in creds {
            let origin = file.get(&c.id).and_then(|s| match &s.transport {
                Transport::Http { url, .. } => config::origin_of(url),
                Transport::Stdio { .. } => None,
            });
            let cred = Credential::bearer(origin, c.token.clone());
            self.env
                .vault
                .set(&vault_key(&c.id), &serde_json::to_string(&cred)?)?;
            lock(&self.creds).insert(c.id.clone(), cred);
        }
        Ok(())
    }

    /// Loads the vault credentials of `file`'s servers. Blocking.
    pub(super) fn load_credentials(&self, file: &UpstreamsFile) {
        for s in &file.servers {
            // Every HTTP upstream: an OAuth token set may exist without auth metadata (an
            // upstream authorized after a 401).
            if !matches!(s.transport, Transport::Http { .. })
                || lock(&self.creds).contains_key(&s.id)
            {
                continue;
            }
            match self.env.vault.get(&vault_key(&s.id)) {
                Ok(Some(raw)) => match serde_json::from_str::<Credential>(&raw) {
                    Ok(c) => {
                        lock(&self.creds).insert(s.id.clone(), c);
                    }
                    Err(_) => {
                        tracing::warn!(source = "upstream", upstream = %s.name, "the stored credential is unreadable; save it again");
                    }
                },
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(source = "upstream", upstream = %s.name, error = %format!("{e:#}"), "reading the upstream credential");
                }
            }
        }
    }

    /// The credential resolver of one HTTP upstream: checks the origin binding before every
    /// request and refresh; a mismatch sends nothing.
    pub(super) fn bearer_source(&self, def: &ServerDef) -> http::BearerSource {
        let declared = def
            .auth
            .as_ref()
            .and_then(|a| a.get("type"))
            .and_then(Value::as_str)
            .is_some_and(|t| t == "bearer" || t == "oauth2");
        Arc::new(oauth::Resolver {
            creds: self.creds.clone(),
            oauth: self.oauth.clone(),
            env: self.env.clone(),
            id: def.id.clone(),
            name: def.name.clone(),
            origin: match &def.transport {
                Transport::Http { url, .. } => config::origin_of(url),
                Transport::Stdio { .. } => None,
            },
            declared,
        })
    }

    /// The `auth` object of a status row: `state` is `needs_auth`, `authorizing` or
    /// `authorized`; never a token.
    pub(super) fn auth_row(&self, e: &Entry, status: Status) -> Option<Value> {
        if !matches!(e.def.transport, Transport::Http { .. }) {
            return None;
        }
        let cred = lock(&self.creds).get(&e.def.id).cloned();
        let declared = e
            .def
            .auth
            .as_ref()
            .and_then(|a| a.get("type"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let pending = self.oauth.pending(&e.def.id);
        let error = self.oauth.error(&e.def.id);
        if cred.is_none() && declared.is_none() && pending.is_none() && status != Status::NeedsAuth
        {
            return None;
        }
        let kind = cred
            .as_ref()
            .map(|c| c.kind.clone())
            .or(declared)
            .unwrap_or_else(|| "oauth2".into());
        let state = if pending.is_some() {
            "authorizing"
        } else if status == Status::NeedsAuth || cred.is_none() {
            "needs_auth"
        } else {
            "authorized"
        };
        let mut a = json!({"type": kind, "state": state});
        if let Some(c) = &cred {
            if let Some(x) = c.expires_at_ms {
                a["expires_at_ms"] = json!(x);
            }
            if let Some(x) = &c.issuer {
                a["authorization_server"] = json!(x);
            }
            a["refresh_token_exists"] = json!(c.refresh_token.is_some());
            if c.kind == "oauth2" {
                a["refreshes"] = json!(self.oauth.refresh_count(&e.def.id));
            }
        }
        if let Some(p) = pending {
            a["flow"] = p;
        }
        if let Some(x) = error {
            a["last_error"] = json!(x);
        }
        Some(a)
    }

    /// Starts an OAuth authorization of upstream `name` (an HTTP one): the consent step
    /// opens the returned URL; the caller serves the returned callback listener. Flows are
    /// never serialized with each other.
    pub async fn start_oauth(
        self: &Arc<Self>,
        name: &str,
    ) -> Result<(oauth::Started, oauth::CallbackServer), oauth::OAuthError> {
        let e = self
            .by_name(name)
            .ok_or_else(|| oauth::OAuthError::NotFound(format!("no upstream named {name}")))?;
        let Transport::Http { url, .. } = &e.def.transport else {
            return Err(oauth::OAuthError::Invalid(format!(
                "upstream {name} is a stdio upstream; only http upstreams authorize"
            )));
        };
        if !e.def.enabled {
            return Err(oauth::OAuthError::Invalid(format!(
                "upstream {name} is disabled"
            )));
        }
        let challenge = lock(&e.live).challenge.clone();
        let (started, server) = self
            .oauth
            .start(
                &self.env,
                &e.def.id,
                name,
                url,
                e.def.auth.as_ref(),
                challenge.as_deref(),
            )
            .await?;
        // Only now, with the flow recorded, may the status say so.
        let mut l = lock(&e.live);
        if l.status == Status::NeedsAuth {
            l.status = Status::Authorizing;
        }
        Ok((started, server))
    }

    /// Cancels the pending authorizations of upstream `name`; the status goes back to what
    /// it was before the attempt. Returns how many flows were dropped.
    pub fn cancel_oauth(&self, name: &str) -> Result<usize, oauth::OAuthError> {
        let e = self
            .by_name(name)
            .ok_or_else(|| oauth::OAuthError::NotFound(format!("no upstream named {name}")))?;
        let n = self.oauth.cancel(
            &e.def.id,
            self.env.tuning().upstream_oauth_callback_grace_ms,
        );
        if n > 0 {
            tracing::info!(source = "upstream", upstream = %name, "OAuth authorization cancelled");
            self.oauth_ended(&e.def.id, false);
        }
        Ok(n)
    }

    /// The auth part of one upstream's status row (`GET /mcp/upstreams/{name}/oauth`).
    pub fn oauth_status(&self, name: &str) -> Option<Value> {
        let e = self.by_name(name)?;
        let status = lock(&e.live).status;
        Some(json!({
            "upstream": name,
            "status": status.as_str(),
            "auth": self.auth_row(&e, status).unwrap_or(json!({"state": "none"})),
        }))
    }

    /// Stores a token set from a completed authorization, bound to its origin, in one vault
    /// write.
    pub(super) async fn store_oauth(&self, id: &str, cred: Credential) -> Result<(), String> {
        let raw = serde_json::to_string(&cred).map_err(|e| e.to_string())?;
        let (vault, key) = (self.env.vault.clone(), vault_key(id));
        match tokio::task::spawn_blocking(move || vault.set(&key, &raw)).await {
            Ok(Ok(())) => {
                lock(&self.creds).insert(id.to_owned(), cred);
                Ok(())
            }
            Ok(Err(e)) => Err(format!("storing the tokens in the vault: {e:#}")),
            Err(e) => Err(format!("storing the tokens in the vault: {e}")),
        }
    }

    /// A flow of upstream `id` ended: `authorized` reconnects it with the new tokens;
    /// otherwise an `authorizing` status goes back to `needs_auth` when no other flow of it
    /// is pending.
    pub(super) fn oauth_ended(&self, id: &str, authorized: bool) {
        let Some(e) = self.entries().into_iter().find(|e| e.def.id == id) else {
            return;
        };
        if authorized {
            lock(&e.live).status = Status::Connecting;
            e.kick.notify_one();
            return;
        }
        if self.oauth.pending(id).is_none() {
            let mut l = lock(&e.live);
            if l.status == Status::Authorizing {
                l.status = Status::NeedsAuth;
            }
        }
    }
}
