//! Natural order of names such as session aliases: runs of digits compare as numbers, so
//! `ro-8` sorts before `ro-10` (as `ls -v` and `sort -V` do); everything else compares as text.

use std::cmp::Ordering;

/// Compares `a` and `b` in natural order. Equal numbers with different leading zeros fall
/// back to plain text order, so the order is total and consistent with `==`.
pub fn cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) if p.is_ascii_digit() && q.is_ascii_digit() => {
                let (dx, rx) = split_digits(x);
                let (dy, ry) = split_digits(y);
                let (tx, ty) = (trim_zeros(dx), trim_zeros(dy));
                let o = tx.len().cmp(&ty.len()).then_with(|| tx.cmp(ty));
                if o != Ordering::Equal {
                    return o;
                }
                (x, y) = (rx, ry);
            }
            (Some(p), Some(q)) => {
                if p != q {
                    return p.cmp(q);
                }
                (x, y) = (&x[1..], &y[1..]);
            }
        }
    }
}

fn split_digits(s: &[u8]) -> (&[u8], &[u8]) {
    let n = s.iter().take_while(|c| c.is_ascii_digit()).count();
    s.split_at(n)
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let z = d.iter().take_while(|&&c| c == b'0').count();
    &d[z..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_by_value_and_text_by_bytes() {
        let mut v = vec![
            "ro-10", "ro-8", "ro-1", "ab-2", "ro-9", "ro-100", "ro", "ro-08",
        ];
        v.sort_by(|a, b| cmp(a, b));
        assert_eq!(
            v,
            [
                "ab-2", "ro", "ro-1", "ro-08", "ro-8", "ro-9", "ro-10", "ro-100"
            ]
        );
        assert_eq!(cmp("a", "a"), Ordering::Equal);
        assert_eq!(
            cmp("x99999999999999999999999", "x100000000000000000000000"),
            Ordering::Less
        );
    }
}
