//! Authentication of TCP callers: Basic against the bcrypt hash, the `tui-session` login
//! cookie, and `?token=` where browsers cannot set headers.
//!
//! bcrypt runs at login (and on the first Basic use of a credential), never per request:
//! a successful Basic credential is remembered for a short while by its digest, so a client
//! that sends Basic on every request pays ~0.25 s of hashing once, not every time. Failures
//! are rate limited per (client address, user name), shared by Basic and the login form,
//! under a node-wide ceiling: a wrong password typed as one user never locks out another
//! user's right password from the same address (a NAT, loopback behind `tailscale serve`).
//!
//! Login cookies are server-side sessions ([`LoginSession`], durable in the store): each
//! can be listed and revoked, logout revokes its own, and a password change revokes all.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Name of the login cookie.
pub(crate) const COOKIE_NAME: &str = "tui-session";

/// The window over which failed attempts are counted.
const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// A persisted login's last use is rewritten at most this often (the in-memory copy is exact).
const LAST_USE_PERSIST_MS: u64 = 600_000;

/// One login (a `tui-session` cookie a person got from `POST /auth/login`), kept server-side
/// under sha256 of its token; the token itself is never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginSession {
    /// When it was created, unix ms (0 for a login kept from before these records).
    pub created_ms: u64,
    /// Its last authenticated request, unix ms.
    pub last_used_ms: u64,
    /// When it expires unless used again, unix ms (the window slides).
    pub expires_ms: u64,
    /// The client address that logged in.
    #[serde(default)]
    pub address: String,
    /// The `User-Agent` that logged in (at most 256 characters).
    #[serde(default)]
    pub user_agent: String,
}

/// The public id of a login: the first 16 hex digits of its token's sha256 (enough to name
/// one, useless to authenticate with).
pub(crate) fn login_id(hash: &str) -> &str {
    hash.get(..16).unwrap_or(hash)
}

/// What a successful login-cookie check asks of the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginUse {
    /// Persist this record (its expiry slid, or its last use is old in the store).
    pub persist: Option<LoginSession>,
    /// The expiry slid by more than a day: send the cookie again with a fresh Max-Age.
    pub refresh_cookie: bool,
}

/// A failure-throttle key: the client address and the user name tried (`""` where there is
/// none, e.g. a peer link's token).
type FailureKey = (IpAddr, String);

/// In-memory authentication state of a node.
#[derive(Debug, Default)]
pub struct AuthState {
    /// sha256(token) hex → its login. Mirrors the store; the store is the durable copy.
    login_sessions: Mutex<HashMap<String, LoginSession>>,
    /// sha256(user:pass) → when the successful check expires from the cache.
    basic_cache: Mutex<HashMap<[u8; 32], Instant>>,
    /// Recent failures per (client address, user name), and all of them for the ceiling.
    failures: Mutex<Failures>,
}

#[derive(Debug, Default)]
struct Failures {
    per_key: HashMap<FailureKey, VecDeque<Instant>>,
    all: VecDeque<Instant>,
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
    pub fn with_sessions(sessions: impl IntoIterator<Item = (String, LoginSession)>) -> Self {
        let s = Self::default();
        s.logins().extend(sessions);
        s
    }

    fn logins(&self) -> std::sync::MutexGuard<'_, HashMap<String, LoginSession>> {
        self.login_sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new login session (already persisted by the caller).
    pub fn add_login_session(&self, hash: String, session: LoginSession) {
        self.logins().insert(hash, session);
    }

