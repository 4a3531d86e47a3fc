//! A connection's journal: every frame the phone needs, numbered, bounded by bytes and age,
//! and written through to the store so it survives a node restart.
//!
//! The in-memory ring answers streams and snapshots; the store is only written (by one
//! background thread that commits whatever queued up since its last commit, so a flood of
//! chunks costs one transaction per batch, not one per chunk) and read once at start.
//! It deliberately does not coalesce what it keeps: every frame keeps its own sequence; the
//! stream coalesces text chunks when it sends a batch ([`coalesce`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use redb::{ReadableTable, TableDefinition};
use serde_json::Value;
use tuic_proto::acp::{Frame, FrameBody};

use crate::store::Store;

/// Connections: id → JSON [`super::Record`].
const CONNECTIONS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("acp_connections");

/// Frames: (connection id, sequence) → JSON [`Frame`].
const FRAMES: TableDefinition<'_, (&str, u64), &[u8]> = TableDefinition::new("acp_frames");

/// Most operations one commit takes: a flood commits in batches of this many frames.
const BATCH: usize = 8192;

/// One frame as kept: the frame and its JSON, serialized once for every reader.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    pub(crate) frame: Frame,
    pub(crate) json: Arc<str>,
}

/// The in-memory journal of one connection.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    frames: VecDeque<Kept>,
    bytes: usize,
    /// The next sequence to hand out (the last one + 1; never reused).
    next_seq: u64,
}

/// What one append did to the kept range.
#[derive(Debug)]
pub(crate) struct Appended {
    pub(crate) kept: Kept,
    /// Sequences dropped from the front by the bounds (`from..to`).
    pub(crate) dropped: Option<(u64, u64)>,
}

impl Journal {
    /// A journal restored from stored frames (in sequence order), continuing after `last_seq`.
    pub(crate) fn restored(frames: Vec<Frame>, last_seq: u64) -> Self {
        let mut j = Self {
            next_seq: last_seq + 1,
            ..Self::default()
        };
        for f in frames {
            let json: Arc<str> = serde_json::to_string(&f).unwrap_or_default().into();
            j.bytes += json.len();
            j.next_seq = j.next_seq.max(f.seq + 1);
            j.frames.push_back(Kept { frame: f, json });
        }
        j.next_seq = j.next_seq.max(1);
        j
    }

    /// Appends `body`, then drops the oldest frames past `max_bytes` or older than `max_age`
    /// (always keeping the newest frame).
    pub(crate) fn append(
        &mut self,
        body: FrameBody,
        now_ms: u64,
        max_bytes: usize,
        max_age: Duration,
    ) -> Appended {
        let seq = self.next_seq.max(1);
        self.next_seq = seq + 1;
        let frame = Frame {
            seq,
            ts_ms: now_ms,
            body,
        };
        let json: Arc<str> = serde_json::to_string(&frame).unwrap_or_default().into();
        self.bytes += json.len();
        let kept = Kept { frame, json };
        self.frames.push_back(kept.clone());
        let first = self.first_seq();
        let oldest_ok = now_ms.saturating_sub(max_age.as_millis() as u64);
        while self.frames.len() > 1
            && (self.bytes > max_bytes || self.frames[0].frame.ts_ms < oldest_ok)
        {
            if let Some(k) = self.frames.pop_front() {
                self.bytes -= k.json.len();
            }
        }
        let new_first = self.first_seq();
        Appended {
            kept,
            dropped: (new_first > first).then_some((first, new_first)),
        }
    }

    /// The oldest sequence kept (the next one when empty).
    pub(crate) fn first_seq(&self) -> u64 {
        self.frames
            .front()
            .map(|k| k.frame.seq)
            .unwrap_or(self.next_seq.max(1))
    }

    /// The newest sequence handed out (0 before the first frame).
    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq.max(1) - 1
    }

    /// Bytes of JSON kept.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Up to `max` frames after `after`; `Err(first_seq)` when frames after `after` were dropped.
    pub(crate) fn after(&self, after: u64, max: usize) -> Result<Vec<Kept>, u64> {
        let first = self.first_seq();
        if after + 1 < first {
            return Err(first);
        }
        let skip = (after + 1 - first) as usize;
        Ok(self.frames.iter().skip(skip).take(max).cloned().collect())
    }
}

