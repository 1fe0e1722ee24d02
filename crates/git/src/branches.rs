//! Reading and removing the host's box refs: base pins, branches, how far a box branch is
//! from the host's, and the paths `git status` reports.

use std::path::Path;

use crate::run::{git, git_stdin};
use crate::{GitError, Result};

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

/// Give box `to` what box `from` keeps alive in the host repository at `repo_root`, and
/// claim `to`'s branch there — in one transaction, so either all of it is written or none:
///
/// * `refs/agentbox/<to>/base` at `base` (the commit `to` builds on);
/// * a copy of every other `refs/agentbox/<from>/…` (the carried-over work and fetched
///   heads `from`'s repository refers to, which `to`'s repository refers to as well: a
///   fork's history is `from`'s up to the node it was made at);
/// * `refs/heads/<branch>` at `base`, which must not exist yet (the box's sync moves it).
///
/// Refused, with nothing written, when any of `to`'s refs or the branch exists already.
pub fn fork_refs(repo_root: &Path, from: &str, to: &str, branch: &str, base: &str) -> Result<()> {
    if !crate::is_object_id(base) {
        return Err(GitError::NoSuchRef {
            repo: repo_root.to_owned(),
            start: base.to_owned(),
        });
    }
    let mut tx = format!(
        "start\ncreate refs/agentbox/{to}/base {base}\ncreate refs/heads/{branch} {base}\n"
    );
    let prefix = format!("refs/agentbox/{from}/");
    let kept = git(
        repo_root,
        &["for-each-ref", "--format=%(objectname) %(refname)", &prefix],
    )?;
    for (id, refname) in kept.lines().filter_map(|l| l.split_once(' ')) {
        match refname.strip_prefix(&prefix) {
            Some(rest) if rest != "base" => {
                tx.push_str(&format!("create refs/agentbox/{to}/{rest} {id}\n"))
            }
            _ => {}
        }
    }
    tx.push_str("prepare\ncommit\n");
    git_stdin(repo_root, &["update-ref", "--stdin"], &tx).map(|_| ())
}

/// Let box `to`, forked from the box whose branch is `from_branch`, keep what that branch has
/// in the host repository at `repo_root` as its own (`refs/agentbox/<to>/inherited`): the
/// fork's history is its source's up to the fork, and a sync of it must not take those
/// commits for the user's (see [`crate::check_box_tip`]) where the user has merged them.
/// Nothing is written when the source has no such branch.
pub fn inherit(repo_root: &Path, to: &str, from_branch: &str) -> Result<()> {
    let Ok(tip) = git(
        repo_root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{from_branch}^{{commit}}"),
        ],
    ) else {
        return Ok(());
    };
    git(
        repo_root,
        &["update-ref", &format!("refs/agentbox/{to}/inherited"), &tip],
    )
    .map(|_| ())
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
