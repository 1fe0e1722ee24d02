//! Errors of the store. Every variant names the environment, ref or path involved.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Core(#[from] agentbox_core::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("no store at {path}")]
    NoStore { path: PathBuf },
    #[error("environment {name:?} does not exist")]
    UnknownEnv { name: String },
    #[error("environment {name:?} already exists")]
    EnvExists { name: String },
    #[error("invalid name {name:?}: {reason}")]
    InvalidName { name: String, reason: String },
    #[error("no node or tag matches {reference:?}")]
    UnknownRef { reference: String },
    #[error("{reference:?} is ambiguous: it matches {candidates:?}")]
    AmbiguousRef {
        reference: String,
        candidates: Vec<String>,
    },
    #[error("refusing to {action} node {id}: {reason}")]
    Refused {
        action: &'static str,
        id: String,
        reason: String,
    },
    #[error("{path}: {message}")]
    Backend { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("bundle {path}: {message}")]
    Bundle { path: PathBuf, message: String },
    #[error("{operation} needs root: {reason}")]
    NeedsRoot { operation: String, reason: String },
}

impl Error {
    /// What the user can do about it, when there is something to say.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            Error::UnknownEnv { .. } => Some("`agentbox list` shows the boxes and environments"),
            Error::UnknownRef { .. } => Some(
                "`agentbox log` shows node ids and tags; refs are HEAD, HEAD~N, a tag, an id or a unique id prefix of 4+ characters",
            ),
            Error::NoStore { .. } => Some(
                "create a box with `agentbox create` inside a project (or `agentbox create NAME -C DIR`) (or version a directory with `agentbox env DIR`)",
            ),
            Error::EnvExists { .. } => Some("choose another name, or `agentbox destroy NAME` first"),
            Error::AmbiguousRef { .. } => Some("give more characters of the id"),
            Error::NeedsRoot { .. } => Some("run it with sudo"),
            Error::Corrupt { .. } => Some("run `agentbox fsck --repair`"),
            Error::Bundle { .. } => Some(
                "the archive was not written by `agentbox export` or is damaged; nothing was imported",
            ),
            Error::Core(agentbox_core::Error::Locked { .. }) => {
                Some("wait for that process to finish, or stop it")
            }
            _ => None,
        }
    }

    /// The stable exit-code class of the error (the CLI's table): 3 not found, 4 refused or
    /// conflicting, 5 locked, 6 needs root, 7 inconsistent store, 8 bad bundle, 1 other.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::UnknownEnv { .. } | Error::UnknownRef { .. } | Error::NoStore { .. } => 3,
            Error::EnvExists { .. }
            | Error::AmbiguousRef { .. }
            | Error::InvalidName { .. }
            | Error::Refused { .. } => 4,
            Error::Core(agentbox_core::Error::Locked { .. }) => 5,
            Error::NeedsRoot { .. } => 6,
            Error::Corrupt { .. } => 7,
            Error::Bundle { .. } => 8,
            _ => 1,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
