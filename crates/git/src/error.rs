//! Errors of git operations, with their exit-code class and what the user can do about them.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{}: git {args}: {message}", dir.display())]
    Command {
        /// The directory git ran in (the repository).
        dir: PathBuf,
        args: String,
        message: String,
    },
    #[error("cannot run git: {0}")]
    Spawn(std::io::Error),
    #[error("{path}: the repository has no commits yet; commit something first, or create the box with --no-git to copy the directory as it is")]
    NoCommits { path: PathBuf },
    #[error("{}: no remote {remote:?}", repo.display())]
    NoRemote { repo: PathBuf, remote: String },
    #[error("{}: cannot make branch {branch:?} (not a valid branch name)", repo.display())]
    BadBranch { repo: PathBuf, branch: String },
    #[error("{}: {start} is not a commit", repo.display())]
    NoSuchRef { repo: PathBuf, start: String },
    #[error("{}: pushing {branch} to {remote} failed: {message}", repo.display())]
    Push {
        repo: PathBuf,
        remote: String,
        branch: String,
        message: String,
    },
    #[error("{}: fetching {branch} from {remote} failed: {message}", repo.display())]
    Fetch {
        repo: PathBuf,
        remote: String,
        branch: String,
        message: String,
    },
    #[error("{}: refused box {:?}'s tip {}: it carries commit {}, which the box did not make ({})", .0.repo.display(), .0.box_name, .0.tip, .0.commit, .0.reached_by)]
    ForeignCommit(Box<Foreign>),
    #[error("{}: shipping box {box_name:?}'s repository: {what}: {message}", repo.display())]
    Ship {
        repo: PathBuf,
        box_name: String,
        /// The step that failed (`fetch into the stage`, `pack the files`, ...).
        what: String,
        message: String,
    },
    #[error(transparent)]
    Store(#[from] agentbox_store::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl GitError {
    /// The exit-code class of the error (see [`agentbox_core::exit::ExitCode`]).
    pub fn exit_code(&self) -> i32 {
        use agentbox_core::exit::ExitCode;
        match self {
            GitError::Store(s) => s.exit_code(),
            GitError::NoCommits { .. }
            | GitError::BadBranch { .. }
            | GitError::ForeignCommit(_) => ExitCode::Refused.into(),
            GitError::NoRemote { .. } | GitError::NoSuchRef { .. } => ExitCode::NotFound.into(),
            GitError::Io(_)
            | GitError::Spawn(_)
            | GitError::Push { .. }
            | GitError::Fetch { .. }
            | GitError::Ship { .. }
            | GitError::Command { .. } => ExitCode::Failure.into(),
        }
    }

    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            GitError::Store(s) => s.hint().map(str::to_owned),
            GitError::NoRemote { repo, remote } => Some(format!(
                "add it on the host (`git -C {} remote add {remote} URL`) or name another with --remote",
                repo.display()
            )),
            GitError::BadBranch { .. } => {
                Some("choose a box name git accepts in a branch name".to_owned())
            }
            GitError::NoSuchRef { repo, .. } => Some(format!(
                "`git -C {} branch -a` lists its branches",
                repo.display()
            )),
            GitError::Push { .. } => Some(
                "a rejected push that is not a fast-forward can be forced with --force".to_owned(),
            ),
            GitError::Fetch { remote, .. } => Some(format!(
                "check that {remote} has that branch, or name one with --branch"
            )),
            GitError::ForeignCommit(f) => Some(format!(
                "a box's branch may carry only commits made in box {:?} on top of its base; reset the box's branch (`git reset` inside the box) to drop the others",
                f.box_name
            )),
            GitError::Io(_)
            | GitError::Spawn(_)
            | GitError::NoCommits { .. }
            | GitError::Ship { .. }
            | GitError::Command { .. } => None,
        }
    }
}

/// A box's tip refused by [`crate::check_box_tip`]: it carries a commit of the user's.
#[derive(Debug)]
pub struct Foreign {
    pub repo: PathBuf,
    pub box_name: String,
    pub tip: String,
    pub commit: String,
    /// The host refs that already reach the commit, for the message.
    pub reached_by: String,
}

pub type Result<T, E = GitError> = std::result::Result<T, E>;
