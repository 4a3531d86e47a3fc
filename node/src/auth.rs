//! Authentication of TCP callers: Basic against the bcrypt hash, the `tui-session` login
//! cookie, and `?token=` where browsers cannot set headers.
//!
//! bcrypt runs at login (and on the first Basic use of a credential), never per request:
//! a successful Basic credential is remembered for a short while by its digest, so a client
//! that sends Basic on every request pays ~0.25 s of hashing once, not every time. Failures
//! are rate limited per client address, shared by Basic and the login form.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use sha2::{Digest, Sha256};

/// Name of the login cookie.
pub(crate) const COOKIE_NAME: &str = "tui-session";

/// The window over which failed attempts are counted.
const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// In-memory authentication state of a node.
#[derive(Debug, Default)]
pub struct AuthState {
    /// sha256(token) hex → expiry, unix ms. Mirrors the store; the store is the durable copy.
    login_sessions: Mutex<HashMap<String, u64>>,
    /// sha256(user:pass) → when the successful check expires from the cache.
    basic_cache: Mutex<HashMap<[u8; 32], Instant>>,
    /// Recent failures per client address.
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

/// What a rate-limit check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Go on.
    Allowed,
    /// Too many failures: retry after this many seconds.
    Throttled { retry_after_secs: u64 },
}

/// sha256 hex of a token, the form in which login sessions are stored.
pub(crate) fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Constant-time string comparison for secrets.
pub(crate) fn secret_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl AuthState {
    /// Loads persisted login sessions.
    pub fn with_sessions(sessions: impl IntoIterator<Item = (String, u64)>) -> Self {
        let s = Self::default();
        s.login_sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(sessions);
        s
    }

    /// Registers a new login session (already persisted by the caller).
    pub fn add_login_session(&self, hash: String, expires_ms: u64) {
        self.login_sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(hash, expires_ms);
    }

    /// Checks a login-session token. On success returns the new expiry when the sliding
    /// window moved by more than a day (the caller persists it and refreshes the cookie).
    pub fn check_login_token(
        &self,
        token: &str,
        now_ms: u64,
        lifetime_ms: u64,
    ) -> Option<Option<u64>> {
        let hash = token_hash(token);
        let mut map = self
            .login_sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let exp = map.get_mut(&hash)?;
        if *exp < now_ms {
            map.remove(&hash);
            return None;
        }
        let slid = now_ms + lifetime_ms;
        if slid.saturating_sub(*exp) > 86_400_000 {
            *exp = slid;
            Some(Some(slid))
        } else {
            Some(None)
        }
    }

    /// Whether `ip` may try a password now.
    pub fn admit(&self, ip: IpAddr, now: Instant, per_minute: u32) -> Admission {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let Some(q) = f.get_mut(&ip) else {
            return Admission::Allowed;
        };
        while q
            .front()
            .is_some_and(|t| now.duration_since(*t) >= FAILURE_WINDOW)
        {
            q.pop_front();
        }
        if q.len() < per_minute as usize {
            return Admission::Allowed;
        }
        let oldest = *q.front().expect("non-empty");
        let wait = FAILURE_WINDOW.saturating_sub(now.duration_since(oldest));
        Admission::Throttled {
            retry_after_secs: wait.as_secs().max(1),
        }
    }

    /// Records a failed password attempt from `ip`.
    pub fn record_failure(&self, ip: IpAddr, now: Instant) {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        // Bound the table: addresses whose failures are all older than the window go.
        if f.len() > 10_000 {
            f.retain(|_, q| {
                q.back()
                    .is_some_and(|t| now.duration_since(*t) < FAILURE_WINDOW)
            });
        }
        f.entry(ip).or_default().push_back(now);
    }

    /// Whether this Basic credential was verified recently.
    pub fn basic_cached(&self, user: &str, pass: &str, now: Instant) -> bool {
        let key = basic_key(user, pass);
        let mut c = self.basic_cache.lock().unwrap_or_else(|p| p.into_inner());
        match c.get(&key) {
            Some(until) if *until > now => true,
            Some(_) => {
                c.remove(&key);
                false
            }
            None => false,
        }
    }

    /// Remembers a verified Basic credential for `ttl` from `now` (the caller's clock, as for
    /// [`Self::basic_cached`]).
    pub fn remember_basic(&self, user: &str, pass: &str, now: Instant, ttl: Duration) {
        let mut c = self.basic_cache.lock().unwrap_or_else(|p| p.into_inner());
        if c.len() > 1024 {
            c.retain(|_, u| *u > now);
        }
        c.insert(basic_key(user, pass), now + ttl);
    }

    /// Forgets every remembered Basic credential (after a password change).
    pub fn clear_basic_cache(&self) {
        self.basic_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

fn basic_key(user: &str, pass: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(user.as_bytes());
    h.update([0]);
    h.update(pass.as_bytes());
    h.finalize().into()
}

/// Parses an `Authorization: Basic` header value.
pub(crate) fn parse_basic(value: &str) -> Option<(String, String)> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let s = String::from_utf8(raw).ok()?;
    let (u, p) = s.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}

/// Finds a cookie's value in `Cookie` header values.
pub(crate) fn find_cookie<'a>(
    headers: impl Iterator<Item = &'a str>,
    name: &str,
) -> Option<&'a str> {
    headers
        .flat_map(|h| h.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
}

