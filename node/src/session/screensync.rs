//! Screen sync for one stream client (`WS /sessions/{id}/stream?mode=screen`): the session's
//! emulated screen as frames instead of PTY bytes.
//!
//! - [`Pacer`] (sans-IO, time passed in) decides when the next frame may go: at once after a
//!   quiet spell, then at most one frame per interval, the interval adapting between 16 and
//!   50 ms (it grows while output keeps coming faster than frames go, and falls back once
//!   frames go out as soon as something changed); never more than [`MAX_IN_FLIGHT`]
//!   unacknowledged frames, after which changes coalesce until an ack arrives.
//! - [`Framer`] turns successive snapshots into numbered frames: the whole screen first (and
//!   after a size change), then diffs of changed rows (`tuic_proto::screen::diff`).
//! - [`run`] drives both for one client over any sink of text frames; `routes::sessions` only
//!   adapts the WebSocket to it.
//!
//! The client may view history (`scroll`): the snapshot is then taken that many rows back,
//! without moving the grid's own scroll position (other clients and `terminal/lines` are not
//! affected), and the view stays on the same rows while new output arrives.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Sink, SinkExt};
use tuic_proto::events::Event;
use tuic_proto::screen::{self as wire, ServerFrame, Snapshot};

use super::Session;
use super::env::SessionEnv;

/// Shortest interval between two frames.
pub const MIN_INTERVAL: Duration = Duration::from_millis(16);

/// Longest interval between two frames while the screen keeps changing.
pub const MAX_INTERVAL: Duration = Duration::from_millis(50);

/// Frames sent and not yet acknowledged, at most; then changes coalesce into the next frame.
pub const MAX_IN_FLIGHT: u64 = 4;

/// A frame held back at least this long counts as paced (output outruns the frame rate).
const HELD: Duration = Duration::from_millis(2);

/// When frames may go (sans-IO).
#[derive(Debug, Clone)]
pub struct Pacer {
    interval: Duration,
    last_sent: Option<Instant>,
    sent: u64,
    acked: u64,
}

impl Default for Pacer {
    fn default() -> Self {
        Self {
            interval: MIN_INTERVAL,
            last_sent: None,
            sent: 0,
            acked: 0,
        }
    }
}

impl Pacer {
    /// The current interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Frames sent and not acknowledged.
    pub fn in_flight(&self) -> u64 {
        self.sent - self.acked
    }

    /// The earliest instant the next frame may go; `None` while the in-flight window is full
    /// (wait for an ack).
    pub fn ready_at(&self, now: Instant) -> Option<Instant> {
        if self.in_flight() >= MAX_IN_FLIGHT {
            return None;
        }
        Some(self.last_sent.map_or(now, |t| t + self.interval))
    }

    /// A frame numbered `seq` went at `now`; the change it carries was first seen at
    /// `changed_at`.
    pub fn on_sent(&mut self, seq: u64, now: Instant, changed_at: Instant) {
        if now.saturating_duration_since(changed_at) >= HELD {
            // Output outran the frame rate (or the window was full): fewer, fuller frames.
            self.interval = (self.interval * 3 / 2).min(MAX_INTERVAL);
        } else {
            self.interval = (self.interval * 3 / 4).max(MIN_INTERVAL);
        }
        self.last_sent = Some(now);
        self.sent = self.sent.max(seq);
    }

    /// The client applied every frame through `seq`.
    pub fn on_ack(&mut self, seq: u64) {
        self.acked = self.acked.max(seq.min(self.sent));
    }
}

/// Successive snapshots as numbered frames.
#[derive(Debug, Default)]
pub struct Framer {
    prev: Option<Snapshot>,
    seq: u64,
}

impl Framer {
    /// The frame that brings a client from the previous snapshot to `next`; `None` when
    /// nothing changed.
    pub fn frame(&mut self, next: Snapshot) -> Option<ServerFrame> {
        let seq = self.seq + 1;
        let f = match self.prev.as_ref() {
            Some(p) => match wire::diff(p, &next, seq) {
                Some(d) if d.is_empty(p) => return None,
                Some(d) => ServerFrame::Diff(d),
                None => ServerFrame::Screen {
                    seq,
                    screen: next.clone(),
                },
            },
            None => ServerFrame::Screen {
                seq,
                screen: next.clone(),
            },
        };
        self.seq = seq;
        self.prev = Some(next);
        Some(f)
    }

