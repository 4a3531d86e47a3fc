//! `tuic diff`, `tuic review`, `tuic merge` (issue 43): an agent's changes from the terminal,
//! over the node's review routes. A TARGET that is an absolute path (or `<host>:/path` on a
//! hub) names a worktree (`/repo/diff-*`, `/repo/merge`); anything else names a session
//! (`[host/]SESSION`: `/sessions/{id}/changes…`, forwarded by a hub to the owner).
//!
//! `diff` colours like `git diff` on a terminal and prints plain text when piped; control
//! characters in the diff (an agent's file may carry terminal escapes) are shown as symbols
//! on a terminal. `review` shows the diff in `$PAGER` (on a terminal), opens a review file in
//! `$EDITOR` (`path:line: comment`, `path:-line: comment` for a removed line) and sends every
//! comment as one message.

use std::io::Write;

use serde_json::{Value, json};
use tuic_proto::ipc_http::{Request, Response};

use crate::ctx::{Ctx, Failure};

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn answer(resp: &Response, what: &str) -> Result<Value, Failure> {
    let v = resp.json().unwrap_or(Value::Null);
    match resp.status() {
        200..=299 => Ok(v),
        s => Err(Failure::Failed(format!(
            "{what}: {s} {}{}",
            crate::mcp::error_text(resp),
            v.get("code")
                .and_then(Value::as_str)
                .map(|c| format!(" ({c})"))
                .unwrap_or_default()
        ))),
    }
}

fn is_path(t: &str) -> bool {
    t.starts_with('/')
        || t.split_once(':')
            .is_some_and(|(h, r)| !h.is_empty() && !h.contains('/') && r.starts_with('/'))
}

/// The summary and file routes of a target.
fn routes(target: &str) -> (String, String) {
    if is_path(target) {
        (
            format!("/repo/diff-summary?path={}", enc(target)),
            format!("/repo/diff-file?path={}", enc(target)),
        )
    } else {
        let base = format!("/sessions/{}", enc(target));
        (
            format!("{base}/changes?x=1"),
            format!("{base}/changes/file?x=1"),
        )
    }
}

fn get(ctx: &Ctx, path: &str) -> Result<Value, Failure> {
    answer(
        &ctx.send(&Request::new("GET", path))?,
        &format!("GET {path}"),
    )
}

