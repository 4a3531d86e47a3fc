//! `notifications.*` in `config.json`: the channels, the coalescing interval, quiet hours and
//! mutes. Secrets (the ntfy token, the webhook key, the VAPID private key) are never here: they
//! live in the vault under [`NTFY_TOKEN`], [`WEBHOOK_SECRET`] and [`VAPID_PRIVATE_KEY`].
//!
//! A channel URL is parsed when the config is loaded or saved ([`HttpUrl`]): anything but
//! `http`/`https` makes the whole document invalid, so `PUT /config` refuses it with a clear
//! error instead of a channel that fails later.

use serde::{Deserialize, Serialize};

/// Vault name of the VAPID private key (raw P-256 scalar, base64url). The spec's config shape
/// names it `services.push.vapid_private_key`, redacted by `GET /config`; it is never written
/// to the file.
pub const VAPID_PRIVATE_KEY: &str = "vapid_private_key";
/// Vault name of the ntfy access token (optional).
pub const NTFY_TOKEN: &str = "ntfy_token";
/// Vault name of the webhook's HMAC key (created on first use).
pub const WEBHOOK_SECRET: &str = "webhook_secret";

/// An absolute `http` or `https` URL, checked when the config is parsed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct HttpUrl(String);

impl HttpUrl {
    /// Parses `s`: an absolute URL whose scheme is `http` or `https` and that names a host.
    pub fn parse(s: &str) -> Result<Self, String> {
        let u = url::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err(format!(
                "{s:?}: only http and https URLs can be notification channels (scheme {:?})",
                u.scheme()
            ));
        }
        if u.host_str().is_none_or(str::is_empty) {
            return Err(format!("{s:?} names no host"));
        }
        Ok(Self(s.to_owned()))
    }

    /// The URL as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for HttpUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// `notifications`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NotifyConfig {
    /// Whether the node notifies at all (true). Recent notifications are still listed when off.
    pub enabled: bool,
    /// At most one notification per session per this many milliseconds; the rest of a flood is
    /// counted and sent as one when the interval ends (30 000).
    pub coalesce_ms: u64,
    /// How long a question must stay gone before its notification is cleared: a question
    /// redrawn within this time is the same question, not a new one (1 500).
    pub clear_grace_ms: u64,
    /// Nothing is sent between these local times; notifications are recorded as `suppressed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quiet_hours: Option<QuietHours>,
    /// Hosts whose notifications are recorded as `muted` and not sent.
    pub muted_hosts: Vec<String>,
    /// Sessions (id, alias or name) whose notifications are muted.
    pub muted_sessions: Vec<String>,
    /// Whether a session that exits non-zero notifies (true).
    pub on_exit_nonzero: bool,
    /// The address a tap opens (`https://box.tailnet.ts.net:9876`); without it links are
    /// relative (the web app resolves them against its own origin).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<HttpUrl>,
    /// Web Push to installed web apps.
    pub web_push: WebPushConfig,
    /// An ntfy-compatible topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ntfy: Option<NtfyConfig>,
    /// A generic signed JSON webhook.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookConfig>,
    /// Delivery attempts and deadlines, shared by every channel.
    pub delivery: DeliveryConfig,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            coalesce_ms: 30_000,
            clear_grace_ms: 1_500,
            quiet_hours: None,
            muted_hosts: Vec::new(),
            muted_sessions: Vec::new(),
            on_exit_nonzero: true,
            public_url: None,
            web_push: WebPushConfig::default(),
            ntfy: None,
            webhook: None,
            delivery: DeliveryConfig::default(),
        }
    }
}

/// `notifications.quiet_hours`: `from` to `to` (local `HH:MM`, may wrap past midnight).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuietHours {
    /// Start, `HH:MM`.
    pub from: String,
    /// End, `HH:MM` (exclusive).
    pub to: String,
    /// IANA zone (`Europe/Paris`); default: UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

