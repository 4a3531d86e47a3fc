//! Web Push (RFC 8030) to installed web apps: the node's VAPID key (RFC 8292), the stored
//! subscriptions, and one encrypted push request per subscription (RFC 8291, `aes128gcm`,
//! done by `web-push-native`; see `docs/internals.md` for why that crate).
//!
//! A subscription's endpoint is where the node will POST: a TCP caller may not point it at a
//! loopback, link-local or private address unless `notifications.web_push.allow_private_endpoints`
//! is set (no request forgery through the push sender); the same check runs again on the
//! resolved addresses before each send. IPC callers are this machine's user and are trusted.

use std::net::IpAddr;
use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use p256::ecdsa::signature::Signer as _;
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use serde::{Deserialize, Serialize};

/// The largest plaintext one push message carries: 4096 octets on the wire (RFC 8291 §4)
/// minus the 86-octet header, the 16-octet tag and the padding delimiter.
pub const MAX_PLAINTEXT: usize = 4096 - 86 - 16 - 1;

/// Why a subscription was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubscriptionError {
    /// The endpoint is not an absolute http(s) URL with a host.
    #[error("endpoint must be an absolute https URL: {0}")]
    BadEndpoint(String),
    /// `keys.p256dh` is not an uncompressed P-256 point in base64url.
    #[error("keys.p256dh is not a P-256 public key (65 bytes, base64url)")]
    BadKey,
    /// `keys.auth` is not 16 bytes of base64url.
    #[error("keys.auth must be 16 bytes, base64url")]
    BadAuth,
    /// The endpoint is on a loopback, link-local or private address and the caller is remote.
    #[error(
        "endpoint host {0} is a loopback or private address; set notifications.web_push.allow_private_endpoints to allow it"
    )]
    PrivateEndpoint(String),
}

impl SubscriptionError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::PrivateEndpoint(_) => "endpoint_refused",
            _ => "bad_subscription",
        }
    }
}

/// A browser's push subscription (`PushSubscription.toJSON()`), as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// The node's id for it.
    pub id: String,
    /// The push service URL.
    pub endpoint: String,
    /// The browser's public key (base64url, 65 bytes).
    pub p256dh: String,
    /// The browser's auth secret (base64url, 16 bytes).
    pub auth: String,
    /// When it was added (Unix ms).
    pub created_ms: u64,
    /// Added over IPC (this machine's user): private endpoints are allowed.
    #[serde(default)]
    pub trusted: bool,
    /// What the browser said it is (`User-Agent`), to tell devices apart in the list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

impl Subscription {
    /// The endpoint's origin, which is what listing shows (the full URL is a capability).
    pub fn origin(&self) -> String {
        url::Url::parse(&self.endpoint)
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_default()
    }
}

/// Checks a subscription's shape (not its reachability).
pub fn validate(endpoint: &str, p256dh: &str, auth: &str) -> Result<(), SubscriptionError> {
    let u =
        url::Url::parse(endpoint).map_err(|_| SubscriptionError::BadEndpoint(endpoint.into()))?;
    if !matches!(u.scheme(), "https" | "http") || u.host_str().is_none_or(str::is_empty) {
        return Err(SubscriptionError::BadEndpoint(endpoint.into()));
    }
    let key = B64
        .decode(p256dh.trim_end_matches('='))
        .map_err(|_| SubscriptionError::BadKey)?;
    p256::PublicKey::from_sec1_bytes(&key).map_err(|_| SubscriptionError::BadKey)?;
    let a = B64
        .decode(auth.trim_end_matches('='))
        .map_err(|_| SubscriptionError::BadAuth)?;
    if a.len() != 16 {
        return Err(SubscriptionError::BadAuth);
    }
    Ok(())
}

/// Whether an address is one a remote caller may not make the node POST to.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v) => {
            v.is_loopback()
                || v.is_private()
                || v.is_link_local()
                || v.is_unspecified()
                || v.is_broadcast()
                || v.octets()[0] == 100 && (v.octets()[1] & 0xc0) == 64 // CGNAT / Tailscale
        }
        IpAddr::V6(v) => {
            v.is_loopback()
                || v.is_unspecified()
                || (v.segments()[0] & 0xfe00) == 0xfc00 // unique local
                || (v.segments()[0] & 0xffc0) == 0xfe80 // link local
                || v.to_ipv4_mapped().is_some_and(|m| is_private(IpAddr::V4(m)))
        }
    }
}

