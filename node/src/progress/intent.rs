//! The `intent:` marker: a line an agent prints when it starts a piece of work
//! (`intent: rewrite the parser`), which TUIC journals as the observed `intent` kind.
//!
//! Pure: a clean-log line in, the marker's text out. The session monitor feeds it the lines
//! that left the cursor row since its last look (see `session::monitor`).

/// The text of an `intent:` marker on `line`, if the line is one: after optional indentation
/// and a bullet or tree glyph an agent's renderer puts first, `intent:` (any case) and a
/// non-empty text.
pub fn marker(line: &str) -> Option<&str> {
    let t = line.trim_start_matches(|c: char| {
        c.is_whitespace() || matches!(c, '●' | '⏺' | '•' | '⎿' | '│' | '-' | '*' | '>' | '·')
    });
    let head = t.get(..7)?;
    if !head.eq_ignore_ascii_case("intent:") {
        return None;
    }
    let text = t[7..].trim();
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::marker;

    #[test]
    fn markers_and_non_markers() {
        let cases = [
            ("intent: rewrite the parser", Some("rewrite the parser")),
            (
                "  ⏺ Intent:   fix the flaky test  ",
                Some("fix the flaky test"),
            ),
            ("● intent: ship it", Some("ship it")),
            ("intent:", None),
            ("intent:    ", None),
            ("my intent: is hidden", None),
            ("$ echo intent: typed", None),
            ("intentional: no", None),
            ("", None),
            ("int", None),
        ];
        for (line, want) in cases {
            assert_eq!(marker(line), want, "{line:?}");
        }
    }
}
