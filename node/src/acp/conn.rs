//! One connection's behaviour: its row and snapshot, the agent's launch, prompt turns,
//! cancellation, and the permission requests held until someone answers.

use super::*;

impl Conn {
    pub(super) fn row_of(&self, i: &Inner) -> ConnectionRow {
        ConnectionRow {
            id: self.id.clone(),
            name: i.rec.name.clone(),
            agent: i.rec.agent.clone(),
            cwd: i.rec.cwd.clone(),
            state: i.state,
            generation: i.rec.generation,
            last_seq: i.journal.last_seq(),
            pending: i
                .interactions
                .iter()
                .filter(|x| x.state == "pending")
                .count(),
            session_id: i.rec.session_id.clone(),
            created_ms: i.rec.created_ms,
            ended: i.rec.ended.clone(),
            host: None,
            tuic_session: Some(i.rec.identity.clone()),
            chat: i.rec.chat,
        }
    }

    /// The connection's row.
    pub fn row(&self) -> ConnectionRow {
        self.row_of(&lock(&self.inner))
    }

    /// The snapshot: row, plan, pending interactions, the kept range.
    pub fn snapshot(&self) -> (Snapshot, usize) {
        let i = lock(&self.inner);
        (
            Snapshot {
                row: self.row_of(&i),
                first_seq: i.journal.first_seq(),
                plan: i.plan.clone(),
                interactions: i
                    .interactions
                    .iter()
                    .filter(|x| x.state == "pending")
                    .cloned()
                    .collect(),
                error: i.error.clone(),
            },
            i.journal.bytes(),
        )
    }

    /// Every remembered interaction, oldest first.
    pub fn interactions(&self) -> Vec<Interaction> {
        lock(&self.inner).interactions.iter().cloned().collect()
    }

    /// Frames after `after` (up to `max`); `Err(first_seq)` when some were dropped.
    pub(crate) fn frames_after(&self, after: u64, max: usize) -> Result<Vec<Kept>, u64> {
        lock(&self.inner).journal.after(after, max)
    }

    /// The oldest sequence kept.
    pub fn first_seq(&self) -> u64 {
        lock(&self.inner).journal.first_seq()
    }