/// The `Set-Cookie` value for a login session.
pub(crate) fn session_cookie(token: &str, max_age_secs: u64) -> String {
    format!("{COOKIE_NAME}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}")
}

/// Hashes a password with bcrypt (blocking, ~0.25 s at the default cost).
pub(crate) fn hash_password(password: &str) -> anyhow::Result<String> {
    Ok(bcrypt::hash(password, bcrypt::DEFAULT_COST)?)
}

/// Verifies a password against a bcrypt hash (blocking). A malformed hash never verifies.
pub(crate) fn verify_password(password: &str, hash: &str) -> bool {
    bcrypt::verify(password, hash).unwrap_or(false)
}

/// Where a login may send the browser afterwards: `/` or `/mobile…` only.
pub(crate) fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n) if n == "/" => n,
        Some(n)
            if (n == "/mobile" || n.starts_with("/mobile/") || n.starts_with("/mobile?"))
                && !n.contains("//")
                && !n.contains('\\') =>
        {
            n
        }
        _ => "/mobile",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_header_parsing() {
        let v = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("admin:pa:ss")
        );
        assert_eq!(parse_basic(&v), Some(("admin".into(), "pa:ss".into())));
        assert_eq!(parse_basic("Bearer x"), None);
        assert_eq!(parse_basic("Basic !!!"), None);
    }

    #[test]
    fn cookie_lookup() {
        let hs = ["a=1; tui-session=abc", "x=y"];
        assert_eq!(find_cookie(hs.iter().copied(), "tui-session"), Some("abc"));
        assert_eq!(find_cookie(hs.iter().copied(), "nope"), None);
    }

    #[test]
    fn rate_limit_after_five_failures_then_recovers() {
        let a = AuthState::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..5 {
            assert_eq!(a.admit(ip, t0, 5), Admission::Allowed);
            a.record_failure(ip, t0);
        }
        assert!(matches!(
            a.admit(ip, t0, 5),
            Admission::Throttled {
                retry_after_secs: 60
            }
        ));
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(a.admit(other, t0, 5), Admission::Allowed);
        assert_eq!(a.admit(ip, t0 + FAILURE_WINDOW, 5), Admission::Allowed);
    }

    #[test]
    fn login_tokens_slide_and_expire() {
        let day = 86_400_000;
        let a = AuthState::with_sessions([(token_hash("t"), 30 * day)]);
        assert_eq!(a.check_login_token("t", 0, 30 * day), Some(None));
        assert_eq!(
            a.check_login_token("t", 2 * day, 30 * day),
            Some(Some(32 * day))
        );
        assert_eq!(a.check_login_token("u", 0, 30 * day), None);
        assert_eq!(a.check_login_token("t", 33 * day, 30 * day), None);
        assert_eq!(
            a.check_login_token("t", 0, 30 * day),
            None,
            "expired sessions are removed"
        );
    }

    #[test]
    fn next_is_limited_to_root_and_mobile() {
        assert_eq!(safe_next(Some("/")), "/");
        assert_eq!(safe_next(Some("/mobile/s/1")), "/mobile/s/1");
        assert_eq!(safe_next(Some("//evil.example")), "/mobile");
        assert_eq!(safe_next(Some("https://evil.example")), "/mobile");
        assert_eq!(safe_next(Some("/mobile//evil")), "/mobile");
        assert_eq!(safe_next(Some("/config")), "/mobile");
        assert_eq!(safe_next(None), "/mobile");
    }

    #[test]
    fn secret_eq_is_exact() {
        assert!(secret_eq("abc", "abc"));
        assert!(!secret_eq("abc", "abd"));
        assert!(!secret_eq("abc", "ab"));
    }
}
