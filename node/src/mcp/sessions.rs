//! The MCP protocol-session table: one entry per `Mcp-Session-Id`, the TUIC identities bound to
//! them, the `GET /mcp` stream senders with their generations, and the TTL reaper's sweep.
//!
//! Everything sits under one mutex, so "check my stream generation, then remove my sender"
//! and "subscribe a replacement stream" can never interleave: the spec's lock-order hazard
//! (mcp_sessions → messaging_channels) cannot arise when both live in one critical section.
//! It deliberately knows nothing about PTYs or mailboxes: whether an identity still owns a
//! live terminal is asked through [`IdentityLiveness`], which mail's rule answers
//! (`mail::peer_identity_is_addressable`, installed by the composition root).

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;

mod identity;
use identity::{bind_locked, drop_route, holder_locked};

/// Per-stream buffer of server notifications; a stream that falls this far behind drops them.
pub(crate) const STREAM_BUFFER: usize = 64;

/// How many DELETE-retired ids are remembered (answering 404) before the oldest is forgotten.
pub(crate) const RETIRED_CAPACITY: usize = 4096;

/// Generations come from one process-wide counter, never per session: a DELETE can retire an
/// id whose stream is still draining, and a per-session counter would reissue a number the
/// half-open stream still holds once the id is recreated.
static STREAM_GENERATION: AtomicU64 = AtomicU64::new(1);

/// A protocol session id as the table keys it, in 16 bytes: an id this process minted (a
/// canonical lower-case hyphenated UUID) as its bytes, any other header value as the first 16
/// bytes of a domain-separated SHA-256 of its text (the text itself is kept beside the table,
/// in [`Inner::texts`], for the rare ids that need it). Minted ids are the storm case, so an
/// idle entry carries no heap string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Sid([u8; 16]);

impl Sid {
    /// The key of `id`, and whether it is a minted UUID (its text is its bytes).
    fn parse(id: &str) -> (Self, bool) {
        // 36 characters is the hyphenated form only; lower case makes it round-trip exactly.
        if id.len() == 36
            && !id.bytes().any(|b| b.is_ascii_uppercase())
            && let Ok(u) = uuid::Uuid::try_parse(id)
        {
            return (Self(*u.as_bytes()), true);
        }
        use sha2::Digest;
        let d = sha2::Sha256::new()
            .chain_update(b"tuic mcp session id\0")
            .chain_update(id.as_bytes())
            .finalize();
        let mut k = [0u8; 16];
        k.copy_from_slice(&d[..16]);
        (Self(k), false)
    }

    fn of(id: &str) -> Self {
        Self::parse(id).0
    }

    fn mint() -> (Self, String) {
        let u = uuid::Uuid::new_v4();
        (Self(*u.as_bytes()), u.to_string())
    }
}

/// Bits of [`McpSession::word`]: the last request's time, in µs since the table's epoch (48
/// bits: 8.9 years), then the revision index and the two client flags.
const US_BITS: u32 = 48;
const US_MASK: u64 = (1 << US_BITS) - 1;
const VERSION_SHIFT: u32 = 48;
const META_TOOLS_BIT: u64 = 1 << 56;
const CLAUDE_CODE_BIT: u64 = 1 << 57;

/// One protocol session: 16 bytes while idle (plus its 16-byte key), so a storm of 10,000
/// initializes stays well under 2 MB. One word packs the last activity (µs since the table's
/// epoch), the revision (an index into the table's few interned revisions) and the two flags
/// read of the client name; what only some sessions have — a bound TUIC identity, a `GET /mcp`
/// stream — lives in one box that exists only while one of them does.
#[derive(Debug)]
struct McpSession {
    word: u64,
    cold: Option<Box<Cold>>,
}

/// The fields an idle, unbound session does not have.
#[derive(Debug, Default)]
struct Cold {
    /// The TUIC identity (`x-tuic-session`) bound to this session, if any.
    tuic_session: Option<Box<str>>,
    /// The current `GET /mcp` stream: its generation and sender.
    stream: Option<(u64, mpsc::Sender<Value>)>,
}

impl McpSession {
    fn new(last_us: u64, version: u8) -> Self {
        let mut s = Self {
            word: 0,
            cold: None,
        };
        s.set_last_us(last_us);
        s.set_version(version);
        s
    }