/// Resolves the endpoint's host and refuses it when any address is private. Blocking-free.
pub async fn check_endpoint(endpoint: &str) -> Result<(), SubscriptionError> {
    let u =
        url::Url::parse(endpoint).map_err(|_| SubscriptionError::BadEndpoint(endpoint.into()))?;
    let host = u
        .host_str()
        .ok_or_else(|| SubscriptionError::BadEndpoint(endpoint.into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = u.port_or_known_default().unwrap_or(443);
    let addrs: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|_| SubscriptionError::BadEndpoint(endpoint.into()))?
            .map(|a| a.ip())
            .collect(),
    };
    if addrs.is_empty() || addrs.iter().any(|ip| is_private(*ip)) {
        return Err(SubscriptionError::PrivateEndpoint(host));
    }
    Ok(())
}

/// The subscriptions file (`push-subscriptions.json`, 0600).
#[derive(Debug)]
pub struct Subscriptions {
    file: PathBuf,
    list: Vec<Subscription>,
}

impl Subscriptions {
    /// Loads the file (missing or unreadable: none).
    pub fn load(file: PathBuf) -> Self {
        let list = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Self { file, list }
    }

    /// Every subscription.
    pub fn list(&self) -> &[Subscription] {
        &self.list
    }

    /// Adds (or replaces, by endpoint) a subscription and saves. Blocking (a small file).
    pub fn upsert(&mut self, s: Subscription) -> anyhow::Result<Subscription> {
        let kept = match self.list.iter_mut().find(|x| x.endpoint == s.endpoint) {
            Some(x) => {
                x.p256dh = s.p256dh;
                x.auth = s.auth;
                x.trusted = s.trusted;
                x.device = s.device;
                x.clone()
            }
            None => {
                self.list.push(s.clone());
                s
            }
        };
        self.save()?;
        Ok(kept)
    }

    /// Removes by id or endpoint; returns whether one was removed.
    pub fn remove(&mut self, id_or_endpoint: &str) -> anyhow::Result<bool> {
        let before = self.list.len();
        self.list
            .retain(|s| s.id != id_or_endpoint && s.endpoint != id_or_endpoint);
        let removed = self.list.len() != before;
        if removed {
            self.save()?;
        }
        Ok(removed)
    }

    fn save(&self) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec_pretty(&self.list)?;
        crate::config::write_file_atomic(&self.file, &bytes, 0o600)
    }
}

/// The node's VAPID key pair.
#[derive(Clone)]
pub struct Vapid {
    key: p256::SecretKey,
}

impl std::fmt::Debug for Vapid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vapid")
            .field("public", &self.public_b64())
            .finish_non_exhaustive()
    }
}

impl Vapid {
    /// A fresh private key, base64url (what the vault stores).
    pub fn generate() -> String {
        let k = p256::SecretKey::random(&mut p256::elliptic_curve::rand_core::OsRng);
        B64.encode(k.to_bytes())
    }

    /// The key stored as base64url.
    pub fn from_b64(s: &str) -> anyhow::Result<Self> {
        let bytes = B64.decode(s.trim())?;
        let key = p256::SecretKey::from_slice(&bytes)
            .map_err(|_| anyhow::anyhow!("the stored VAPID key is not a P-256 scalar"))?;
        Ok(Self { key })
    }

    /// The public key as browsers take it (`applicationServerKey`): the uncompressed point.
    pub fn public_b64(&self) -> String {
        B64.encode(self.key.public_key().to_encoded_point(false).as_bytes())
    }