    /// Checks a login-session token and records its use at `now_ms`; `None` when it is
    /// unknown, revoked or expired.
    pub fn check_login_token(
        &self,
        token: &str,
        now_ms: u64,
        lifetime_ms: u64,
    ) -> Option<LoginUse> {
        let hash = token_hash(token);
        let mut map = self.logins();
        let s = map.get_mut(&hash)?;
        if s.expires_ms < now_ms {
            map.remove(&hash);
            return None;
        }
        let persisted_use = s.last_used_ms;
        s.last_used_ms = s.last_used_ms.max(now_ms);
        let slid = now_ms + lifetime_ms;
        let refresh_cookie = slid.saturating_sub(s.expires_ms) > 86_400_000;
        if refresh_cookie {
            s.expires_ms = slid;
        }
        let stale_use = now_ms.saturating_sub(persisted_use) >= LAST_USE_PERSIST_MS;
        Some(LoginUse {
            persist: (refresh_cookie || stale_use).then(|| s.clone()),
            refresh_cookie,
        })
    }

    /// Every live login: (sha256 of its token, record), oldest first.
    pub fn login_sessions(&self) -> Vec<(String, LoginSession)> {
        let mut v: Vec<_> = self
            .logins()
            .iter()
            .map(|(h, s)| (h.clone(), s.clone()))
            .collect();
        v.sort_by(|a, b| (a.1.created_ms, &a.0).cmp(&(b.1.created_ms, &b.0)));
        v
    }

    /// Whether a login with this token hash is live (not revoked).
    pub fn is_login(&self, hash: &str) -> bool {
        self.logins().contains_key(hash)
    }

    /// Revokes the login whose token is `token`; its hash when there was one.
    pub fn revoke_token(&self, token: &str) -> Option<String> {
        let hash = token_hash(token);
        self.logins().remove(&hash).map(|_| hash)
    }

    /// Revokes the login with public id `id` ([`login_id`]); its hash when there was one.
    pub fn revoke_id(&self, id: &str) -> Option<String> {
        let mut map = self.logins();
        let hash = map.keys().find(|h| login_id(h) == id)?.clone();
        map.remove(&hash);
        Some(hash)
    }

    /// Revokes every login; their hashes.
    pub fn revoke_all(&self) -> Vec<String> {
        self.logins().drain().map(|(h, _)| h).collect()
    }

    /// Whether `user` at `ip` may try a password now: under `per_key` failures from that
    /// pair and `global` failures in all within the last minute.
    pub fn admit(
        &self,
        ip: IpAddr,
        user: &str,
        now: Instant,
        per_key: u32,
        global: u32,
    ) -> Admission {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = |t: &Instant| now.duration_since(*t) < FAILURE_WINDOW;
        while f.all.front().is_some_and(|t| !fresh(t)) {
            f.all.pop_front();
        }
        let retry = |oldest: Instant| Admission::Throttled {
            retry_after_secs: FAILURE_WINDOW
                .saturating_sub(now.duration_since(oldest))
                .as_secs()
                .max(1),
        };
        if f.all.len() >= global.max(1) as usize {
            let oldest = *f.all.front().expect("non-empty");
            return retry(oldest);
        }
        let Some(q) = f.per_key.get_mut(&(ip, user.to_owned())) else {
            return Admission::Allowed;
        };
        while q.front().is_some_and(|t| !fresh(t)) {
            q.pop_front();
        }
        if q.len() < per_key as usize {
            return Admission::Allowed;
        }
        retry(*q.front().expect("non-empty"))
    }

    /// Records a failed password attempt of `user` from `ip`.
    pub fn record_failure(&self, ip: IpAddr, user: &str, now: Instant) {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        // Bound the table: keys whose failures are all older than the window go.
        if f.per_key.len() > 10_000 {
            f.per_key.retain(|_, q| {
                q.back()
                    .is_some_and(|t| now.duration_since(*t) < FAILURE_WINDOW)
            });
        }
        // A user name is the attacker's choice: key on a bounded prefix of it.
        let user: String = user.chars().take(64).collect();
        f.per_key.entry((ip, user)).or_default().push_back(now);
        f.all.push_back(now);
        // The ceiling only needs to know whether it is reached: keep no more than that.
        while f.all.len() > 100_000 {
            f.all.pop_front();
        }
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

/// The `Set-Cookie` value for a login session; `secure` when the request arrived over HTTPS
/// (then the browser never sends it over plain HTTP).
pub(crate) fn session_cookie(token: &str, max_age_secs: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{COOKIE_NAME}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}"
    )
}