/// Merges runs of consecutive agent text chunks (`agent_message_chunk` / `agent_thought_chunk`
/// with text content) into one frame carrying the last sequence of the run: a client that
/// falls behind a flood gets few large frames, and nothing is lost or repeated.
pub(crate) fn coalesce(batch: Vec<Kept>) -> Vec<Arc<str>> {
    let mut out: Vec<Arc<str>> = Vec::with_capacity(batch.len());
    let mut run: Option<(Frame, String, usize)> = None;
    let flush = |run: &mut Option<(Frame, String, usize)>, out: &mut Vec<Arc<str>>| {
        if let Some((mut f, text, n)) = run.take() {
            if n > 1
                && let FrameBody::Update { update } = &mut f.body
            {
                update["content"]["text"] = Value::String(text);
            }
            out.push(serde_json::to_string(&f).unwrap_or_default().into());
        }
    };
    for k in batch {
        match text_chunk(&k.frame) {
            Some((kind, text)) => {
                let same = run
                    .as_ref()
                    .is_some_and(|(f, _, _)| text_chunk(f).is_some_and(|(k2, _)| k2 == kind));
                if same {
                    if let Some((f, acc, n)) = run.as_mut() {
                        acc.push_str(text);
                        f.seq = k.frame.seq;
                        f.ts_ms = k.frame.ts_ms;
                        *n += 1;
                    }
                } else {
                    flush(&mut run, &mut out);
                    run = Some((k.frame.clone(), text.to_owned(), 1));
                }
            }
            None => {
                flush(&mut run, &mut out);
                out.push(k.json);
            }
        }
    }
    flush(&mut run, &mut out);
    out
}

fn text_chunk(f: &Frame) -> Option<(&str, &str)> {
    let FrameBody::Update { update } = &f.body else {
        return None;
    };
    let kind = update["sessionUpdate"].as_str()?;
    if !matches!(kind, "agent_message_chunk" | "agent_thought_chunk") {
        return None;
    }
    if update["content"]["type"] != "text" {
        return None;
    }
    Some((kind, update["content"]["text"].as_str()?))
}

/// One write for the store thread.
#[derive(Debug)]
pub(crate) enum Op {
    /// Replace a connection's record.
    Record(String, Vec<u8>),
    /// Add one frame.
    Frame(String, u64, Arc<str>),
    /// Remove frames `from..to`.
    Trim(String, u64, u64),
    /// Remove a connection and all its frames.
    Forget(String),
    /// Answered once every op queued before it is committed ([`Writer::flush`]).
    Flush(mpsc::Sender<()>),
}

/// The store thread's queue. Dropping every sender ends the thread after its last commit.
#[derive(Debug, Clone)]
pub(crate) struct Writer(mpsc::Sender<Op>);

impl Writer {
    /// Starts the thread that commits ops to `store`.
    pub(crate) fn start(store: Arc<Store>) -> Self {
        let (tx, rx) = mpsc::channel::<Op>();
        std::thread::Builder::new()
            .name("acp-journal".into())
            .spawn(move || {
                while let Ok(op) = rx.recv() {
                    let mut batch = vec![op];
                    while batch.len() < BATCH {
                        match rx.try_recv() {
                            Ok(op) => batch.push(op),
                            Err(_) => break,
                        }
                    }
                    if let Err(e) = commit(&store, &batch) {
                        tracing::warn!(source = "acp", error = %format!("{e:#}"), "writing the acp journal");
                    }
                    for op in batch {
                        if let Op::Flush(done) = op {
                            let _ = done.send(());
                        }
                    }
                }
            })
            .map(|_| ())
            .unwrap_or_else(|e| tracing::warn!(source = "acp", error = %e, "starting the acp journal writer"));
        Self(tx)
    }

    /// Queues one op (never blocks).
    pub(crate) fn send(&self, op: Op) {
        let _ = self.0.send(op);
    }

    /// Waits (blocking, up to `limit`) until every op queued before the call is committed;
    /// whether it was. The thread is never joined, so a stopping node calls this last: a frame
    /// journaled before the stop (an agent's exit, a turn's end) is on disk when it exits.
    pub(crate) fn flush(&self, limit: Duration) -> bool {
        let (tx, rx) = mpsc::channel();
        self.0.send(Op::Flush(tx)).is_ok() && rx.recv_timeout(limit).is_ok()
    }
}

