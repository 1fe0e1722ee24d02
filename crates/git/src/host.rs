//! The host's repositories: which directory is one (or a monorepo of them) and which
//! branch a box of it starts on.

use std::path::{Path, PathBuf};

use crate::run::git;
use crate::{GitError, Result};

/// A repository on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRepo {
    /// The top of its working tree.
    pub root: PathBuf,
    /// Its object directory (the common one, for a linked worktree).
    pub objects: PathBuf,
}

impl HostRepo {
    /// The repository's (common) git directory: refs, config, hooks and objects. For a
    /// linked worktree or a submodule it lies outside the working tree.
    pub fn git_dir(&self) -> &Path {
        self.objects.parent().unwrap_or(&self.objects)
    }
}

/// The repository whose working tree's top is exactly `dir`, if there is one.
pub fn detect(dir: &Path) -> Result<Option<HostRepo>> {
    // One process answers both (each git process costs milliseconds; create runs several).
    let Ok(out) = git(
        dir,
        &[
            "rev-parse",
            "--show-toplevel",
            "--path-format=absolute",
            "--git-common-dir",
        ],
    ) else {
        return Ok(None);
    };
    let mut lines = out.lines();
    let (Some(top), Some(common)) = (lines.next(), lines.next()) else {
        return Ok(None);
    };
    let dir = fs_err::canonicalize(dir)?;
    if fs_err::canonicalize(top)? != dir {
        return Ok(None);
    }
    Ok(Some(HostRepo {
        root: dir,
        objects: PathBuf::from(common).join("objects"),
    }))
}

/// The first-level sub-directories of `dir` that are repositories of their own (they hold
/// `.git` — a directory, or a file for a linked worktree or a submodule — and are the top
/// of their working tree), by name. Symbolic links are not followed: a sub-repository is
/// a real directory of the project.
pub fn sub_repos(dir: &Path) -> Result<Vec<(String, HostRepo)>> {
    let mut out = Vec::new();
    for entry in fs_err::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let path = entry.path();
        if std::fs::symlink_metadata(path.join(".git")).is_err() {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Some(repo) = detect(&path)? {
            out.push((name, repo));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The first free branch name for box `name`: `agentbox/<name>`, then `-2`, `-3`, …
/// (`name` may be `<box>--<sub>` for a sub-repository).
pub fn pick_branch(repo: &HostRepo, name: &str) -> Result<String> {
    let first = format!("agentbox/{name}");
    if git(&repo.root, &["check-ref-format", "--branch", &first]).is_err() {
        return Err(GitError::BadBranch {
            repo: repo.root.clone(),
            branch: first,
        });
    }
    for n in 1.. {
        let branch = if n == 1 {
            first.clone()
        } else {
            format!("agentbox/{name}-{n}")
        };
        let exists = git(
            &repo.root,
            &[
                "show-ref",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
        )
        .is_ok();
        if !exists {
            return Ok(branch);
        }
    }
    unreachable!("an unbounded search returns")
}