    /// Last request on this id (µs since the table's epoch); the reaper compares it with the TTL.
    fn last_us(&self) -> u64 {
        self.word & US_MASK
    }

    fn set_last_us(&mut self, us: u64) {
        self.word = (self.word & !US_MASK) | us.min(US_MASK);
    }

    /// The negotiated revision, as an index into [`Inner::versions`].
    fn version(&self) -> u8 {
        (self.word >> VERSION_SHIFT) as u8
    }

    fn set_version(&mut self, v: u8) {
        self.word = (self.word & !(0xff << VERSION_SHIFT)) | (u64::from(v) << VERSION_SHIFT);
    }

    fn flag(&self, bit: u64) -> bool {
        self.word & bit != 0
    }

    fn set_flag(&mut self, bit: u64, on: bool) {
        if on {
            self.word |= bit;
        } else {
            self.word &= !bit;
        }
    }

    /// The client named itself at initialize as one that needs the collapsed catalogue
    /// (`client_requires_meta_tools`); only the flag is kept, not the name.
    fn meta_tools(&self) -> bool {
        self.flag(META_TOOLS_BIT)
    }

    /// The client named itself Claude Code at initialize (it gets `cc_agent_hint`).
    fn claude_code(&self) -> bool {
        self.flag(CLAUDE_CODE_BIT)
    }

    /// Records what initialize says about the client.
    fn set_client(&mut self, client_name: Option<&str>) {
        self.set_flag(
            META_TOOLS_BIT,
            crate::mcp::registry::client_requires_meta_tools(client_name),
        );
        self.set_flag(
            CLAUDE_CODE_BIT,
            crate::mcp::registry::is_claude_code(client_name),
        );
    }

    fn tuic_session(&self) -> Option<&str> {
        self.cold.as_ref()?.tuic_session.as_deref()
    }

    fn stream(&self) -> Option<&(u64, mpsc::Sender<Value>)> {
        self.cold.as_ref()?.stream.as_ref()
    }

    fn has_stream(&self) -> bool {
        self.stream().is_some()
    }

    fn cold_mut(&mut self) -> &mut Cold {
        self.cold.get_or_insert_with(Box::default)
    }

    /// Drops the box once neither cold field is set.
    fn tidy(&mut self) {
        if self
            .cold
            .as_ref()
            .is_some_and(|c| c.tuic_session.is_none() && c.stream.is_none())
        {
            self.cold = None;
        }
    }

    /// Binds (or with `None` unbinds) an identity; returns the previous one.
    fn set_tuic_session(&mut self, t: Option<Box<str>>) -> Option<Box<str>> {
        let prev = match t {
            Some(t) => self.cold_mut().tuic_session.replace(t),
            None => self.cold.as_mut().and_then(|c| c.tuic_session.take()),
        };
        self.tidy();
        prev
    }

    fn set_stream(&mut self, st: Option<(u64, mpsc::Sender<Value>)>) {
        match st {
            Some(st) => self.cold_mut().stream = Some(st),
            None => {
                if let Some(c) = self.cold.as_mut() {
                    c.stream = None;
                }
            }
        }
        self.tidy();
    }
}

/// What a request reads of one protocol session ([`SessionTable::with`]).
#[derive(Debug, Clone, Copy)]
pub struct SessionView<'a> {
    /// The negotiated revision.
    pub protocol_version: &'static str,
    /// The client needs the collapsed catalogue.
    pub meta_tools: bool,
    /// The client is Claude Code.
    pub claude_code: bool,
    /// The bound TUIC identity.
    pub tuic_session: Option<&'a str>,
    /// Whether a `GET /mcp` stream is subscribed.
    pub has_stream: bool,
}

/// The co-owners of one TUIC identity: the delivery owner first, then joined siblings.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Owners {
    /// Protocol session ids; index 0 owns delivery.
    pub sessions: Vec<String>,
}

/// What one reaper sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Sweep {
    /// Protocol sessions removed.
    pub reaped: Vec<String>,
    /// Identities kept although their last session went (still addressable).
    pub kept: Vec<String>,
    /// Identities whose last route went: nobody can reach them any more.
    pub retired: Vec<String>,
}