    /// The `Authorization: vapid t=…, k=…` value for a push service at `aud` (its origin).
    pub fn authorization(&self, aud: &str, subject: &str, exp_unix: u64) -> String {
        let header = B64.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = B64
            .encode(serde_json::json!({"aud": aud, "exp": exp_unix, "sub": subject}).to_string());
        let signing_input = format!("{header}.{claims}");
        let sk = p256::ecdsa::SigningKey::from(&self.key);
        let sig: p256::ecdsa::Signature = sk.sign(signing_input.as_bytes());
        let jwt = format!("{signing_input}.{}", B64.encode(sig.to_bytes()));
        format!("vapid t={jwt}, k={}", self.public_b64())
    }
}

/// One encrypted push request for `sub`: the endpoint, its headers and the `aes128gcm` body.
pub fn build_request(
    sub: &Subscription,
    vapid: &Vapid,
    subject: &str,
    ttl_secs: u64,
    urgency: &str,
    plaintext: &[u8],
    now_unix: u64,
) -> anyhow::Result<reqwest::Request> {
    let ua_public =
        p256::PublicKey::from_sec1_bytes(&B64.decode(sub.p256dh.trim_end_matches('='))?)
            .map_err(|_| anyhow::anyhow!("subscription key is not a P-256 point"))?;
    let auth_bytes = B64.decode(sub.auth.trim_end_matches('='))?;
    anyhow::ensure!(auth_bytes.len() == 16, "subscription auth is not 16 bytes");
    let auth = web_push_native::Auth::clone_from_slice(&auth_bytes);
    let builder = web_push_native::WebPushBuilder::new(sub.endpoint.parse()?, ua_public, auth)
        .with_valid_duration(std::time::Duration::from_secs(ttl_secs));
    let req = builder
        .build(plaintext.to_vec())
        .map_err(|e| anyhow::anyhow!("encrypting the push message: {e}"))?;
    let origin = url::Url::parse(&sub.endpoint)?
        .origin()
        .ascii_serialization();
    // Twelve hours is the longest a push service must accept (RFC 8292 §2).
    let authz = vapid.authorization(&origin, subject, now_unix + 12 * 3600);
    let (mut parts, body) = req.into_parts();
    parts.headers.insert("authorization", authz.parse()?);
    parts.headers.insert("urgency", urgency.parse()?);
    let req = http::Request::from_parts(parts, body);
    Ok(reqwest::Request::try_from(req)?)
}

/// Cuts `s` to at most `max` bytes on a character boundary, marking the cut with `…`.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_checks() {
        let k = p256::SecretKey::random(&mut p256::elliptic_curve::rand_core::OsRng);
        let pk = B64.encode(k.public_key().to_encoded_point(false).as_bytes());
        let auth = B64.encode([7u8; 16]);
        assert_eq!(validate("https://push.example/x", &pk, &auth), Ok(()));
        assert!(matches!(
            validate("ftp://push/x", &pk, &auth),
            Err(SubscriptionError::BadEndpoint(_))
        ));
        assert_eq!(
            validate("https://p/x", "AAAA", &auth),
            Err(SubscriptionError::BadKey)
        );
        assert_eq!(
            validate("https://p/x", &pk, "AAAA"),
            Err(SubscriptionError::BadAuth)
        );
    }

    #[test]
    fn private_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.1.1",
            "172.16.0.1",
            "169.254.1.1",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(is_private(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "2001:4860::1", "100.128.0.1"] {
            assert!(!is_private(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn vapid_jwt_verifies_with_the_public_key() {
        use p256::ecdsa::signature::Verifier as _;
        let v = Vapid::from_b64(&Vapid::generate()).unwrap();
        let h = v.authorization("https://push.example", "mailto:a@b", 1);
        let t = h
            .strip_prefix("vapid t=")
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        let (input, sig) = t.rsplit_once('.').unwrap();
        let sig = p256::ecdsa::Signature::from_slice(&B64.decode(sig).unwrap()).unwrap();
        let pk = p256::ecdsa::VerifyingKey::from_sec1_bytes(&B64.decode(v.public_b64()).unwrap())
            .unwrap();
        pk.verify(input.as_bytes(), &sig).unwrap();
    }

    #[test]
    fn truncation_keeps_utf8() {
        let s = "é".repeat(10);
        let t = truncate(&s, 7);
        assert!(t.len() <= 7 && t.ends_with('…'));
    }
}
