//! Session aliases (`tu-1`): the prefix rule, the per-prefix counter and restored aliases.
//!
//! Pure: it sees directory names and the set of live aliases, never the filesystem.

use std::collections::HashMap;

/// The alias prefix of a repository (or directory) name: a multi-word name contributes the
/// first character of each segment, a single word its first two characters; `tu` when
/// nothing usable remains.
pub fn prefix_for(name: &str) -> String {
    let segments: Vec<String> = name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|s| !s.is_empty())
        .map(|s| s.to_ascii_lowercase())
        .collect();
    let p: String = match segments.as_slice() {
        [] => String::new(),
        [one] => one.chars().take(2).collect(),
        many => many.iter().filter_map(|s| s.chars().next()).collect(),
    };
    if p.is_empty() { "tu".into() } else { p }
}

/// Splits a well-formed alias (`<prefix>-<number>`, lowercase alphanumeric prefix, positive
/// number without leading zero) into its parts.
pub fn parse(alias: &str) -> Option<(&str, u64)> {
    let (p, n) = alias.rsplit_once('-')?;
    let ok_prefix = !p.is_empty()
        && p.len() <= 32
        && p.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let ok_num = !n.is_empty()
        && n.len() <= 9
        && !n.starts_with('0')
        && n.bytes().all(|b| b.is_ascii_digit());
    if !(ok_prefix && ok_num) {
        return None;
    }
    Some((p, n.parse().ok()?))
}

/// Per-prefix counters.
#[derive(Debug, Default)]
pub struct Aliases {
    counters: HashMap<String, u64>,
}

impl Aliases {
    /// The alias for a new session: the restored one when well-formed and free (raising the
    /// counter past it), otherwise the next free `<prefix>-<n>`.
    pub fn assign(
        &mut self,
        prefix: &str,
        restored: Option<&str>,
        taken: impl Fn(&str) -> bool,
    ) -> String {
        if let Some(r) = restored
            && let Some((p, n)) = parse(r)
            && !taken(r)
        {
            let c = self.counters.entry(p.to_owned()).or_default();
            *c = (*c).max(n);
            return r.to_owned();
        }
        let c = self.counters.entry(prefix.to_owned()).or_default();
        loop {
            *c += 1;
            let a = format!("{prefix}-{c}");
            if !taken(&a) {
                return a;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(prefix_for("tuicommander"), "tu");
        assert_eq!(prefix_for("my-cool_app"), "mca");
        assert_eq!(prefix_for("X"), "x");
        assert_eq!(prefix_for("---"), "tu");
    }

    #[test]
    fn restored_aliases_are_reserved_only_when_valid_and_free() {
        let mut a = Aliases::default();
        assert_eq!(a.assign("tu", Some("tu-7"), |_| false), "tu-7");
        assert_eq!(a.assign("tu", None, |_| false), "tu-8");
        assert_eq!(a.assign("tu", Some("tu-8"), |x| x == "tu-8"), "tu-9");
        for bad in ["TU-1", "tu-01", "tu-", "-3", "tu 3", "tu-x"] {
            assert!(parse(bad).is_none(), "{bad}");
        }
        assert_eq!(a.assign("ab", Some("rm -rf-1"), |_| false), "ab-1");
    }
}