/// How an `initialize` arrived, logged as `event` with `source="mcp_initialize"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// No session header: a new client.
    Fresh,
    /// A header naming a session this process no longer has (restart, reap, DELETE).
    Reconnected,
    /// A header naming a live session (a bridge re-sending its client's initialize).
    Reused,
}

impl Arrival {
    /// The log value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Reconnected => "reconnected",
            Self::Reused => "reused",
        }
    }
}

/// The outcome of binding an identity to a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// The identity had no live owner; this session owns it now.
    Owner,
    /// The identity already had a live owner; this session joined as a sibling.
    Sibling,
    /// This session already held the identity.
    Unchanged,
    /// The stale owner was replaced (no stream, idle past the grace period).
    Reclaimed {
        /// The retired session id.
        previous: String,
    },
}

/// Who holds a route to an identity besides the asking session ([`SessionTable::holder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// No other protocol session: the identity may be claimed.
    Nobody,
    /// Another session that holds a stream or was used within the grace period.
    Live(String),
    /// Only sessions idle past the grace period without a stream; only a caller proving the
    /// identity by `x-tuic-session` may reclaim it.
    Stale(String),
}

/// Answers whether an identity is still addressable although its protocol sessions are gone
/// (it owns a live PTY, or a live session records it as parent). The terminal core provides
/// the real answer; without it nothing is retained.
pub trait IdentityLiveness: Send + Sync + std::fmt::Debug {
    /// Whether `tuic_session` must survive a reap.
    fn is_addressable(&self, tuic_session: &str) -> bool;
}

/// The answer while no terminal core is wired in: no identity is addressable.
#[derive(Debug, Default)]
pub(crate) struct NoPtys;

impl IdentityLiveness for NoPtys {
    fn is_addressable(&self, _: &str) -> bool {
        false
    }
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<Sid, McpSession>,
    /// The text of every live key that is not a minted UUID (see [`Sid`]).
    texts: HashMap<Sid, Box<str>>,
    identities: HashMap<String, Owners>,
    retired: VecDeque<String>,
    /// The revisions sessions negotiated, interned: a session keeps a one-byte index.
    versions: Vec<&'static str>,
    /// Idle sessions evicted by the table cap since start.
    evicted: u64,
}

impl Inner {
    fn version_index(&mut self, v: &'static str) -> u8 {
        if let Some(i) = self.versions.iter().position(|x| *x == v) {
            return i as u8;
        }
        // The revisions are a handful of constants; the bound only guards the index width.
        if self.versions.len() >= usize::from(u8::MAX) {
            return 0;
        }
        self.versions.push(v);
        (self.versions.len() - 1) as u8
    }

    fn version(&self, i: u8) -> &'static str {
        self.versions.get(usize::from(i)).copied().unwrap_or("")
    }

    /// The id text of a live key.
    fn text_of(&self, sid: &Sid) -> String {
        match self.texts.get(sid) {
            Some(t) => t.to_string(),
            None => uuid::Uuid::from_bytes(sid.0).to_string(),
        }
    }

    /// Inserts a session under `id` (recording its text when it is not a minted UUID).
    fn insert(&mut self, id: &str, s: McpSession) -> &mut McpSession {
        let (sid, minted) = Sid::parse(id);
        if !minted {
            self.texts.entry(sid).or_insert_with(|| id.into());
        }
        self.sessions.entry(sid).or_insert(s)
    }

    /// Removes a session and its recorded text.
    fn remove(&mut self, sid: &Sid) -> Option<McpSession> {
        let s = self.sessions.remove(sid)?;
        self.texts.remove(sid);
        Some(s)
    }

    /// Removes one session for the reaper or the cap, keeping its identity when that is
    /// still addressable (see "Identity outlives its transport").
    fn remove_idle(
        &mut self,
        sid: &Sid,
        liveness: &dyn IdentityLiveness,
        sweep: &mut Sweep,
    ) -> bool {
        let id = self.text_of(sid);
        let Some(s) = self.remove(sid) else {
            return false;
        };
        if let Some(t) = s.tuic_session().map(String::from) {
            let last = self
                .identities
                .get(&t)
                .is_some_and(|o| o.sessions.len() <= 1);
            if last && liveness.is_addressable(&t) {
                if let Some(o) = self.identities.get_mut(&t) {
                    o.sessions.retain(|x| x != &id);
                }
                sweep.kept.push(t);
            } else {
                drop_route(&mut self.identities, &t, &id);
                if !self.identities.contains_key(&t) {
                    sweep.retired.push(t);
                }
            }
        }
        sweep.reaped.push(id);
        true
    }
}