    /// The last frame number.
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

/// What the stream's reader hands the screen loop (input goes to the PTY directly).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Frames through `seq` were applied.
    Ack(u64),
    /// The client's viewport; `apply` resizes the PTY.
    Resize { rows: u16, cols: u16, apply: bool },
    /// View `offset` rows back in the history.
    Scroll(u32),
}

/// The client's history view: rows back from the bottom, kept on the same rows while new
/// output pushes history up.
#[derive(Debug, Default)]
struct View {
    offset: usize,
    history: Option<usize>,
}

/// Takes a snapshot off the async workers (reading the screen applies held-back output), and
/// the deadline of a synchronized update (DEC 2026) still pending in it.
async fn snapshot(s: &Arc<Session>, view: &mut View) -> Option<(Snapshot, Option<Instant>)> {
    let s = s.clone();
    let mut v = std::mem::take(view);
    let (snap, v) = tokio::task::spawn_blocking(move || {
        let mut scr = s.screen();
        // A synchronized update past its deadline ends here as it would on a terminal: a
        // program that stalls mid-frame cannot freeze the view.
        scr.expire_sync(Instant::now());
        let sync = scr.grid.sync_deadline();
        let info = scr.grid.scroll_info();
        let history = info.total_lines - info.screen_lines;
        if v.offset > 0
            && let Some(h) = v.history
        {
            v.offset += history.saturating_sub(h);
        }
        v.history = Some(history);
        let snap = scr.grid.snapshot(v.offset);
        v.offset = snap.scroll as usize;
        ((snap, sync), v)
    })
    .await
    .ok()?;
    *view = v;
    Some(snap)
}

/// The size policy's "Fit" claims on one session (`docs/http-api.md`): the PTY's size before the
/// first viewer fitted it, and how many viewers hold a claim. When the last of them leaves the
/// size before is put back, so a session a phone fitted never stays phone-width for the
/// desktop. An explicit resize by anyone else (`Session::resize`) forgets the size before.
#[derive(Debug, Default)]
pub(crate) struct Fits {
    pub(super) base: Option<(u16, u16)>,
    holders: usize,
}

/// One viewer's Fit claim, released when that viewer's loop ends (every return drops it).
struct FitClaim(Arc<Session>);

impl FitClaim {
    fn take(s: &Arc<Session>) -> Self {
        let (rows, cols) = s.screen().grid.size();
        let mut f = super::lock(&s.fits);
        if f.holders == 0 || f.base.is_none() {
            f.base = Some((rows as u16, cols as u16));
        }
        f.holders += 1;
        Self(s.clone())
    }
}

impl Drop for FitClaim {
    fn drop(&mut self) {
        let base = {
            let mut f = super::lock(&self.0.fits);
            f.holders = f.holders.saturating_sub(1);
            if f.holders > 0 {
                return;
            }
            f.base.take()
        };
        if let Some((rows, cols)) = base
            && self.0.exit().is_none()
        {
            let _ = self.0.set_size(rows, cols);
        }
    }
}

/// A question as the `parsed` event the monitor publishes when one appears.
pub(super) fn question_event(q: &super::activity::Question) -> serde_json::Value {
    let mut ev = serde_json::json!({"type": "question", "text": q.text});
    if !q.options.is_empty() {
        ev["options"] = serde_json::json!(q.options);
        ev["select"] = serde_json::json!(q.select);
    }
    ev
}

fn text(f: &ServerFrame) -> String {
    serde_json::to_string(f).unwrap_or_default()
}

