//! Process-tree figures from `/proc`: every descendant of a session's process, their summed
//! CPU time and resident memory. Blocking (file reads); callers use `spawn_blocking`.
//!
//! CPU times are in `USER_HZ` ticks, which Linux fixes at 100 per second for every
//! user-visible interface whatever the kernel's own tick rate.

use std::collections::HashSet;

/// `USER_HZ`: ticks per second in `/proc/<pid>/stat`.
const TICKS_PER_SEC: f64 = 100.0;
/// Processes visited per tree at most (a fork bomb must not stall the route).
const MAX_TREE: usize = 4096;

/// One process tree's sums.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tree {
    /// Pids in the tree, the root first.
    pub pids: Vec<i32>,
    /// User + system CPU time of the live processes, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size summed over the tree, in bytes (shared pages count once per
    /// process, as `VmRSS` does).
    pub rss_bytes: u64,
}

fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// `(utime + stime)` ticks of one process, when it still exists.
fn cpu_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised name (which may itself hold spaces or parentheses).
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is the state (field 3); utime and stime are fields 14 and 15.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn rss_bytes(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The tree rooted at `root`.
pub fn tree(root: i32) -> Tree {
    let mut t = Tree::default();
    let mut seen = HashSet::new();
    let mut stack = vec![root];
    let mut ticks = 0;
    while let Some(p) = stack.pop() {
        if !seen.insert(p) || seen.len() > MAX_TREE {
            continue;
        }
        let Some(c) = cpu_ticks(p) else {
            continue;
        };
        ticks += c;
        t.rss_bytes += rss_bytes(p);
        t.pids.push(p);
        stack.extend(children(p));
    }
    t.cpu_seconds = ticks as f64 / TICKS_PER_SEC;
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_and_a_child_are_measured() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let t = tree(me);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(t.pids[0], me);
        assert!(t.pids.contains(&(child.id() as i32)), "{:?}", t.pids);
        assert!(t.rss_bytes > 1 << 20);
        assert_eq!(tree(i32::MAX - 7), Tree::default());
    }
}