impl QuietHours {
    /// Whether the instant `now_ms` (Unix ms) falls inside the quiet window.
    pub fn contains(&self, now_ms: u64) -> bool {
        let (Some(from), Some(to)) = (minutes(&self.from), minutes(&self.to)) else {
            return false;
        };
        let Some(utc) = chrono::DateTime::from_timestamp_millis(now_ms as i64) else {
            return false;
        };
        use chrono::Timelike;
        let (h, m) = match self
            .timezone
            .as_deref()
            .and_then(|z| z.parse::<chrono_tz::Tz>().ok())
        {
            Some(tz) => {
                let t = utc.with_timezone(&tz);
                (t.hour(), t.minute())
            }
            None => (utc.hour(), utc.minute()),
        };
        let now = h * 60 + m;
        if from <= to {
            from <= now && now < to
        } else {
            now >= from || now < to
        }
    }
}

/// `HH:MM` as minutes after midnight.
fn minutes(s: &str) -> Option<u32> {
    let (h, m) = s.split_once(':')?;
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

/// `notifications.web_push`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebPushConfig {
    /// Whether subscribed web apps are pushed to (true).
    pub enabled: bool,
    /// The VAPID `sub` claim push services may contact (`mailto:` or `https:`).
    pub subject: String,
    /// Accept subscription endpoints on loopback or private addresses from TCP callers (false:
    /// no request forgery through the push sender). IPC callers are this machine's user.
    pub allow_private_endpoints: bool,
    /// How long a push service keeps an undelivered message, seconds (43 200).
    pub ttl_secs: u64,
}

impl Default for WebPushConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            subject: "mailto:tuic@localhost".into(),
            allow_private_endpoints: false,
            ttl_secs: 43_200,
        }
    }
}

/// `notifications.ntfy`: an ntfy (or compatible) topic URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NtfyConfig {
    /// The topic URL (`https://ntfy.example.net/tuic-alerts`).
    pub url: HttpUrl,
    /// Priority of a question, 1–5 (4: high).
    #[serde(default = "default_priority")]
    pub priority: u8,
    /// Tags added to every message (ntfy shows known ones as emoji).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Whether the channel sends (true).
    #[serde(default = "yes")]
    pub enabled: bool,
}

/// `notifications.webhook`: a JSON POST signed with HMAC-SHA256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookConfig {
    /// Where the JSON goes.
    pub url: HttpUrl,
    /// Whether the channel sends (true).
    #[serde(default = "yes")]
    pub enabled: bool,
}

/// `notifications.delivery`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeliveryConfig {
    /// Attempts per delivery before it is recorded as failed (4).
    pub attempts: u32,
    /// First retry after this many ms; doubles each time (500).
    pub backoff_ms: u64,
    /// One attempt's deadline, ms (5 000): a receiver that hangs costs at most this.
    pub timeout_ms: u64,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            attempts: 4,
            backoff_ms: 500,
            timeout_ms: 5_000,
        }
    }
}

fn default_priority() -> u8 {
    4
}

fn yes() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_urls_must_be_http() {
        for bad in [
            "ftp://x/y",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "nope",
        ] {
            let doc = serde_json::json!({"ntfy": {"url": bad}});
            let err = serde_json::from_value::<NotifyConfig>(doc).unwrap_err();
            assert!(err.to_string().contains(bad), "{err}");
        }
        let ok = serde_json::json!({"webhook": {"url": "https://hooks.example.net/x"}});
        assert!(serde_json::from_value::<NotifyConfig>(ok).is_ok());
    }

    #[test]
    fn quiet_hours_wrap_midnight() {
        let q = QuietHours {
            from: "22:00".into(),
            to: "07:00".into(),
            timezone: None,
        };
        let at = |h: u64, m: u64| (h * 3600 + m * 60) * 1000;
        assert!(q.contains(at(23, 0)));
        assert!(q.contains(at(3, 30)));
        assert!(!q.contains(at(7, 0)));
        assert!(!q.contains(at(12, 0)));
        assert!(q.contains(at(22, 0)));
    }
}