/// The `Set-Cookie` value that deletes the login cookie.
pub(crate) fn clear_cookie(secure: bool) -> String {
    session_cookie("", 0, secure)
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
            assert_eq!(a.admit(ip, "admin", t0, 5, 60), Admission::Allowed);
            a.record_failure(ip, "admin", t0);
        }
        assert!(matches!(
            a.admit(ip, "admin", t0, 5, 60),
            Admission::Throttled {
                retry_after_secs: 60
            }
        ));
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(a.admit(other, "admin", t0, 5, 60), Admission::Allowed);
        assert_eq!(
            a.admit(ip, "admin", t0 + FAILURE_WINDOW, 5, 60),
            Admission::Allowed
        );
    }

    #[test]
    fn one_users_failures_never_throttle_another_user_at_the_same_address() {
        let a = AuthState::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..5 {
            a.record_failure(ip, "mallory", t0);
        }
        assert!(matches!(
            a.admit(ip, "mallory", t0, 5, 60),
            Admission::Throttled { .. }
        ));
        assert_eq!(a.admit(ip, "admin", t0, 5, 60), Admission::Allowed);
    }

    #[test]
    fn the_global_ceiling_throttles_every_key() {
        let a = AuthState::default();
        let t0 = Instant::now();
        for i in 0..10u8 {
            a.record_failure(IpAddr::from([10, 0, 0, i]), "x", t0);
        }
        assert!(matches!(
            a.admit("10.9.9.9".parse().unwrap(), "admin", t0, 5, 10),
            Admission::Throttled { .. }
        ));
        assert_eq!(
            a.admit(
                "10.9.9.9".parse().unwrap(),
                "admin",
                t0 + FAILURE_WINDOW,
                5,
                10
            ),
            Admission::Allowed
        );
    }

    fn login(expires_ms: u64) -> LoginSession {
        LoginSession {
            created_ms: 0,
            last_used_ms: 0,
            expires_ms,
            address: "10.0.0.1".into(),
            user_agent: "test".into(),
        }
    }

    #[test]
    fn login_tokens_slide_and_expire() {
        let day = 86_400_000;
        let a = AuthState::with_sessions([(token_hash("t"), login(30 * day))]);
        let used = a.check_login_token("t", 0, 30 * day).unwrap();
        assert!(!used.refresh_cookie && used.persist.is_none());
        let slid = a.check_login_token("t", 2 * day, 30 * day).unwrap();
        assert!(slid.refresh_cookie);
        assert_eq!(slid.persist.map(|s| s.expires_ms), Some(32 * day));
        assert_eq!(a.check_login_token("u", 0, 30 * day), None);
        assert_eq!(a.check_login_token("t", 33 * day, 30 * day), None);
        assert_eq!(
            a.check_login_token("t", 0, 30 * day),
            None,
            "expired sessions are removed"
        );
    }

    #[test]
    fn logins_are_revoked_by_token_id_or_all() {
        let day = 86_400_000;
        let a = AuthState::with_sessions([
            (token_hash("a"), login(day)),
            (token_hash("b"), login(day)),
            (token_hash("c"), login(day)),
        ]);
        assert_eq!(a.revoke_token("a"), Some(token_hash("a")));
        assert_eq!(a.check_login_token("a", 0, day), None);
        let hb = token_hash("b");
        assert_eq!(a.revoke_id(login_id(&hb)), Some(hb.clone()));
        assert_eq!(a.revoke_id(login_id(&hb)), None);
        assert_eq!(a.revoke_all(), vec![token_hash("c")]);
        assert!(a.login_sessions().is_empty());
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
