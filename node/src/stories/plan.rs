//! Plan sources: Markdown plan documents under a project's `plans/` and `.claude/plans/`
//! roots. Discovery and title derivation only read files; the records live in the story
//! service's table.

use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

use super::{Actor, StoryError};

/// The roots plan documents are discovered in, relative to the project.
pub const ROOTS: &[&str] = &["plans", ".claude/plans"];

/// Most documents one discovery lists (a bound, not an expectation).
pub const MAX_DISCOVERED: usize = 500;

/// A recorded plan source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSource {
    /// `ps-<n>`.
    pub id: String,
    /// Project-relative path of the document.
    pub path: String,
    /// Derived from the document's first heading (else its file name).
    pub title: String,
    /// Who added it.
    pub added_by: Actor,
    /// When.
    pub added_at_ms: u64,
}

/// A discovered document.
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    /// Project-relative path.
    pub path: String,
    /// Derived title.
    pub title: String,
}

/// The title of a Markdown document: its first `# ` heading, else the file stem.
pub fn title_of(path: &Path, text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("# ").map(str::trim))
        .filter(|t| !t.is_empty())
        .map(|t| t.chars().take(200).collect())
        .unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
}

/// Every Markdown document under the plan roots (recursively, bounded), sorted by path.
pub fn discover(project: &Path) -> Vec<Doc> {
    let mut out = Vec::new();
    for root in ROOTS {
        let mut stack = vec![project.join(root)];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                if out.len() >= MAX_DISCOVERED {
                    break;
                }
                let Ok(ft) = e.file_type() else { continue };
                let p = e.path();
                if ft.is_dir() {
                    stack.push(p);
                } else if ft.is_file() && p.extension().is_some_and(|x| x == "md") {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    if let Ok(rel) = p.strip_prefix(project) {
                        out.push(Doc {
                            path: rel.to_string_lossy().into_owned(),
                            title: title_of(&p, &text),
                        });
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Validates a requested plan document (project-relative or absolute inside the project,
/// under a plan root, a `.md` file) and derives its title.
pub fn resolve(project: &Path, path: &str) -> Result<Doc, StoryError> {
    let p = Path::new(path);
    let rel = if p.is_absolute() {
        p.strip_prefix(project)
            .map_err(|_| {
                StoryError::Invalid(format!(
                    "{path} is not inside the project {}",
                    project.display()
                ))
            })?
            .to_path_buf()
    } else {
        p.to_path_buf()
    };
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(StoryError::Invalid(format!(
            "{path}: a plan path may not contain .. or root components"
        )));
    }
    let rel_s = rel.to_string_lossy().into_owned();
    if !ROOTS.iter().any(|r| rel.starts_with(r)) {
        return Err(StoryError::Invalid(format!(
            "{rel_s} is not under plans/ or .claude/plans/"
        )));
    }
    if rel.extension().is_none_or(|x| x != "md") {
        return Err(StoryError::Invalid(format!(
            "{rel_s} is not a Markdown (.md) document"
        )));
    }
    let full = project.join(&rel);
    let text =
        std::fs::read_to_string(&full).map_err(|e| StoryError::Invalid(format!("{rel_s}: {e}")))?;
    Ok(Doc {
        title: title_of(&full, &text),
        path: rel_s,
    })
}
