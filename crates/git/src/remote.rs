//! A box's branches and the host's remotes: which remote a box branch goes to, pushing it,
//! fetching its upstream for a merge in the box, and reading a branch's tip.

use std::path::Path;

use crate::run::{command_message, git, git_with};
use crate::{GitError, HostRepo, Result};

/// The remote a push or pull of `repo` talks to: `explicit` when given, else the remote
/// `source_branch` tracks (`branch.<b>.remote`), else `origin`. It must exist.
pub fn remote_for(
    repo: &HostRepo,
    explicit: Option<&str>,
    source_branch: Option<&str>,
) -> Result<String> {
    let remote = match explicit {
        Some(r) => r.to_owned(),
        None => source_branch
            .and_then(|b| {
                git(
                    &repo.root,
                    &["config", "--get", &format!("branch.{b}.remote")],
                )
                .ok()
            })
            .filter(|r| !r.is_empty() && r != ".")
            .unwrap_or_else(|| "origin".to_owned()),
    };
    if git(&repo.root, &["remote", "get-url", &remote]).is_err() {
        return Err(GitError::NoRemote {
            repo: repo.root.clone(),
            remote,
        });
    }
    Ok(remote)
}

/// The branch of the remote that `source_branch` tracks (`branch.<b>.merge`, without
/// `refs/heads/`), else `source_branch` itself.
pub fn upstream_branch(repo: &HostRepo, source_branch: &str) -> String {
    git(
        &repo.root,
        &["config", "--get", &format!("branch.{source_branch}.merge")],
    )
    .ok()
    .map(|m| m.trim_start_matches("refs/heads/").to_owned())
    .filter(|m| !m.is_empty())
    .unwrap_or_else(|| source_branch.to_owned())
}

/// `git push REMOTE refs/heads/<branch>:refs/heads/<branch>` from the host repository,
/// with the user's own configuration and credentials (prompts disabled).
pub fn push(repo: &HostRepo, remote: &str, branch: &str, force: bool) -> Result<()> {
    let spec = format!(
        "{}refs/heads/{branch}:refs/heads/{branch}",
        if force { "+" } else { "" }
    );
    git(&repo.root, &["push", "--quiet", remote, &spec]).map_err(|e| GitError::Push {
        repo: repo.root.clone(),
        remote: remote.to_owned(),
        branch: branch.to_owned(),
        message: command_message(e),
    })?;
    Ok(())
}

/// Fetch `branch` of `remote` into the host repository as `refs/agentbox/<name>/fetched`
/// (the host's own refs, remote-tracking ones included, and `FETCH_HEAD` stay as they are;
/// the ref keeps the fetched commits alive until the box goes) and return its commit.
pub fn fetch(repo: &HostRepo, name: &str, remote: &str, branch: &str) -> Result<String> {
    let into = format!("refs/agentbox/{name}/fetched");
    let fail = |message: String| GitError::Fetch {
        repo: repo.root.clone(),
        remote: remote.to_owned(),
        branch: branch.to_owned(),
        message,
    };
    git(
        &repo.root,
        &[
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            // No opportunistic update of the remote-tracking branch either.
            "--refmap=",
            remote,
            &format!("+refs/heads/{branch}:{into}"),
        ],
    )
    .map_err(|e| fail(command_message(e)))?;
    git(
        &repo.root,
        &["rev-parse", "--verify", &format!("{into}^{{commit}}")],
    )
    .map_err(|e| fail(command_message(e)))
}

/// One ref of a remote as the host fetched it for a box.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemoteRef {
    /// `refs/heads/<branch>` as the remote has it.
    pub name: String,
    pub id: String,
}

/// Fetch every branch of `remote` into host repository `repo` under
/// `refs/agentbox/<name>/remote/` (so the objects are in the host's object store, which the
/// box borrows), and list them as the remote names them. Runs with the host user's git
/// configuration and credentials; nothing of the box reaches the command line.
pub fn fetch_all(repo: &HostRepo, name: &str, remote: &str) -> Result<Vec<RemoteRef>> {
    let prefix = format!("refs/agentbox/{name}/remote/");
    git(
        &repo.root,
        &[
            "fetch",
            "--quiet",
            "--no-tags",
            "--prune",
            "--no-write-fetch-head",
            "--refmap=",
            remote,
            &format!("+refs/heads/*:{prefix}*"),
        ],
    )
    .map_err(|e| GitError::Fetch {
        repo: repo.root.clone(),
        remote: remote.to_owned(),
        branch: "*".to_owned(),
        message: command_message(e),
    })?;
    let listed = git(
        &repo.root,
        &["for-each-ref", "--format=%(objectname) %(refname)", &prefix],
    )?;
    Ok(listed
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(id, r)| {
            r.strip_prefix(&prefix).map(|b| RemoteRef {
                name: format!("refs/heads/{b}"),
                id: id.to_owned(),
            })
        })
        .collect())
}

/// The tip of `branch` in the host repository at `repo_root` (`None` when it has no such
/// branch). `objects` is the repository's object directory, given explicitly so a linked
/// worktree's common objects are found.
pub fn branch_tip(repo_root: &Path, branch: &str, objects: &Path) -> Result<Option<String>> {
    match git_with(
        repo_root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}^{{commit}}"),
        ],
        &[("GIT_ALTERNATE_OBJECT_DIRECTORIES", objects)],
    ) {
        Ok(tip) if !tip.is_empty() => Ok(Some(tip)),
        _ => Ok(None),
    }
}
