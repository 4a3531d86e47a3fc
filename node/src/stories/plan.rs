//! Plan sources: Markdown plan documents under a project's `plans/` and `.claude/plans/`
//! roots. Discovery and title derivation only read files, beneath the project's root
//! (`beneath.rs`: a symlinked `plans/` leading out of the project is not read); the records
//! live in the story service's table.

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
/// Read beneath the project: a symlink out of it is skipped, and symlinks are not walked.
pub fn discover(project: &Path) -> Vec<Doc> {
    let mut out = Vec::new();
    let Ok(top) = crate::beneath::open_root(project) else {
        return out;
    };
    for root in ROOTS {
        let Ok(dir) = top.open_dir(root) else {
            continue;
        };
        let mut stack = vec![(dir, Path::new(root).to_path_buf())];
        while let Some((dir, rel_dir)) = stack.pop() {
            let Ok(rd) = dir.entries() else {
                continue;
            };
            for e in rd.flatten() {
                if out.len() >= MAX_DISCOVERED {
                    break;
                }
                let Ok(ft) = e.file_type() else { continue };
                let name = e.file_name();
                let rel = rel_dir.join(&name);
                if ft.is_dir() {
                    if let Ok(sub) = dir.open_dir(&name) {
                        stack.push((sub, rel));
                    }
                } else if ft.is_file() && rel.extension().is_some_and(|x| x == "md") {
                    let text = dir.read_to_string(&name).unwrap_or_default();
                    out.push(Doc {
                        path: rel.to_string_lossy().into_owned(),
                        title: title_of(&rel, &text),
                    });
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
    let text = crate::beneath::open_root(project)
        .and_then(|dir| dir.read_to_string(&rel))
        .map_err(|e| StoryError::Invalid(format!("{rel_s}: {e}")))?;
    Ok(Doc {
        title: title_of(&rel, &text),
        path: rel_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `plans/` that is a symlink out of the project is neither discovered nor read; one that
    /// stays inside is (issue 40, finding 2).
    #[test]
    fn plans_are_read_beneath_the_project() {
        let p = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let project = p.path().canonicalize().unwrap();
        std::fs::write(out.path().join("secret.md"), "# Outside title\n").unwrap();
        std::os::unix::fs::symlink(out.path(), project.join("plans")).unwrap();
        assert!(discover(&project).is_empty());
        let e = resolve(&project, "plans/secret.md").unwrap_err();
        assert!(!format!("{e:?}").contains("Outside title"), "{e:?}");

        std::fs::remove_file(project.join("plans")).unwrap();
        std::fs::create_dir_all(project.join("docs")).unwrap();
        std::fs::write(project.join("docs/p.md"), "# Inside\n").unwrap();
        std::os::unix::fs::symlink("docs", project.join("plans")).unwrap();
        let found = discover(&project);
        assert_eq!(
            found,
            vec![Doc {
                path: "plans/p.md".into(),
                title: "Inside".into()
            }]
        );
        assert_eq!(resolve(&project, "plans/p.md").unwrap().title, "Inside");
    }
}
