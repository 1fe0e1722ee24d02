//! Reading and removing the host's box refs: base pins, branches, how far a box branch is
//! from the host's, and the paths `git status` reports.

use std::path::Path;

use crate::{git, Result};

/// Delete branch `branch` of the host repository at `repo_root` (`git branch -D`: refused
/// while it is checked out in one of the host's worktrees).
pub fn delete_branch(repo_root: &Path, branch: &str) -> Result<()> {
    git(repo_root, &["branch", "-D", "--", branch]).map(|_| ())
}

/// The refs boxes keep in the host repository at `repo_root` (base pins, fetched heads):
/// `(box name, ref name)` for every `refs/agentbox/<box>/…`.
pub fn pins(repo_root: &Path) -> Result<Vec<(String, String)>> {
    let out = git(
        repo_root,
        &["for-each-ref", "--format=%(refname)", "refs/agentbox/"],
    )?;
    Ok(out
        .lines()
        .filter_map(|r| {
            let (name, _) = r.strip_prefix("refs/agentbox/")?.split_once('/')?;
            Some((name.to_owned(), r.to_owned()))
        })
        .collect())
}

/// Delete ref `refname` of the host repository at `repo_root`.
pub fn delete_ref(repo_root: &Path, refname: &str) -> Result<()> {
    git(repo_root, &["update-ref", "-d", refname]).map(|_| ())
}

/// The branch checked out in the host repository at `repo_root` (`None`: detached HEAD).
pub fn current_branch(repo_root: &Path) -> Result<Option<String>> {
    Ok(git(repo_root, &["symbolic-ref", "--quiet", "--short", "HEAD"]).ok())
}

/// `(ahead, behind)`: commits of `branch` not in `against`, and of `against` not in
/// `branch`, in the host repository at `repo_root`.
pub fn ahead_behind(repo_root: &Path, branch: &str, against: &str) -> Result<(u64, u64)> {
    let out = git(
        repo_root,
        &[
            "rev-list",
            "--left-right",
            "--count",
            &format!("{branch}...{against}"),
            "--",
        ],
    )?;
    let mut it = out
        .split_whitespace()
        .map(|n| n.parse::<u64>().unwrap_or(0));
    Ok((it.next().unwrap_or(0), it.next().unwrap_or(0)))
}

/// The paths of `git status --porcelain=v1 -z` output (a rename's source, which follows its
/// entry as a field of its own, is left out).
pub fn porcelain_paths(out: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut fields = out.split('\0');
    while let Some(entry) = fields.next() {
        if entry.len() <= 3 {
            continue;
        }
        if entry.starts_with('R') || entry.starts_with('C') {
            fields.next();
        }
        paths.push(entry[3..].to_owned());
    }
    paths
}
