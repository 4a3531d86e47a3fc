//! The last screen the hub relayed for each remote session, so a session of a node that went
//! down stays viewable ("host offline"): the screen-sync stream proxy follows the node's
//! frames (`screen` replaces, `diff` applies, with `tuic_proto::screen::apply_diff`) and stores
//! the result when the relay ends; a screen stream asked for while that node is down gets the
//! stored `hello` and whole `screen`, then the socket closes (the page keeps showing it and
//! retries). Bounded: one screen per session (a screen is at most rows × cols cells), at most
//! [`MAX_SCREENS`] sessions (the least recently stored is dropped first); an exited session's
//! screen is dropped. It does not fetch screens on its own: a session nobody watched through
//! this hub before its node went down has none.

use std::collections::HashMap;
use std::sync::Mutex;

use tuic_proto::screen::{ServerFrame, Snapshot, apply_diff};

/// Most sessions whose last screen is kept.
pub const MAX_SCREENS: usize = 1024;

/// One session's last relayed screen.
#[derive(Debug, Clone)]
pub struct LastScreen {
    /// The node's `hello` frame, as it was sent.
    pub hello: String,
    /// The screen after the last applied frame.
    pub screen: Snapshot,
    /// The last frame's number.
    pub seq: u64,
}

/// Follows one relayed screen stream.
#[derive(Debug, Default)]
pub struct Follower {
    hello: Option<String>,
    screen: Option<Snapshot>,
    seq: u64,
    exited: bool,
}

impl Follower {
    /// Applies one text frame from the node (frames it cannot read are ignored: the page is
    /// the judge of those, the cache only keeps what it understood).
    pub fn on_text(&mut self, text: &str) {
        match serde_json::from_str::<ServerFrame>(text) {
            Ok(ServerFrame::Hello(_)) => self.hello = Some(text.to_owned()),
            Ok(ServerFrame::Screen { seq, screen }) => {
                self.screen = Some(screen);
                self.seq = seq;
            }
            Ok(ServerFrame::Diff(d)) => {
                if let Some(s) = self.screen.as_mut() {
                    if apply_diff(s, &d).is_ok() {
                        self.seq = d.seq;
                    } else {
                        self.screen = None;
                    }
                }
            }
            Ok(ServerFrame::Exit { .. }) => self.exited = true,
            _ => {}
        }
    }
}

/// Screens by address, each with the store clock at which it was stored (for eviction).
type ByAddress = HashMap<String, (u64, LastScreen)>;

/// The store, one per hub.
#[derive(Debug, Default)]
pub struct LastScreens {
    /// The store clock and the screens.
    inner: Mutex<(u64, ByAddress)>,
}

impl LastScreens {
    /// Stores what `f` followed for `address` (an exited session's entry is dropped instead).
    pub fn store(&self, address: &str, f: Follower) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (clock, map) = &mut *g;
        if f.exited {
            map.remove(address);
            return;
        }
        let (Some(hello), Some(screen)) = (f.hello, f.screen) else {
            return;
        };
        *clock += 1;
        map.insert(
            address.to_owned(),
            (
                *clock,
                LastScreen {
                    hello,
                    screen,
                    seq: f.seq,
                },
            ),
        );
        if map.len() > MAX_SCREENS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
    }

    /// The last screen of `address`, if one was relayed.
    pub fn get(&self, address: &str) -> Option<LastScreen> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.1.get(address).map(|(_, s)| s.clone())
    }

    /// The frames a page gets for it: the `hello`, then the whole screen.
    pub fn frames(s: &LastScreen) -> Vec<String> {
        let screen = ServerFrame::Screen {
            seq: s.seq,
            screen: s.screen.clone(),
        };
        vec![
            s.hello.clone(),
            serde_json::to_string(&screen).unwrap_or_default(),
        ]
    }

    /// Sessions with a stored screen.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).1.len()
    }

    /// Whether none is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn screen_frame(seq: u64, text: &str) -> String {
        json!({"type": "screen", "seq": seq, "cols": 10, "rows": 2,
               "lines": [[{"text": text}], []], "alt_screen": false, "title": "",
               "scroll": 0, "history": 0,
               "cursor": {"x": 0, "y": 0, "visible": true}})
        .to_string()
    }

    #[test]
    fn follows_screens_and_diffs_keeps_the_newest_and_drops_exited() {
        let store = LastScreens::default();
        let mut f = Follower::default();
        f.on_text(&json!({"type": "hello", "mode": "screen", "offset": 0, "total_written": 0, "oldest_offset": 0}).to_string());
        f.on_text(&screen_frame(1, "one"));
        f.on_text(
            &json!({"type": "diff", "seq": 2, "rows": [{"y": 1, "runs": [{"text": "two"}]}],
                    "cursor": {"x": 3, "y": 1, "visible": true}})
            .to_string(),
        );
        f.on_text("not json");
        store.store("boxb/s1", f);
        let s = store.get("boxb/s1").expect("stored");
        assert_eq!(s.seq, 2);
        assert_eq!(
            s.screen.text_rows(),
            vec!["one".to_owned(), "two".to_owned()]
        );
        let frames = LastScreens::frames(&s);
        assert!(frames[0].contains("hello"));
        assert!(frames[1].contains("\"screen\"") && frames[1].contains("two"));

        let mut f = Follower::default();
        f.on_text(&json!({"type": "hello", "mode": "screen", "offset": 0, "total_written": 0, "oldest_offset": 0}).to_string());
        f.on_text(&screen_frame(1, "x"));
        f.on_text(&json!({"type": "exit", "exit_code": 0}).to_string());
        store.store("boxb/s1", f);
        assert!(store.get("boxb/s1").is_none());

        for i in 0..MAX_SCREENS + 5 {
            let mut f = Follower::default();
            f.on_text(&json!({"type": "hello", "mode": "screen", "offset": 0, "total_written": 0, "oldest_offset": 0}).to_string());
            f.on_text(&screen_frame(1, "y"));
            store.store(&format!("boxb/s{i}"), f);
        }
        assert_eq!(store.len(), MAX_SCREENS);
        assert!(store.get("boxb/s0").is_none(), "the oldest goes first");
    }
}