fn safe(s: &str, tty: bool) -> String {
    if !tty {
        return s.to_owned();
    }
    s.chars()
        .map(|c| match c {
            '\t' => c,
            '\x1b' => '\u{241b}',
            c if (c as u32) < 0x20 => char::from_u32(0x2400 + c as u32).unwrap_or('?'),
            '\x7f' => '\u{2421}',
            c if (0x80..0xa0).contains(&(c as u32)) => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// The diff text, coloured like `git diff` when `color`.
fn render_diff(text: &str, color: bool) -> String {
    let mut out = String::new();
    let mut in_hunk = false;
    for l in text.lines() {
        let l2 = safe(l, color);
        let code = if l.starts_with("diff --git") {
            in_hunk = false;
            "1"
        } else if l.starts_with("@@") {
            in_hunk = true;
            "36"
        } else if !in_hunk {
            "1"
        } else if l.starts_with('+') {
            "32"
        } else if l.starts_with('-') {
            "31"
        } else {
            ""
        };
        if color && !code.is_empty() {
            out.push_str(&format!("\x1b[{code}m{l2}\x1b[m\n"));
        } else {
            out.push_str(&l2);
            out.push('\n');
        }
    }
    out
}

fn summary_text(v: &Value) -> String {
    let mut s = format!(
        "{} → {} ({} file(s), +{} -{})\n",
        v["branch"].as_str().unwrap_or("HEAD"),
        v["base"].as_str().unwrap_or("?"),
        v["total_files"],
        v["added"],
        v["removed"]
    );
    let row = |f: &Value| {
        let name = match f["old_path"].as_str() {
            Some(o) => format!("{o} → {}", f["path"].as_str().unwrap_or("")),
            None => f["path"].as_str().unwrap_or("").to_owned(),
        };
        let counts = if f["binary"] == true {
            "binary".to_owned()
        } else {
            format!("+{} -{}", f["added"], f["removed"])
        };
        format!(
            "  {:<9} {}  {counts}\n",
            f["status"].as_str().unwrap_or("?"),
            name
        )
    };
    for f in v["files"].as_array().into_iter().flatten() {
        s.push_str(&row(f));
    }
    let un: Vec<&Value> = v["uncommitted"].as_array().into_iter().flatten().collect();
    if !un.is_empty() {
        s.push_str("uncommitted:\n");
        for f in un {
            s.push_str(&row(f));
        }
    }
    let cs: Vec<&Value> = v["commits"].as_array().into_iter().flatten().collect();
    if !cs.is_empty() {
        s.push_str("commits:\n");
        for c in cs {
            s.push_str(&format!(
                "  {} {}\n",
                c["sha"].as_str().unwrap_or("").get(..10).unwrap_or(""),
                c["subject"].as_str().unwrap_or("")
            ));
        }
    }
    s
}

/// `tuic diff TARGET [FILE]`.
pub(crate) fn diff(
    ctx: &Ctx,
    target: &str,
    file: Option<&str>,
    base: Option<&str>,
    uncommitted: bool,
    as_json: bool,
) -> Result<(), Failure> {
    let (sum, one) = routes(target);
    let extra = base
        .map(|b| format!("&base={}", enc(b)))
        .unwrap_or_default();
    let color = !as_json && crate::tty::stdout_is_tty();
    match file {
        None => {
            let v = get(ctx, &format!("{sum}{extra}"))?;
            if as_json {
                outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                crate::tty::stdout_text(&safe(&summary_text(&v), color).replace('\u{240a}', "\n"));
            }
        }
        Some(f) => {
            let u = if uncommitted { "&uncommitted=true" } else { "" };
            let v = get(ctx, &format!("{one}&file={}{extra}{u}", enc(f)))?;
            if as_json {
                outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else if let Some(s) = v["summary"].as_str() {
                outln!("{}: {}", v["file"].as_str().unwrap_or(f), safe(s, color));
            } else {
                crate::tty::stdout_text(&render_diff(v["text"].as_str().unwrap_or(""), color));
            }
        }
    }
    Ok(())
}

/// Parses a review file: `path:line: text` (new side), `path:-line: text` (old side); other
/// non-comment lines form the summary.
pub(crate) fn parse_review(text: &str) -> (String, Vec<Value>) {
    let mut summary = Vec::new();
    let mut comments = Vec::new();
    for l in text.lines() {
        if l.trim_start().starts_with('#') || l.trim().is_empty() {
            continue;
        }
        let parsed = l.split_once(':').and_then(|(file, rest)| {
            let (num, text) = rest.split_once(':')?;
            let (side, num) = match num.strip_prefix('-') {
                Some(n) => ("old", n),
                None => ("new", num),
            };
            let line: u64 = num.trim().parse().ok()?;
            (!file.contains(' ') && !text.trim().is_empty()).then(
                || json!({"file": file.trim(), "line": line, "side": side, "text": text.trim()}),
            )
        });
        match parsed {
            Some(c) => comments.push(c),
            None => summary.push(l.trim().to_owned()),
        }
    }
    (summary.join("\n"), comments)
}

fn run_tool(var: &str, default: &str, file: &std::path::Path) -> Result<(), Failure> {
    let cmd = std::env::var(var).unwrap_or_else(|_| default.to_owned());
    let st = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{cmd} \"$1\""))
        .arg("sh")
        .arg(file)
        .status()
        .map_err(|e| Failure::Failed(format!("running ${var} ({cmd}): {e}")))?;
    if !st.success() {
        return Err(Failure::Failed(format!("${var} ({cmd}) exited with {st}")));
    }
    Ok(())
}

/// `tuic review SESSION`.
pub(crate) fn review(ctx: &Ctx, session: &str) -> Result<(), Failure> {
    if is_path(session) {
        return Err(Failure::Usage(
            "tuic review takes a session (reviews go to the agent working there)".into(),
        ));
    }
    let (sum, one) = routes(session);
    let v = get(ctx, &sum)?;
    let dir = tempfile_dir()?;
    if crate::tty::stdout_is_tty() {
        let mut all = summary_text(&v);
        for f in v["files"].as_array().into_iter().flatten() {
            let p = f["path"].as_str().unwrap_or("");
            let d = get(ctx, &format!("{one}&file={}", enc(p)))?;
            match d["summary"].as_str() {
                Some(s) => all.push_str(&format!("{p}: {s}\n")),
                None => all.push_str(d["text"].as_str().unwrap_or("")),
            }
        }
        let diff_file = dir.join("changes.diff");
        std::fs::write(&diff_file, safe(&all, true).replace('\u{240a}', "\n"))
            .map_err(|e| Failure::Failed(e.to_string()))?;
        run_tool("PAGER", "less -R", &diff_file)?;
    }
    let file = dir.join("review.txt");
    let mut t = format!(
        "# Review for {session} ({}). One comment per line: `path:line: comment`\n# (`path:-line: comment` for a removed line). Other lines are the summary; # lines are ignored.\n",
        v["delivery"]
            .as_str()
            .map(|d| format!("sent via {d}"))
            .unwrap_or_else(|| "the session is not live".into())
    );
    for f in v["files"].as_array().into_iter().flatten() {
        t.push_str(&format!(
            "#   {} {} +{} -{}\n",
            f["status"].as_str().unwrap_or("?"),
            f["path"].as_str().unwrap_or(""),
            f["added"],
            f["removed"]
        ));
    }
    std::fs::File::create(&file)
        .and_then(|mut f| f.write_all(t.as_bytes()))
        .map_err(|e| Failure::Failed(e.to_string()))?;
    run_tool("EDITOR", "vi", &file)?;
    let text = std::fs::read_to_string(&file).map_err(|e| Failure::Failed(e.to_string()))?;
    let _ = std::fs::remove_dir_all(&dir);
    let (summary, comments) = parse_review(&text);
    if comments.is_empty() && summary.is_empty() {
        outln!("no comments; nothing sent");
        return Ok(());
    }
    let path = format!("/sessions/{}/reviews", enc(session));
    let r = answer(
        &ctx.send(
            &Request::new("POST", &path)
                .json(&json!({"summary": summary, "comments": comments, "send": true})),
        )?,
        &format!("POST {path}"),
    )?;
    outln!(
        "review {} sent via {} ({} comment(s))",
        r["id"].as_str().unwrap_or("?"),
        r["delivered_via"].as_str().unwrap_or("?"),
        comments.len()
    );
    Ok(())
}

fn tempfile_dir() -> Result<std::path::PathBuf, Failure> {
    let d = std::env::temp_dir().join(format!("tuic-review-{}", std::process::id()));
    std::fs::create_dir_all(&d).map_err(|e| Failure::Failed(e.to_string()))?;
    Ok(d)
}

/// `tuic merge TARGET --squash|--ff|--rebase [-m MSG]`.
pub(crate) fn merge(
    ctx: &Ctx,
    target: &str,
    method: &str,
    message: Option<&str>,
) -> Result<(), Failure> {
    let mut body = json!({"method": method});
    if let Some(m) = message {
        body["message"] = json!(m);
    }
    let path = if is_path(target) {
        body["path"] = json!(target);
        "/repo/merge".to_owned()
    } else {
        format!("/sessions/{}/merge", enc(target))
    };
    let v = answer(
        &ctx.send(&Request::new("POST", &path).json(&body))?,
        &format!("POST {path}"),
    )?;
    outln!(
        "landed {} commit(s) of {} on {} by {}: {} → {}",
        v["commits"].as_array().map_or(0, Vec::len),
        v["branch"].as_str().unwrap_or("?"),
        v["default_branch"].as_str().unwrap_or("?"),
        method,
        v["from"].as_str().unwrap_or("").get(..10).unwrap_or(""),
        v["to"].as_str().unwrap_or("").get(..10).unwrap_or("")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_file_parses_positions_and_summary() {
        let (s, c) = parse_review(
            "# header\nOverall fine.\nsrc/a.rs:12: rename this\nb.txt:-3: why removed?\nnot: a: comment\n",
        );
        assert_eq!(s, "Overall fine.\nnot: a: comment");
        assert_eq!(c.len(), 2);
        assert_eq!(c[0]["file"], "src/a.rs");
        assert_eq!(c[0]["line"], 12);
        assert_eq!(c[1]["side"], "old");
    }

    #[test]
    fn colour_only_on_a_terminal_and_escapes_shown() {
        let d = "diff --git a/x b/x\n@@ -1 +1 @@\n-a\n+b\x1b]0;t\x07\n";
        let plain = render_diff(d, false);
        assert_eq!(plain, d);
        let c = render_diff(d, true);
        assert!(c.contains("\x1b[32m+b\u{241b}]0;t\u{2407}\x1b[m"), "{c:?}");
        assert!(c.contains("\x1b[31m-a\x1b[m"));
        assert!(is_path("/x") && is_path("h1:/x") && !is_path("h1/s") && !is_path("tu-3"));
    }
}