/// The table.
#[derive(Debug)]
pub struct SessionTable {
    inner: Mutex<Inner>,
    /// Activity times are microseconds since this instant (8 bytes, not an `Instant`'s 16;
    /// fine enough that two requests in a row never tie when the cap picks the oldest).
    epoch: Instant,
}

impl Default for SessionTable {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            epoch: Instant::now(),
        }
    }
}

/// What a request with an `Mcp-Session-Id` header found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// A live session, now refreshed.
    Live,
    /// An id this process does not know (restart, reap, cap eviction): recreated from scratch.
    Recovered,
    /// An id ended by `DELETE /mcp`: answered with 404.
    Retired,
}

impl SessionTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn us(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_micros()).unwrap_or(u64::MAX)
    }

    /// Number of live protocol sessions.
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of bound identities.
    pub fn identity_count(&self) -> usize {
        self.lock().identities.len()
    }

    /// Idle sessions evicted by the cap since start.
    pub fn evicted(&self) -> u64 {
        self.lock().evicted
    }

    /// Handles `initialize`: reuses a live id named by the header, else mints a new one.
    pub fn initialize(
        &self,
        header: Option<&str>,
        now: Instant,
        version: &'static str,
        client_name: Option<String>,
    ) -> (String, Arrival) {
        let now = self.us(now);
        let mut g = self.lock();
        let vi = g.version_index(version);
        if let Some(id) = header
            && let Some(s) = g.sessions.get_mut(&Sid::of(id))
        {
            s.set_last_us(now);
            s.set_version(vi);
            if client_name.is_some() {
                s.set_client(client_name.as_deref());
            }
            return (id.to_owned(), Arrival::Reused);
        }
        let arrival = if header.is_some() {
            Arrival::Reconnected
        } else {
            Arrival::Fresh
        };
        let (sid, id) = Sid::mint();
        let mut s = McpSession::new(now, vi);
        s.set_client(client_name.as_deref());
        g.sessions.insert(sid, s);
        (id, arrival)
    }

    /// Refreshes the session named by a request header, recreating an unknown id.
    pub fn touch(&self, id: &str, now: Instant, default_version: &'static str) -> Lookup {
        let now = self.us(now);
        let sid = Sid::of(id);
        let mut g = self.lock();
        if let Some(s) = g.sessions.get_mut(&sid) {
            s.set_last_us(now);
            return Lookup::Live;
        }
        if g.retired.iter().any(|r| r == id) {
            return Lookup::Retired;
        }
        let vi = g.version_index(default_version);
        g.insert(id, McpSession::new(now, vi));
        Lookup::Recovered
    }

    /// Reads one session's fields.
    pub fn with<R>(&self, id: &str, f: impl FnOnce(&SessionView<'_>) -> R) -> Option<R> {
        let g = self.lock();
        let s = g.sessions.get(&Sid::of(id))?;
        Some(f(&SessionView {
            protocol_version: g.version(s.version()),
            meta_tools: s.meta_tools(),
            claude_code: s.claude_code(),
            tuic_session: s.tuic_session(),
            has_stream: s.has_stream(),
        }))
    }

    /// Binds `tuic` to session `id` by the live-owner policy: a missing or stale owner is
    /// replaced, a subscribed or recently active owner is joined, never replaced. Only for a
    /// caller that proves the identity (its terminal's `x-tuic-session`, or a route it already
    /// holds); a claim by announcement goes through [`SessionTable::claim_identity`].
    pub fn bind_identity(&self, id: &str, tuic: &str, now: Instant, grace: Duration) -> Binding {
        let now = self.us(now);
        let grace = u64::try_from(grace.as_micros()).unwrap_or(u64::MAX);
        bind_locked(&mut self.lock(), id, tuic, now, grace)
    }

    /// Binds `tuic` to session `id` only when no other protocol session holds a route to it:
    /// an identity announced in `agent action=register` without the header proof. Check and
    /// bind are one step under the table's lock, so two claimants cannot both pass.
    pub fn claim_identity(
        &self,
        id: &str,
        tuic: &str,
        now: Instant,
        grace: Duration,
    ) -> Result<Binding, Holder> {
        let now = self.us(now);
        let grace = u64::try_from(grace.as_micros()).unwrap_or(u64::MAX);
        let mut g = self.lock();
        match holder_locked(&g, id, tuic, now, grace) {
            Holder::Nobody => Ok(bind_locked(&mut g, id, tuic, now, grace)),
            h => Err(h),
        }
    }

    /// Which other protocol session (not `id`) holds a route to `tuic`: a live one first.
    pub fn holder(&self, id: &str, tuic: &str, now: Instant, grace: Duration) -> Holder {
        let now = self.us(now);
        let grace = u64::try_from(grace.as_micros()).unwrap_or(u64::MAX);
        holder_locked(&self.lock(), id, tuic, now, grace)
    }

    /// The co-owners of an identity.
    pub fn owners(&self, tuic: &str) -> Option<Owners> {
        self.lock().identities.get(tuic).cloned()
    }

    /// Ends a session (`DELETE /mcp`): its routes go, a surviving co-owner is promoted, and the
    /// id answers 404 from now on. Returns false when the id was not live.
    pub fn delete(&self, id: &str) -> bool {
        self.end(id).is_some()
    }

    /// [`SessionTable::delete`], reporting the identity whose last route went with the
    /// session (`Some(None)`: ended, no identity retired; `None`: the id was not live).
    pub fn end(&self, id: &str) -> Option<Option<String>> {
        let mut g = self.lock();
        let s = g.remove(&Sid::of(id))?;
        let mut retired = None;
        if let Some(t) = s.tuic_session() {
            drop_route(&mut g.identities, t, id);
            if !g.identities.contains_key(t) {
                retired = Some(t.to_string());
            }
        }
        if g.retired.len() == RETIRED_CAPACITY {
            g.retired.pop_front();
        }
        g.retired.push_back(id.to_owned());
        Some(retired)
    }

    /// Whether `id` was retired by DELETE.
    pub fn is_retired(&self, id: &str) -> bool {
        self.lock().retired.iter().any(|r| r == id)
    }

    /// Subscribes a `GET /mcp` stream, replacing any previous sender. Returns the stream's
    /// generation and receiver; the session is recreated when it is unknown (auto-recovery).
    pub fn subscribe(
        &self,
        id: &str,
        now: Instant,
        default_version: &'static str,
    ) -> (u64, mpsc::Receiver<Value>) {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let generation = STREAM_GENERATION.fetch_add(1, Ordering::Relaxed);
        let now = self.us(now);
        let mut g = self.lock();
        g.retired.retain(|r| r != id);
        let vi = g.version_index(default_version);
        let s = g.insert(id, McpSession::new(now, vi));
        s.set_last_us(now);
        s.set_stream(Some((generation, tx)));
        (generation, rx)
    }

    /// A stream's teardown: releases the sender only while it still holds `generation`, so a
    /// superseded stream never removes its replacement's sender. Returns whether it released.
    pub fn release_stream(&self, id: &str, generation: u64) -> bool {
        let mut g = self.lock();
        match g.sessions.get_mut(&Sid::of(id)) {
            Some(s) if s.stream().is_some_and(|b| b.0 == generation) => {
                s.set_stream(None);
                true
            }
            // Absent (DELETE or reap retired it): the sender died with the entry.
            _ => false,
        }
    }

    /// The generation of a session's current stream.
    pub fn stream_generation(&self, id: &str) -> Option<u64> {
        self.lock()
            .sessions
            .get(&Sid::of(id))
            .and_then(|s| s.stream().map(|b| b.0))
    }

    /// Sends a notification to every subscribed stream; a full stream misses it.
    pub fn broadcast(&self, message: &Value) -> usize {
        let g = self.lock();
        g.sessions
            .values()
            .filter_map(McpSession::stream)
            .filter(|b| b.1.try_send(message.clone()).is_ok())
            .count()
    }

    /// The reaper's sweep: removes sessions idle longer than `ttl` (rechecking each under the
    /// lock, so a session refreshed since the snapshot stays) and drops their routes. Reports
    /// the reaped ids, the identities kept because they are still addressable, and the
    /// identities whose last route went with them (their peers are retired by the caller).
    /// A table that shrank to a quarter of its capacity gives the memory back.
    pub fn reap(&self, now: Instant, ttl: Duration, liveness: &dyn IdentityLiveness) -> Sweep {
        let now = self.us(now);
        let ttl = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
        let mut g = self.lock();
        let stale: Vec<Sid> = g
            .sessions
            .iter()
            .filter(|(_, s)| now.saturating_sub(s.last_us()) >= ttl)
            .map(|(k, _)| *k)
            .collect();
        let mut sweep = Sweep::default();
        for sid in &stale {
            g.remove_idle(sid, liveness, &mut sweep);
        }
        let len = g.sessions.len();
        if g.sessions.capacity() > 1024 && g.sessions.capacity() / 4 > len {
            g.sessions.shrink_to(len * 2);
            let texts = g.texts.len();
            g.texts.shrink_to(texts * 2);
        }
        sweep
    }

    /// The table cap: when more than `cap` sessions are live, the oldest idle ones (no
    /// `GET /mcp` stream) go until `cap` remain, minus a slack of `cap / 64` so a storm pays
    /// one scan per slack's worth of inserts, not one per insert. Sessions with a stream are
    /// never evicted, so a table of only streaming sessions may exceed the cap (each holds a
    /// connection). An evicted id is forgotten, not retired: a later request with it
    /// auto-recovers, as after the TTL reap. Returns what went, like [`SessionTable::reap`].
    pub fn evict_over_cap(&self, cap: usize, liveness: &dyn IdentityLiveness) -> Sweep {
        let mut sweep = Sweep::default();
        let mut g = self.lock();
        let len = g.sessions.len();
        if len <= cap {
            return sweep;
        }
        let want = len - cap + cap / 64;
        // The `want` oldest idle sessions: a bounded max-heap on (last activity, id), so the
        // scan allocates `want` entries, not one per session.
        let mut oldest: BinaryHeap<(u64, Sid)> = BinaryHeap::with_capacity(want + 1);
        for (k, s) in g.sessions.iter().filter(|(_, s)| !s.has_stream()) {
            if oldest.len() < want {
                oldest.push((s.last_us(), *k));
            } else if oldest.peek().is_some_and(|(t, _)| s.last_us() < *t) {
                oldest.pop();
                oldest.push((s.last_us(), *k));
            }
        }
        for (_, sid) in oldest.into_sorted_vec() {
            if g.remove_idle(&sid, liveness, &mut sweep) {
                g.evicted += 1;
            }
        }
        sweep
    }

    /// Sends `message` to one protocol session's `GET /mcp` stream; false when it has none
    /// or the stream is full (a relayed progress notification is then skipped, not queued).
    pub fn push_to_session(&self, id: &str, message: &Value) -> bool {
        let g = self.lock();
        g.sessions
            .get(&Sid::of(id))
            .and_then(McpSession::stream)
            .is_some_and(|b| b.1.try_send(message.clone()).is_ok())
    }

    /// The delivery owner's stream of an identity: the first co-owner holding a `GET /mcp`
    /// stream. Sends `message` there; false when no co-owner has a stream or it is full.
    pub fn push_to_identity(&self, tuic: &str, message: &Value) -> bool {
        let g = self.lock();
        let Some(owners) = g.identities.get(tuic) else {
            return false;
        };
        owners
            .sessions
            .iter()
            .filter_map(|id| g.sessions.get(&Sid::of(id)))
            .find_map(McpSession::stream)
            .is_some_and(|b| b.1.try_send(message.clone()).is_ok())
    }

    /// Whether any co-owner of `tuic` holds a `GET /mcp` stream.
    pub fn identity_has_stream(&self, tuic: &str) -> bool {
        let g = self.lock();
        g.identities.get(tuic).is_some_and(|o| {
            o.sessions.iter().any(|id| {
                g.sessions
                    .get(&Sid::of(id))
                    .is_some_and(McpSession::has_stream)
            })
        })
    }

    /// The table's counts, for the status route.
    pub fn stats(&self) -> Value {
        let g = self.lock();
        serde_json::json!({
            "sessions": g.sessions.len(),
            "streams": g.sessions.values().filter(|s| s.has_stream()).count(),
            "identities": g.identities.len(),
            "retired": g.retired.len(),
            "evicted": g.evicted,
        })
    }
}

#[cfg(test)]
mod tests;