fn commit(store: &Store, ops: &[Op]) -> anyhow::Result<()> {
    let tx = store.database().begin_write()?;
    {
        let mut conns = tx.open_table(CONNECTIONS)?;
        let mut frames = tx.open_table(FRAMES)?;
        for op in ops {
            match op {
                Op::Record(id, json) => {
                    conns.insert(id.as_str(), json.as_slice())?;
                }
                Op::Frame(id, seq, json) => {
                    frames.insert((id.as_str(), *seq), json.as_bytes())?;
                }
                Op::Trim(id, from, to) => {
                    for seq in *from..*to {
                        frames.remove((id.as_str(), seq))?;
                    }
                }
                Op::Flush(_) => {}
                Op::Forget(id) => {
                    conns.remove(id.as_str())?;
                    let seqs: Vec<u64> = frames
                        .range((id.as_str(), 0)..=(id.as_str(), u64::MAX))?
                        .filter_map(|r| r.ok().map(|(k, _)| k.value().1))
                        .collect();
                    for seq in seqs {
                        frames.remove((id.as_str(), seq))?;
                    }
                }
            }
        }
    }
    tx.commit()?;
    Ok(())
}

/// Every stored connection record with its frames (blocking; at start).
pub(crate) fn load(store: &Store) -> anyhow::Result<Vec<(Vec<u8>, Vec<Frame>)>> {
    {
        let tx = store.database().begin_write()?;
        tx.open_table(CONNECTIONS)?;
        tx.open_table(FRAMES)?;
        tx.commit()?;
    }
    let tx = store.database().begin_read()?;
    let conns = tx.open_table(CONNECTIONS)?;
    let frames = tx.open_table(FRAMES)?;
    let mut out = Vec::new();
    for r in conns.iter()? {
        let (k, v) = r?;
        let id = k.value().to_owned();
        let mut fs = Vec::new();
        for f in frames.range((id.as_str(), 0)..=(id.as_str(), u64::MAX))? {
            let (_, v) = f?;
            if let Ok(frame) = serde_json::from_slice::<Frame>(v.value()) {
                fs.push(frame);
            }
        }
        out.push((v.value().to_vec(), fs));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(t: &str) -> FrameBody {
        FrameBody::Update {
            update: json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":t}}),
        }
    }

    #[test]
    fn bounded_by_bytes_and_sequences_are_never_reused() {
        let mut j = Journal::default();
        for i in 0..1000 {
            j.append(chunk(&format!("{i}")), 10, 4096, Duration::from_secs(60));
        }
        assert!(j.bytes() <= 4096);
        assert_eq!(j.last_seq(), 1000);
        assert!(j.first_seq() > 1);
        assert_eq!(j.after(0, 10).unwrap_err(), j.first_seq());
        let tail = j.after(998, 10).unwrap();
        assert_eq!(tail.len(), 2);
        assert_eq!(tail[0].frame.seq, 999);
    }

    #[test]
    fn old_frames_age_out() {
        let mut j = Journal::default();
        j.append(chunk("a"), 0, 1 << 20, Duration::from_secs(1));
        let a = j.append(chunk("b"), 5_000, 1 << 20, Duration::from_secs(1));
        assert_eq!(a.dropped, Some((1, 2)));
        assert_eq!(j.first_seq(), 2);
    }

    #[test]
    fn coalescing_keeps_text_and_the_last_sequence() {
        let mut j = Journal::default();
        for t in ["a", "b", "c"] {
            j.append(chunk(t), 1, 1 << 20, Duration::from_secs(60));
        }
        j.append(
            FrameBody::TurnEnd {
                turn: 1,
                stop_reason: "end_turn".into(),
                error: None,
            },
            1,
            1 << 20,
            Duration::from_secs(60),
        );
        let out = coalesce(j.after(0, 100).unwrap());
        assert_eq!(out.len(), 2);
        let first: Value = serde_json::from_str(&out[0]).unwrap();
        assert_eq!(first["seq"], 3);
        assert_eq!(first["update"]["content"]["text"], "abc");
    }
}