/// Serves one screen client until it leaves, the session exits (last screen, then `exit`) or
/// the node shuts down (`closed`). `out` takes text frames; `control` carries the client's
/// acks, resizes and scrolls (closing it ends the loop).
pub async fn run<S>(
    env: SessionEnv,
    s: Arc<Session>,
    mut out: S,
    mut control: tokio::sync::mpsc::Receiver<Control>,
) where
    S: Sink<String> + Unpin,
{
    let mut wake = s.wake();
    let mut bus = env.bus.subscribe();
    let mut framer = Framer::default();
    let mut pacer = Pacer::default();
    let mut view = View::default();
    // The first frame goes at once.
    let mut dirty_since = Some(Instant::now());
    let mut exit_seen = false;
    // When a synchronized update is pending, look again at its deadline.
    let mut sync_due: Option<Instant> = None;
    // A question already pending when this client came is sent after its first screen: the
    // view shows its answers although it never saw the `question` event (a reload, another
    // device).
    let mut question_told = false;
    // This client's Fit, undone when it leaves (every return below drops it).
    let mut fit: Option<FitClaim> = None;
    loop {
        let exited = s.exit();
        if let Some(e) = exited {
            if !exit_seen {
                // One more snapshot, taken after the exit: it holds every byte written.
                exit_seen = true;
                dirty_since.get_or_insert_with(Instant::now);
            }
            if dirty_since.is_none() {
                let _ = out
                    .send(text(&ServerFrame::Exit { exit_code: e.code }))
                    .await;
                let _ = out.close().await;
                return;
            }
        }
        if let Some(since) = dirty_since {
            let now = Instant::now();
            let due = pacer.ready_at(now).is_some_and(|t| t <= now);
            if due || exited.is_some() {
                // Mark the wake seen before reading: output after this point wakes again.
                wake.borrow_and_update();
                let Some((snap, sync)) = snapshot(&s, &mut view).await else {
                    return;
                };
                sync_due = sync;
                if let Some(f) = framer.frame(snap) {
                    if out.send(text(&f)).await.is_err() {
                        return;
                    }
                    pacer.on_sent(framer.seq(), Instant::now(), since);
                }
                if !std::mem::replace(&mut question_told, true)
                    && let Some(q) = s.pending_question()
                {
                    let f = ServerFrame::Parsed {
                        event: question_event(&q),
                    };
                    if out.send(text(&f)).await.is_err() {
                        return;
                    }
                }
                dirty_since = None;
                continue;
            }
        }
        let deadline = dirty_since
            .and_then(|_| pacer.ready_at(Instant::now()))
            .map(tokio::time::Instant::from_std);
        tokio::select! {
            r = wake.changed() => {
                if r.is_err() {
                    return;
                }
                dirty_since.get_or_insert_with(Instant::now);
            }
            _ = async { tokio::time::sleep_until(deadline.expect("guarded")).await }, if deadline.is_some() => {}
            _ = async { tokio::time::sleep_until(tokio::time::Instant::from_std(sync_due.expect("guarded"))).await }, if sync_due.is_some() && dirty_since.is_none() => {
                sync_due = None;
                dirty_since = Some(Instant::now());
            }
            c = control.recv() => match c {
                None => return,
                Some(Control::Ack(seq)) => pacer.on_ack(seq),
                Some(Control::Scroll(offset)) => {
                    view.offset = offset as usize;
                    dirty_since.get_or_insert_with(Instant::now);
                }
                Some(Control::Resize { rows, cols, apply }) => {
                    // The PTY keeps its size unless the client asks to apply its own. A size
                    // over the caps or the node's budget is refused with a frame that says
                    // why (the stream goes on at the old size) and takes no Fit claim; an
                    // exited session's resize fails quietly, its exit frame follows.
                    if apply {
                        let claim_before = fit.is_none();
                        if claim_before {
                            fit = Some(FitClaim::take(&s));
                        }
                        match s.set_size(rows, cols) {
                            Ok(()) => {
                                dirty_since.get_or_insert_with(Instant::now);
                            }
                            Err(super::SessionError::Size(e)) => {
                                if claim_before {
                                    // Nothing changed: the claim would only restore this size.
                                    fit = None;
                                }
                                let f = ServerFrame::Refused { code: e.code().into(), message: e.to_string() };
                                if out.send(text(&f)).await.is_err() {
                                    return;
                                }
                            }
                            Err(_) => {}
                        }
                    }
                }
            },
            ev = bus.recv() => {
                if let Ok(env) = ev
                    && let Event::PtyParsed { session_id, parsed } = &env.event
                    && *session_id == s.id
                {
                    let f = ServerFrame::Parsed { event: serde_json::to_value(parsed).unwrap_or_default() };
                    if out.send(text(&f)).await.is_err() {
                        return;
                    }
                }
            }
            _ = env.shutdown.cancelled() => {
                let _ = out.send(text(&ServerFrame::Closed)).await;
                let _ = out.close().await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::grid::Grid;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn first_change_goes_at_once_then_one_frame_per_interval() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        assert_eq!(p.ready_at(t0), Some(t0));
        p.on_sent(1, t0, t0);
        p.on_ack(1);
        assert_eq!(p.ready_at(t0), Some(t0 + MIN_INTERVAL));
        // Output keeps coming: every frame is held to the interval, which grows to the cap.
        let mut now = t0;
        for seq in 2..40 {
            let changed = now + MS;
            now = p.ready_at(changed).unwrap().max(changed);
            p.on_sent(seq, now, changed);
            p.on_ack(seq);
            assert!(p.interval() <= MAX_INTERVAL);
        }
        assert_eq!(p.interval(), MAX_INTERVAL);
        // Quiet again: changes go as soon as they are seen, and the interval falls back.
        for seq in 40..50 {
            now += Duration::from_secs(1);
            assert!(p.ready_at(now).unwrap() <= now);
            p.on_sent(seq, now, now);
            p.on_ack(seq);
        }
        assert_eq!(p.interval(), MIN_INTERVAL);
    }

    #[test]
    fn a_slow_client_gets_at_most_the_window_then_waits_for_acks() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        let mut now = t0;
        for seq in 1..=MAX_IN_FLIGHT {
            now = p.ready_at(now).unwrap().max(now);
            p.on_sent(seq, now, now);
        }
        assert_eq!(p.ready_at(now + Duration::from_secs(10)), None);
        p.on_ack(2);
        assert!(p.ready_at(now).is_some());
        // An ack for a frame never sent does not open the window further.
        p.on_ack(1000);
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn framer_sends_the_screen_then_diffs_and_nothing_when_unchanged() {
        let mut g = Grid::new(4, 20);
        let mut f = Framer::default();
        let mut m = wire::Mirror::default();
        let first = f.frame(g.snapshot(0)).unwrap();
        assert!(matches!(first, ServerFrame::Screen { seq: 1, .. }));
        m.apply(&first).unwrap();
        assert!(f.frame(g.snapshot(0)).is_none());
        g.feed(b"\x1b[?1049h\x1b[2;2Hdrawn\x1b[4;1Hstatus");
        let d = f.frame(g.snapshot(0)).unwrap();
        let ServerFrame::Diff(ref diff) = d else {
            panic!("{d:?}")
        };
        assert_eq!(diff.rows.len(), 2);
        m.apply(&d).unwrap();
        assert_eq!(m.screen.as_ref().unwrap().text_rows(), g.screen());
        g.resize(6, 30);
        let r = f.frame(g.snapshot(0)).unwrap();
        assert!(matches!(r, ServerFrame::Screen { seq: 3, .. }));
        m.apply(&r).unwrap();
        assert_eq!(m.screen.unwrap().rows, 6);
    }

    #[test]
    fn a_burst_between_frames_costs_one_diff_of_the_last_screen() {
        let mut g = Grid::new(24, 80);
        let mut f = Framer::default();
        let mut m = wire::Mirror::default();
        m.apply(&f.frame(g.snapshot(0)).unwrap()).unwrap();
        let mut raw = 0;
        for i in 0..20_000 {
            let line = format!("line {i} {}\r\n", "x".repeat(60));
            raw += line.len();
            g.feed(line.as_bytes());
        }
        let d = f.frame(g.snapshot(0)).unwrap();
        let sent = serde_json::to_string(&d).unwrap().len();
        m.apply(&d).unwrap();
        assert_eq!(m.screen.unwrap().text_rows(), g.screen());
        assert!(sent * 100 < raw, "sent {sent} of {raw}");
    }
}
