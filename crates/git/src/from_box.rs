//! Taking a box's branch into its host repository from what the box sent.
//!
//! The host never runs git on a box's repository: its configuration, refs and alternates are
//! the box's to write, and git run on it would execute what they name with the host's
//! privileges. The box produces data inside itself (an object id, a git bundle); the
//! functions here check that data for form and let the host's own git, in the user's own
//! repository, take it — the box's branch only, every incoming object verified.

use std::path::Path;

use crate::{git, git_with, GitError, Result};

/// Whether `s` is a full object id (SHA-1 or SHA-256, lowercase hex), the only form a box's
/// answer may take before it reaches a host git command line.
pub fn is_object_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether the host repository at `repo_root` has commit `id` (and so, having got it by a
/// fetch or made it itself, its history).
pub fn has_commit(repo_root: &Path, id: &str) -> bool {
    is_object_id(id) && git(repo_root, &["cat-file", "-e", &format!("{id}^{{commit}}")]).is_ok()
}

/// Refuse anything but a box branch (`agentbox/…`): nothing else of the host repository is
/// ever written from a box.
fn box_branch_only(repo_root: &Path, branch: &str) -> Result<()> {
    if branch.starts_with("agentbox/") {
        return Ok(());
    }
    Err(GitError::Command {
        dir: repo_root.to_owned(),
        args: format!("fetch {branch}"),
        message: "only agentbox/ branches are synced into the host repository".into(),
    })
}

/// Move the host repository's `refs/heads/<branch>` to commit `id`, which it already has
/// (a rollback in the box, or a branch reset onto a host commit). Refused while the branch
/// is checked out in one of the host's worktrees, like any fetch into it.
pub fn set_box_branch(repo_root: &Path, branch: &str, id: &str) -> Result<()> {
    box_branch_only(repo_root, branch)?;
    if !is_object_id(id) {
        return Err(GitError::Command {
            dir: repo_root.to_owned(),
            args: format!("fetch {branch}"),
            message: format!("the box reported {id:?}, which is not a commit id"),
        });
    }
    fetch_into_branch(
        repo_root,
        ".",
        &format!("+{id}:refs/heads/{branch}"),
        branch,
    )
}

/// Take box branch `branch` at commit `tip` from the git bundle at `bundle` (made inside the
/// box) into the host repository at `repo_root`. The bundle must carry exactly that branch
/// at that tip; its objects are checked as they arrive (`fetch.fsckObjects`), so a malformed
/// object never enters the user's repository.
pub fn take_bundle(repo_root: &Path, bundle: &Path, branch: &str, tip: &str) -> Result<()> {
    box_branch_only(repo_root, branch)?;
    let refused = |message: String| GitError::Command {
        dir: repo_root.to_owned(),
        args: format!("fetch {branch}"),
        message,
    };
    let src = bundle
        .to_str()
        .ok_or_else(|| refused(format!("{} is not UTF-8", bundle.display())))?;
    let heads = git(repo_root, &["bundle", "list-heads", src])
        .map_err(|e| refused(format!("the box sent a damaged bundle: {e}")))?;
    let want = format!("{tip} refs/heads/{branch}");
    if heads.lines().collect::<Vec<_>>() != [want.as_str()] {
        return Err(refused(format!(
            "the box's bundle must hold refs/heads/{branch} at {tip} and nothing else; it holds: {}",
            heads.lines().collect::<Vec<_>>().join(", ")
        )));
    }
    fetch_into_branch(
        repo_root,
        src,
        &format!("+refs/heads/{branch}:refs/heads/{branch}"),
        branch,
    )
}

/// `git fetch SRC SPEC` into the host repository: no tags, no `FETCH_HEAD`, every received
/// object verified, the reflog naming agentbox.
fn fetch_into_branch(repo_root: &Path, src: &str, spec: &str, branch: &str) -> Result<()> {
    let action = format!("agentbox sync {branch}");
    git_with(
        repo_root,
        &[
            "-c",
            "fetch.fsckObjects=true",
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            src,
            spec,
        ],
        &[("GIT_REFLOG_ACTION", Path::new(&action))],
    )
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_ids() {
        assert!(is_object_id(&"a".repeat(40)));
        assert!(is_object_id(&"0123456789abcdef".repeat(4)));
        assert!(!is_object_id(&"A".repeat(40)));
        assert!(!is_object_id("HEAD"));
        assert!(!is_object_id(&format!("--upload-pack={}", "a".repeat(26))));
        assert!(!is_object_id(&"a".repeat(41)));
    }
}