    /// A receiver of the newest sequence.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.seq.subscribe()
    }

    /// Appends a frame, persists it and wakes the streams. Returns its sequence.
    pub(super) fn push(&self, body: FrameBody) -> u64 {
        self.push_with(body, |_, _| ()).0
    }

    /// [`Conn::push`] that also runs `f` on the connection's state (with the frame's sequence)
    /// under the same lock, before any stream is woken: a reader that acts on the frame (the
    /// phone answering a `permission` at once, a test reading the snapshot) never meets the
    /// state from before it.
    pub(super) fn push_with<R>(
        &self,
        body: FrameBody,
        f: impl FnOnce(&mut Inner, u64) -> R,
    ) -> (u64, R) {
        let (max_bytes, max_age) = *lock(&self.shared.bounds);
        let mut i = lock(&self.inner);
        if let FrameBody::Update { update } = &body
            && update["sessionUpdate"] == "plan"
        {
            i.plan = Some(update["entries"].clone());
        }
        let a = i.journal.append(body, now_ms(), max_bytes, max_age);
        let seq = a.kept.frame.seq;
        let r = f(&mut i, seq);
        drop(i);
        self.shared.persist_frame(&self.id, &a);
        self.seq.send_replace(seq);
        (seq, r)
    }

    pub(super) fn notice(&self, kind: &str, sequence: u64, request_id: Option<String>) {
        let (generation, session_id) = {
            let i = lock(&self.inner);
            (i.rec.generation, i.rec.session_id.clone())
        };
        self.shared.env.bus.publish(Event::AcpNotice(Notice {
            kind: kind.into(),
            connection_id: self.id.clone(),
            generation,
            sequence,
            session_id,
            request_id,
        }));
    }

    pub(super) fn persist(&self) {
        let rec = lock(&self.inner).rec.clone();
        self.shared.persist_record(&rec);
    }

    pub(super) fn launch(self: &Arc<Self>, spec: AgentSpec, load: Option<String>) {
        let stop = self.shared.env.shutdown.child_token();
        let generation = {
            let mut i = lock(&self.inner);
            i.rec.generation += 1;
            i.stop = stop.clone();
            i.gone = CancellationToken::new();
            i.rec.generation
        };
        self.persist();
        self.push(FrameBody::Started {
            agent: spec.name.clone(),
            generation,
        });
        let conn = self.clone();
        self.shared
            .env
            .tasks
            .spawn(driver::run(conn, spec, load, stop));
    }

    /// Starts a prompt turn; its end is journaled as `turn_end`. Returns the turn number.
    pub fn prompt(self: &Arc<Self>, content: Vec<Value>) -> Result<u64, AcpError> {
        if content.is_empty() {
            return Err(AcpError::BadInput("content must not be empty".into()));
        }
        let mut blocks = Vec::with_capacity(content.len());
        for (n, c) in content.iter().enumerate() {
            let kind = c["type"].as_str().unwrap_or_default();
            if !matches!(kind, "text" | "image" | "resource_link" | "resource") {
                return Err(AcpError::BadInput(format!(
                    "content[{n}]: type must be text, image, resource_link or resource"
                )));
            }
            let block: agent_client_protocol::v1::schema::ContentBlock =
                serde_json::from_value(c.clone())
                    .map_err(|e| AcpError::BadInput(format!("content[{n}]: {e}")))?;
            blocks.push(block);
        }
        self.shared.settings();
        let (cx, session_id, turn, gone) = {
            let mut i = lock(&self.inner);
            match i.state {
                ConnState::Ready | ConnState::Settled => {}
                s => {
                    return Err(AcpError::Conflict(format!(
                        "connection {} is {}; a prompt needs it ready or settled",
                        self.id,
                        state_name(s)
                    )));
                }
            }
            let Some(live) = &i.live else {
                return Err(AcpError::Conflict(format!(
                    "connection {} has no agent",
                    self.id
                )));
            };
            let cx = live.cx.clone();
            let sid = live.session_id.clone();
            i.rec.turn += 1;
            i.turn_running = true;
            i.state = ConnState::Working;
            (cx, sid, i.rec.turn, i.gone.clone())
        };
        self.persist();
        self.push(FrameBody::Prompt { turn, content });
        let conn = self.clone();
        self.shared.env.tasks.spawn(async move {
            let req = agent_client_protocol::v1::schema::PromptRequest::new(session_id, blocks);
            let r = cx.send_request(req).block_task().await;
            let body = match r {
                Ok(resp) => FrameBody::TurnEnd {
                    turn,
                    stop_reason: serde_json::to_value(resp.stop_reason)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_else(|| "end_turn".into()),
                    error: None,
                },
                Err(e) => {
                    if agent_client_protocol::is_connection_terminated(&e)
                        || agent_client_protocol::is_incoming_transport_closed(&e)
                    {
                        // The agent went away: its driver settles the turn with the reason.
                        let _ = tokio::time::timeout(GONE_WAIT, gone.cancelled()).await;
                    }
                    FrameBody::TurnEnd {
                        turn,
                        stop_reason: "error".into(),
                        error: Some(conn.exit_reason().unwrap_or_else(|| e.message.clone())),
                    }
                }
            };
            conn.end_turn(body);
        });
        Ok(turn)
    }

    pub(super) fn end_turn(&self, body: FrameBody) {
        {
            let mut i = lock(&self.inner);
            if !i.turn_running {
                return;
            }
            i.turn_running = false;
            if i.state != ConnState::Ended {
                i.state = ConnState::Settled;
            }
        }
        let seq = self.push(body);
        self.notice("settled", seq, None);
    }

    pub(super) fn exit_reason(&self) -> Option<String> {
        lock(&self.inner).rec.ended.clone()
    }

    /// Cancels the running turn (`session/cancel`); held permission requests are cancelled.
    pub fn cancel(&self) -> Result<(), AcpError> {
        let (cx, sid) = {
            let i = lock(&self.inner);
            let Some(live) = &i.live else {
                return Err(AcpError::Conflict(format!(
                    "connection {} has no agent",
                    self.id
                )));
            };
            (live.cx.clone(), live.session_id.clone())
        };
        self.cancel_all_held("cancel");
        cx.send_notification(agent_client_protocol::v1::schema::CancelNotification::new(
            sid,
        ))
        .map_err(|e| AcpError::Conflict(e.message))?;
        Ok(())
    }

    /// Answers a held permission request with one of its options. First answer wins.
    pub fn answer(&self, rid: &str, option_id: &str, by: &str) -> Result<Interaction, AcpError> {
        let held = {
            let mut h = lock(&self.held);
            match h.get(rid) {
                Some(x) if !x.options.iter().any(|o| o == option_id) => {
                    return Err(AcpError::BadInput(format!(
                        "option {option_id:?} is not one of {:?}",
                        x.options
                    )));
                }
                Some(_) => h.remove(rid),
                None => None,
            }
        };
        let Some(held) = held else {
            let i = lock(&self.inner);
            return match i.interactions.iter().find(|x| x.request_id == rid) {
                Some(x) => Err(AcpError::Answered {
                    request_id: rid.to_owned(),
                    by: x.by.clone().unwrap_or_default(),
                }),
                None => Err(AcpError::UnknownRequest(rid.to_owned())),
            };
        };
        let resp: agent_client_protocol::v1::schema::RequestPermissionResponse =
            serde_json::from_value(serde_json::json!({
                "outcome": {"outcome": "selected", "optionId": option_id}
            }))
            .map_err(|e| AcpError::BadInput(e.to_string()))?;
        if let Err(e) = held.responder.respond(resp) {
            tracing::debug!(source = "acp", conn = %self.id, error = %e.message, "permission answer not delivered");
        }
        Ok(self.settle(rid, Some(option_id.to_owned()), by))
    }

    /// Journals the outcome and updates the interaction and the state.
    pub(super) fn settle(&self, rid: &str, option_id: Option<String>, by: &str) -> Interaction {
        let outcome = FrameBody::PermissionOutcome {
            request_id: rid.to_owned(),
            option_id: option_id.clone(),
            by: by.to_owned(),
        };
        let (seq, out) = self.push_with(outcome, |i, _| {
            let mut out = None;
            if let Some(x) = i.interactions.iter_mut().find(|x| x.request_id == rid) {
                x.state = if option_id.is_some() {
                    "answered"
                } else {
                    "cancelled"
                }
                .into();
                x.option_id = option_id;
                x.by = Some(by.to_owned());
                out = Some(x.clone());
            }
            let pending = i.interactions.iter().any(|x| x.state == "pending");
            if i.state == ConnState::NeedsYou && !pending {
                i.state = if i.turn_running {
                    ConnState::Working
                } else {
                    ConnState::Settled
                };
            }
            out
        });
        self.notice("interaction_settled", seq, Some(rid.to_owned()));
        out.unwrap_or(Interaction {
            request_id: rid.to_owned(),
            tool_call: Value::Null,
            options: Vec::new(),
            seq,
            state: "cancelled".into(),
            option_id: None,
            by: Some(by.to_owned()),
        })
    }

    /// Cancels one held request (timeout) if it is still held.
    pub(super) fn cancel_held(&self, rid: &str, why: &str) {
        let held = lock(&self.held).remove(rid);
        if let Some(h) = held {
            let resp: Result<agent_client_protocol::v1::schema::RequestPermissionResponse, _> =
                serde_json::from_value(serde_json::json!({"outcome": {"outcome": "cancelled"}}));
            if let Ok(r) = resp {
                let _ = h.responder.respond(r);
            }
            self.settle(rid, None, why);
        }
    }

    pub(super) fn cancel_all_held(&self, why: &str) {
        let ids: Vec<String> = lock(&self.held).keys().cloned().collect();
        for rid in ids {
            self.cancel_held(&rid, why);
        }
    }

    /// Holds a permission request from the agent (called by the driver's handler).
    pub(super) fn hold_permission(
        self: &Arc<Self>,
        tool_call: Value,
        options: Vec<PermissionOption>,
        responder: agent_client_protocol::v1::Responder<
            agent_client_protocol::v1::schema::RequestPermissionResponse,
        >,
    ) {
        let n = self
            .next_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rid = format!("p{}-{n}", lock(&self.inner).rec.generation);
        lock(&self.held).insert(
            rid.clone(),
            Held {
                responder,
                options: options.iter().map(|o| o.option_id.clone()).collect(),
            },
        );
        let frame = FrameBody::Permission {
            request_id: rid.clone(),
            tool_call: tool_call.clone(),
            options: options.clone(),
        };
        // The interaction is pending and the state `needs_you` by the time a reader sees the
        // frame, so an answer that comes at once finds it.
        let (seq, ()) = self.push_with(frame, |i, seq| {
            i.interactions.push_back(Interaction {
                request_id: rid.clone(),
                tool_call,
                options,
                seq,
                state: "pending".into(),
                option_id: None,
                by: None,
            });
            while i.interactions.len() > INTERACTIONS_KEPT {
                match i.interactions.iter().position(|x| x.state != "pending") {
                    Some(p) => {
                        i.interactions.remove(p);
                    }
                    None => break,
                }
            }
            if i.state != ConnState::Ended {
                i.state = ConnState::NeedsYou;
            }
        });
        self.notice("interaction_pending", seq, Some(rid.clone()));
        let timeout = self.shared.settings().permission_timeout;
        let conn = self.clone();
        let stop = lock(&self.inner).stop.clone();
        self.shared.env.tasks.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(timeout) => conn.cancel_held(&rid, "timeout"),
                _ = stop.cancelled() => {}
            }
        });
    }
}
