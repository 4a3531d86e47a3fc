//! Unified diff text as numbered lines, with word-level highlights (pure; no `git`).

use super::Line;

/// Parses unified diff text into numbered lines with word highlights.
pub(crate) fn parse_lines(text: &str) -> Vec<Line> {
    let mut v: Vec<Line> = Vec::new();
    let (mut old, mut new) = (0u64, 0u64);
    let mut in_hunk = false;
    for raw in text.split_inclusive('\n') {
        let l = raw.strip_suffix('\n').unwrap_or(raw);
        let (kind, o, n) = if l.starts_with("@@") {
            in_hunk = true;
            let (a, b) = hunk_starts(l);
            old = a;
            new = b;
            ("hunk", None, None)
        } else if l.starts_with("diff --git") {
            in_hunk = false;
            ("meta", None, None)
        } else if !in_hunk {
            ("meta", None, None)
        } else if let Some(_rest) = l.strip_prefix('+') {
            new += 1;
            ("add", None, Some(new))
        } else if l.starts_with('-') {
            old += 1;
            ("del", Some(old), None)
        } else if l.starts_with('\\') {
            ("note", None, None)
        } else {
            old += 1;
            new += 1;
            ("ctx", Some(old), Some(new))
        };
        v.push(Line {
            kind,
            text: l.to_owned(),
            old: o,
            new: n,
            hl: vec![],
        });
    }
    highlight(&mut v);
    v
}

pub(super) fn hunk_starts(l: &str) -> (u64, u64) {
    // "@@ -a,b +c,d @@"
    let mut it = l.split(' ').skip(1);
    let num = |s: Option<&str>| -> u64 {
        s.and_then(|x| x.get(1..))
            .and_then(|x| x.split(',').next())
            .and_then(|x| x.parse::<u64>().ok())
            .unwrap_or(1)
    };
    let a = num(it.next());
    let c = num(it.next());
    (a.saturating_sub(1), c.saturating_sub(1))
}

/// Word-level highlights: each run of `del` lines followed by a run of `add` lines is paired
/// line by line; the differing middle (between the common token prefix and suffix) is marked.
pub(super) fn highlight(v: &mut [Line]) {
    let mut i = 0;
    while i < v.len() {
        if v[i].kind != "del" {
            i += 1;
            continue;
        }
        let ds = i;
        while i < v.len() && v[i].kind == "del" {
            i += 1;
        }
        let as_ = i;
        while i < v.len() && v[i].kind == "add" {
            i += 1;
        }
        let pairs = (as_ - ds).min(i - as_);
        for k in 0..pairs {
            let (d, a) = (ds + k, as_ + k);
            if let Some((hd, ha)) = word_diff(&v[d].text[1..], &v[a].text[1..]) {
                v[d].hl = vec![[hd[0] + 1, hd[1] + 1]];
                v[a].hl = vec![[ha[0] + 1, ha[1] + 1]];
            }
        }
    }
}

fn tokens(s: &str) -> Vec<(usize, usize)> {
    // (start char, end char) of word runs and single other chars.
    let mut out = Vec::new();
    let cs: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < cs.len() {
        let w = |c: char| c.is_alphanumeric() || c == '_';
        let st = i;
        if w(cs[i]) {
            while i < cs.len() && w(cs[i]) {
                i += 1;
            }
        } else {
            i += 1;
        }
        out.push((st, i));
    }
    out
}

fn word_diff(a: &str, b: &str) -> Option<([usize; 2], [usize; 2])> {
    let (ca, cb): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let (ta, tb) = (tokens(a), tokens(b));
    let tok = |cs: &[char], t: (usize, usize)| cs[t.0..t.1].iter().collect::<String>();
    let mut p = 0;
    while p < ta.len() && p < tb.len() && tok(&ca, ta[p]) == tok(&cb, tb[p]) {
        p += 1;
    }
    let mut s = 0;
    while s < ta.len() - p.min(ta.len())
        && s < tb.len() - p.min(tb.len())
        && tok(&ca, ta[ta.len() - 1 - s]) == tok(&cb, tb[tb.len() - 1 - s])
    {
        s += 1;
    }
    if p == 0 && s == 0 {
        return None;
    }
    let span = |t: &[(usize, usize)], n: usize| -> [usize; 2] {
        let st = t.get(p).map(|x| x.0).unwrap_or(n);
        let en = if s == 0 {
            n
        } else {
            t.get(t.len() - s).map(|x| x.0).unwrap_or(n)
        };
        [st, en.max(st)]
    };
    Some((span(&ta, ca.len()), span(&tb, cb.len())))
}
