//! Unit tests of the diff parsers (raw/numstat records, word highlights).

use super::*;

#[test]
fn word_highlights_mark_the_changed_middle() {
    let v = parse_lines("@@ -1 +1 @@\n-let x = 1;\n+let x = 42;\n");
    assert_eq!(v[1].hl, vec![[9, 10]]);
    assert_eq!(v[2].hl, vec![[9, 11]]);
    assert_eq!(v[1].old, Some(1));
    assert_eq!(v[2].new, Some(1));
}

#[test]
fn raw_numstat_parses_renames_and_binary() {
    let raw = b":100644 100644 aaa bbb R090\0old.txt\0new.txt\0:100644 100644 ccc ddd M\0bin\0\x33\t1\t\0old.txt\0new.txt\0-\t-\tbin\0";
    let v = parse_raw_numstat(raw);
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].status, "renamed");
    assert_eq!(v[0].old_path.as_deref(), Some("old.txt"));
    assert_eq!(v[0].path, "new.txt");
    assert_eq!((v[0].added, v[0].removed), (3, 1));
    assert!(v[1].binary);
}
