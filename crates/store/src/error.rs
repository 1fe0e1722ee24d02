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
    #[error("invalid path pattern {pattern:?}: {reason}")]
    InvalidPattern { pattern: String, reason: String },
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
    /// The filesystem is full (ENOSPC) or the user's quota is exhausted (EDQUOT). Kept apart
    /// from [`Error::Bundle`] so a full disk during an import is never blamed on the archive.
    #[error("no space left on device: {path} ({detail})")]
    NoSpace { path: PathBuf, detail: String },
    /// An import stopped because the archive expands past the decompressed-size limit
    /// (a decompression bomb, or a bundle larger than the limit allows).
    #[error("bundle {path}: {message}")]
    TooLarge { path: PathBuf, message: String },
    /// A disk limit cannot be set or read here (see `crate::disk`).
    #[error("cannot limit the disk of a box: {path}: {reason}")]
    DiskLimit { path: PathBuf, reason: String },
    /// The tree of node `node` is held by provider `by` outside the store (see
    /// `crate::held`): the store cannot read or make it.
    #[error("the tree of node {node} is held by the {by} provider, not by the store")]
    Held { node: String, by: String },
}

/// True when `e` is ENOSPC or EDQUOT (by raw errno or by kind, which `fs_err` keeps).
pub fn io_is_no_space(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(e.kind(), ErrorKind::StorageFull | ErrorKind::QuotaExceeded)
        || e.raw_os_error().is_some_and(|n| {
            n == rustix::io::Errno::NOSPC.raw_os_error()
                || n == rustix::io::Errno::DQUOT.raw_os_error()
        })
}

/// True when `e`, or any error it wraps, is ENOSPC or EDQUOT.
pub fn is_no_space(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io_is_no_space(io) {
                return true;
            }
            // `fs_err` wraps the OS error as a custom payload: look inside it too.
            if let Some(inner) = io.get_ref() {
                if is_no_space(inner) {
                    return true;
                }
            }
        }
        if let Some(store) = err.downcast_ref::<Error>() {
            if store.is_no_space() {
                return true;
            }
        }
        if let Some(agentbox_core::Error::Io(io)) = err.downcast_ref::<agentbox_core::Error>() {
            if io_is_no_space(io) {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

impl Error {
    /// True for a full filesystem or an exhausted quota, however it is wrapped. (Transparent
    /// variants skip their inner error in `source()`, so they are matched here directly.)
    pub fn is_no_space(&self) -> bool {
        match self {
            Error::NoSpace { .. } => true,
            Error::Io(e) | Error::Core(agentbox_core::Error::Io(e)) => {
                io_is_no_space(e) || e.get_ref().is_some_and(|inner| is_no_space(inner))
            }
            _ => false,
        }
    }

    /// This error, turned into [`Error::NoSpace`] at `path` when it is a full filesystem or
    /// quota (the path named by the underlying message is kept in the detail).
    pub fn or_no_space(self, path: &std::path::Path) -> Error {
        if self.is_no_space() && !matches!(self, Error::NoSpace { .. }) {
            Error::NoSpace {
                path: path.to_owned(),
                detail: self.to_string(),
            }
        } else {
            self
        }
    }

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
            Error::NoSpace { .. } => Some(
                "free space on that filesystem (or raise the quota) and retry; `agentbox gc` and `agentbox prune` free store space; nothing half-written was kept",
            ),
            Error::TooLarge { .. } => Some(
                "nothing was imported; if you trust the bundle, raise the limit with `--max-size SIZE` (or AGENTBOX_IMPORT_MAX_SIZE)",
            ),
            Error::Held { .. } => Some(
                "act on the box through agentbox's box commands, which ask its provider",
            ),
            Error::DiskLimit { .. } => Some(
                "create the box without --disk (it then has no disk limit), or keep the store on a filesystem with quotas",
            ),
            Error::Core(agentbox_core::Error::Locked { .. }) => {
                Some("wait for that process to finish, or stop it")
            }
            _ => None,
        }
    }

    /// The stable exit-code class of the error (the CLI's table): 3 not found, 4 refused or
    /// conflicting, 5 locked, 6 needs root, 7 inconsistent store, 8 bad bundle (also one over the size limit),
    /// 1 other (a full disk among them: it is not the input's fault). See
    /// [`agentbox_core::exit::ExitCode`].
    pub fn exit_code(&self) -> i32 {
        use agentbox_core::exit::ExitCode;
        match self {
            Error::UnknownEnv { .. } | Error::UnknownRef { .. } | Error::NoStore { .. } => {
                ExitCode::NotFound.into()
            }
            Error::EnvExists { .. }
            | Error::AmbiguousRef { .. }
            | Error::InvalidName { .. }
            | Error::InvalidPattern { .. }
            | Error::Refused { .. }
            | Error::Held { .. } => ExitCode::Refused.into(),
            Error::Core(agentbox_core::Error::Locked { .. }) => ExitCode::Locked.into(),
            Error::NeedsRoot { .. } => ExitCode::NeedsRoot.into(),
            Error::Corrupt { .. } => ExitCode::Inconsistent.into(),
            Error::Bundle { .. } | Error::TooLarge { .. } => ExitCode::BadBundle.into(),
            Error::NoSpace { .. } => ExitCode::Failure.into(),
            _ => ExitCode::Failure.into(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn os(errno: rustix::io::Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(errno.raw_os_error())
    }

    #[test]
    fn a_full_disk_is_recognised_however_it_is_wrapped() {
        for errno in [rustix::io::Errno::NOSPC, rustix::io::Errno::DQUOT] {
            assert!(Error::Io(os(errno)).is_no_space());
            assert!(Error::Core(agentbox_core::Error::Io(os(errno))).is_no_space());
            // As `fs_err` wraps it: the path in the message, the OS error inside.
            let wrapped = std::io::Error::new(os(errno).kind(), os(errno));
            assert!(Error::Io(wrapped).is_no_space());
            let e = Error::Io(os(errno)).or_no_space(std::path::Path::new("/store"));
            assert!(
                e.to_string().starts_with("no space left on device: /store"),
                "{e}"
            );
            assert_eq!(e.exit_code(), 1);
            assert!(e.hint().is_some_and(|h| h.contains("free space")));
        }
        assert!(!Error::Io(os(rustix::io::Errno::IO)).is_no_space());
        let e = Error::Io(os(rustix::io::Errno::IO)).or_no_space(std::path::Path::new("/s"));
        assert!(matches!(e, Error::Io(_)));
    }
}
