//! Group commit of the peer state: one `redb` write transaction for every change that arrived
//! while the previous commit ran.
//!
//! One committer thread per store. Parts of the process that keep durable peer state (the
//! node's uplink outbox and dedupe rings, a hub's per-connection outboxes) register as a
//! [`Source`]. Whoever changes such state journals the change under the source's own lock,
//! attaches a [`Waiter`] when someone must hear of the commit (a sender before its
//! acknowledgement), and calls [`Committer::wake`]. The thread then takes what every source
//! journaled (under each source's lock, so the committer is the only taker and a failed
//! group's changes go back ahead of anything newer), writes it all in one transaction, commits,
//! and hands the result to that group's [`Taken::finish`] — which runs the waiters in this
//! thread, before the next group is taken. A failed commit fails every waiter of its group and
//! writes nothing; what earlier groups committed stays.
//!
//! A caller that must wait for its commit anyway (a sender's custody, a delivery's ring) can
//! run the group itself with [`Committer::commit_now`] instead of waking the thread and
//! sleeping until it answers: one group runs at a time (whoever runs it is the only taker), so
//! the rules above hold, and the commit costs no hand-off to another thread — under CPU
//! contention each hand-off is a wait in the run queue, on the mail's critical path.
//!
//! Waiters run on whichever thread runs their group (the committer thread or a caller of
//! `commit_now`): they must not block on anything that waits for a commit, and must not take
//! `node.mail`'s lock (a delivery holds it while it commits).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::store::{PeerOp, Store};

/// The result a waiter hears: `Err` carries why the group's commit failed.
pub type CommitResult = Result<(), Arc<str>>;

/// Runs once its group's commit ended (on the committer thread).
pub type Waiter = Box<dyn FnOnce(CommitResult) + Send>;

/// Waiters journaled with a source's changes.
#[derive(Default)]
pub struct Waiters(pub Vec<Waiter>);

impl std::fmt::Debug for Waiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Waiters({})", self.0.len())
    }
}

/// A waiter that hands the result to a channel, and the receiving end (for a blocking caller).
pub fn channel_waiter() -> (Waiter, std::sync::mpsc::Receiver<CommitResult>) {
    let (tx, rx) = std::sync::mpsc::channel();
    (
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
        rx,
    )
}

/// Waits for a [`channel_waiter`]'s result; a committer that went away is a failure.
pub fn wait(rx: &std::sync::mpsc::Receiver<CommitResult>) -> CommitResult {
    rx.recv()
        .unwrap_or_else(|_| Err(Arc::from("the committer stopped")))
}

/// Durable state that journals changes for the committer.
pub trait Source: Send + Sync {
    /// Takes everything journaled since the last take (changes and waiters), under the
    /// source's lock; `None` when there is nothing.
    fn take(&self) -> Option<Box<dyn Taken>>;
}

/// One source's part of a group.
pub trait Taken: Send {
    /// The writes, appended to the group's.
    fn write(&self, ops: &mut Vec<PeerOp>) -> anyhow::Result<()>;
    /// The group's commit ended: on failure give the changes back (ahead of newer ones), then
    /// run the waiters.
    fn finish(self: Box<Self>, result: CommitResult);
}

#[derive(Default)]
struct State {
    wake: bool,
    stop: bool,
    sources: Vec<Arc<dyn Source>>,
}

struct Shared {
    store: Arc<Store>,
    state: Mutex<State>,
    cv: Condvar,
    /// Held while a group is taken, written and finished: one group at a time.
    group: Mutex<()>,
    transactions: AtomicU64,
    failures: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The committer thread of one store; stops (after a last group) when dropped.
pub struct Committer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer")
            .field("transactions", &self.transactions())
            .finish_non_exhaustive()
    }
}

impl Committer {
    /// Starts the thread.
    pub fn start(store: Arc<Store>) -> Self {
        let shared = Arc::new(Shared {
            store,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            group: Mutex::new(()),
            transactions: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("peer-commit".into())
            .spawn(move || run(&s))
            .expect("spawning the peer committer thread");
        Self { shared }
    }

    /// Adds a source (kept until the committer stops; hold only weak references to state
    /// that owns the committer).
    pub fn add(&self, source: Arc<dyn Source>) {
        self.shared.lock().sources.push(source);
    }

    /// Something was journaled: take and commit it soon (after the commit running now).
    pub fn wake(&self) {
        self.shared.lock().wake = true;
        self.shared.cv.notify_one();
    }

    /// Takes, writes and finishes a group on the calling thread (after the group running now,
    /// if any): everything journaled before this call is committed (or failed, and its waiters
    /// told) when it returns. Blocking IO: call it where waiting for the commit is the point.
    /// Never from a waiter (one group at a time: it would wait for itself).
    pub fn commit_now(&self) {
        let sources = self.shared.lock().sources.clone();
        run_group(&self.shared, &sources);
    }

    /// Transactions committed or attempted so far (observability and tests).
    pub fn transactions(&self) -> u64 {
        self.shared.transactions.load(Ordering::Relaxed)
    }

    /// Groups whose commit failed so far.
    pub fn failures(&self) -> u64 {
        self.shared.failures.load(Ordering::Relaxed)
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.cv.notify_one();
    }
}

fn run(shared: &Shared) {
    loop {
        let (sources, stop) = {
            let mut st = shared.lock();
            while !st.wake && !st.stop {
                st = shared.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            st.wake = false;
            (st.sources.clone(), st.stop)
        };
        run_group(shared, &sources);
        if stop {
            return;
        }
    }
}

/// One group: take what every source journaled, write it in one transaction, finish.
fn run_group(shared: &Shared, sources: &[Arc<dyn Source>]) {
    let _one_at_a_time = shared.group.lock().unwrap_or_else(|p| p.into_inner());
    let taken: Vec<Box<dyn Taken>> = sources.iter().filter_map(|s| s.take()).collect();
    if taken.is_empty() {
        return;
    }
    let mut ops = Vec::new();
    let r = taken.iter().try_for_each(|t| t.write(&mut ops));
    // A group with nothing to write (only waiters, or records that were removed before any
    // commit took them) needs no transaction: every earlier group has finished, and a failed
    // one's changes would be in `ops`, so everything journaled before these waiters is
    // already committed.
    let r = r.and_then(|()| {
        if ops.is_empty() {
            return Ok(());
        }
        shared.transactions.fetch_add(1, Ordering::Relaxed);
        shared.store.apply_peer_ops(&ops)
    });
    let r: CommitResult = r.map_err(|e| {
        shared.failures.fetch_add(1, Ordering::Relaxed);
        tracing::error!(error = %format!("{e:#}"), "committing cross-host mail state failed");
        Arc::from(format!("{e:#}"))
    });
    for t in taken {
        t.finish(r.clone());
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Barrier;

    use super::*;

    /// A source of ring writes: each sender journals one record and waits for its commit. A
    /// record named `poison` makes its group's write fail (as a record that cannot be encoded
    /// would), so the whole transaction is dropped.
    /// Journaled records and the waiters of their senders.
    type Pending = (BTreeMap<String, Vec<u8>>, Vec<Waiter>);

    #[derive(Default)]
    struct Rings {
        pending: Mutex<Pending>,
    }

    struct TakenRings {
        records: BTreeMap<String, Vec<u8>>,
        waiters: Vec<Waiter>,
        source: Arc<Rings>,
    }

    impl Source for Arc<Rings> {
        fn take(&self) -> Option<Box<dyn Taken>> {
            let mut g = self.pending.lock().unwrap();
            if g.0.is_empty() && g.1.is_empty() {
                return None;
            }
            Some(Box::new(TakenRings {
                records: std::mem::take(&mut g.0),
                waiters: std::mem::take(&mut g.1),
                source: self.clone(),
            }))
        }
    }

    impl Taken for TakenRings {
        fn write(&self, ops: &mut Vec<PeerOp>) -> anyhow::Result<()> {
            for (k, v) in &self.records {
                if k == "poison" {
                    anyhow::bail!("record {k} cannot be written");
                }
                ops.push(PeerOp::Ring {
                    recipient: k.clone(),
                    json: Some(v.clone()),
                });
            }
            Ok(())
        }

        fn finish(self: Box<Self>, result: CommitResult) {
            if result.is_err() {
                // Give the changes back, except the one that can never be written.
                let mut g = self.source.pending.lock().unwrap();
                for (k, v) in self.records {
                    if k != "poison" {
                        g.0.entry(k).or_insert(v);
                    }
                }
            }
            for w in self.waiters {
                w(result.clone());
            }
        }
    }

    fn send(c: &Committer, rings: &Arc<Rings>, key: &str) -> CommitResult {
        let (w, rx) = channel_waiter();
        {
            let mut g = rings.pending.lock().unwrap();
            g.0.insert(key.to_owned(), key.as_bytes().to_vec());
            g.1.push(w);
        }
        c.wake();
        wait(&rx)
    }

    fn stored(store: &Store) -> BTreeMap<String, Vec<u8>> {
        store.peer_rings().unwrap().into_iter().collect()
    }

    #[test]
    fn concurrent_senders_share_transactions_and_hear_only_after_their_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("s.redb")).unwrap());
        let c = Arc::new(Committer::start(store.clone()));
        let rings = Arc::new(Rings::default());
        c.add(Arc::new(rings.clone()));
        const N: usize = 32;
        let barrier = Arc::new(Barrier::new(N));
        let handles: Vec<_> = (0..N)
            .map(|i| {
                let (c, rings, store, barrier) =
                    (c.clone(), rings.clone(), store.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let key = format!("r{i}");
                    send(&c, &rings, &key).expect("committed");
                    // Answered only after the commit: the record is readable from the file.
                    assert_eq!(
                        stored(&store).get(&key).map(Vec::as_slice),
                        Some(key.as_bytes())
                    );
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let tx = c.transactions();
        assert!(
            tx < N as u64,
            "{N} concurrent senders took {tx} transactions"
        );
        assert_eq!(stored(&store).len(), N);
        // Reopened (as after a kill -9): everything acknowledged is there.
        drop(c);
        drop(rings);
        let reopened = {
            let store = Arc::try_unwrap(store).ok();
            drop(store);
            Store::open(&dir.path().join("s.redb")).unwrap()
        };
        assert_eq!(stored(&reopened).len(), N);
    }

    #[test]
    fn commit_now_runs_the_group_on_the_callers_thread_one_group_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("s.redb")).unwrap());
        let c = Arc::new(Committer::start(store.clone()));
        let rings = Arc::new(Rings::default());
        c.add(Arc::new(rings.clone()));
        // Journaled without waking the thread: commit_now writes it and runs the waiter here.
        let (w, rx) = channel_waiter();
        let caller = std::thread::current().id();
        let ran_on = Arc::new(Mutex::new(None));
        let r2 = ran_on.clone();
        {
            let mut g = rings.pending.lock().unwrap();
            g.0.insert("a".into(), b"a".to_vec());
            g.1.push(Box::new(move |r| {
                *r2.lock().unwrap() = Some(std::thread::current().id());
                w(r);
            }));
        }
        c.commit_now();
        assert_eq!(
            rx.try_recv().expect("answered when commit_now returns"),
            Ok(())
        );
        assert_eq!(*ran_on.lock().unwrap(), Some(caller));
        assert!(stored(&store).contains_key("a"));
        // Many callers at once, mixed with the thread: every record committed, every waiter
        // answered once, fewer transactions than callers.
        const N: usize = 16;
        let before = c.transactions();
        let barrier = Arc::new(Barrier::new(N));
        let handles: Vec<_> = (0..N)
            .map(|i| {
                let (c, rings, barrier) = (c.clone(), rings.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let (w, rx) = channel_waiter();
                    {
                        let mut g = rings.pending.lock().unwrap();
                        g.0.insert(format!("n{i}"), vec![1]);
                        g.1.push(w);
                    }
                    barrier.wait();
                    if i % 2 == 0 {
                        c.commit_now();
                        assert_eq!(rx.try_recv().expect("answered"), Ok(()));
                    } else {
                        c.wake();
                        wait(&rx).expect("committed");
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(stored(&store).len(), N + 1);
        assert!(c.transactions() - before <= N as u64);
        // Nothing journaled: no transaction.
        let before = c.transactions();
        c.commit_now();
        assert_eq!(c.transactions(), before);
    }

    #[test]
    fn a_failed_commit_fails_its_whole_group_and_keeps_what_was_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("s.redb")).unwrap());
        let c = Committer::start(store.clone());
        let rings = Arc::new(Rings::default());
        c.add(Arc::new(rings.clone()));
        send(&c, &rings, "kept").expect("committed");
        // Two senders in one group, one of whose records cannot be written: both fail, and
        // nothing of the group is written.
        let (w1, rx1) = channel_waiter();
        let (w2, rx2) = channel_waiter();
        {
            let mut g = rings.pending.lock().unwrap();
            g.0.insert("poison".into(), b"x".to_vec());
            g.0.insert("b".into(), b"b".to_vec());
            g.1.push(w1);
            g.1.push(w2);
        }
        c.wake();
        assert!(wait(&rx1).is_err());
        assert!(wait(&rx2).is_err());
        assert_eq!(c.failures(), 1);
        let after = stored(&store);
        assert_eq!(after.get("kept").map(Vec::as_slice), Some(&b"kept"[..]));
        assert!(!after.contains_key("b") && !after.contains_key("poison"));
        // The given-back change goes out with the next group, ahead of the newer one.
        send(&c, &rings, "later").expect("committed");
        let after = stored(&store);
        assert!(after.contains_key("b") && after.contains_key("later"));
        assert!(after.contains_key("kept"));
    }
}
