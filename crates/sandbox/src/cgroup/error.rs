//! Errors of cgroup setup and control, each naming the file or controller involved and
//! what to do about it.

use super::*;

/// Errors of cgroup management. Each variant names the path involved and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No cgroup could be made, and none was strictly needed (no limits were requested). A
    /// caller may treat this as "run the box without a cgroup". [`BoxCgroup::create`] returns
    /// it only for empty limits.
    #[error("no usable cgroup at {path}: {reason}")]
    Unavailable { path: PathBuf, reason: String },
    /// Limits were requested but no cgroup can be made for them.
    #[error(
        "cannot apply the resource limits ({limits}): {reason} ({path}); run agentbox as root, \
         or delegate a cgroup to this user and set {PARENT_ENV} to its path relative to the \
         cgroup root"
    )]
    CannotLimit {
        path: PathBuf,
        reason: String,
        limits: String,
    },
    /// A controller needed for `needed_for` is missing.
    #[error("the {controller} cgroup controller is not available at {path} (needed for {needed_for}): {hint}")]
    ControllerMissing {
        controller: &'static str,
        needed_for: &'static str,
        path: PathBuf,
        hint: String,
    },
    /// A limit value that cannot be applied.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidLimit {
        what: &'static str,
        value: String,
        reason: String,
    },
    /// A box name that cannot be a cgroup directory name.
    #[error("invalid box cgroup name {name:?}: {reason}")]
    InvalidName { name: String, reason: String },
    /// `$AGENTBOX_CGROUP_PARENT` is unusable.
    #[error("{PARENT_ENV}={value:?} ({path}): {reason}")]
    InvalidParent {
        value: String,
        path: PathBuf,
        reason: String,
    },
    /// An IO operation on a cgroup file failed; `source` (from `fs_err`) names the file.
    #[error("{what}: {source}{}", hint_suffix(.hint))]
    Io {
        what: String,
        path: PathBuf,
        #[source]
        source: io::Error,
        hint: String,
    },
    /// Processes survived every round of SIGKILL.
    #[error(
        "processes {pids:?} are still in {path} after {rounds} rounds of SIGKILL; they are \
         probably stuck in uninterruptible IO (state D in /proc/PID/status): retry once that IO \
         completes"
    )]
    NotEmpty {
        path: PathBuf,
        pids: Vec<u32>,
        rounds: u32,
    },
    /// The calling process is inside the cgroup it was asked to kill.
    #[error("refusing to kill every process in {path}: this process ({pid}) is one of them; kill the box from a process outside it")]
    ContainsSelf { path: PathBuf, pid: u32 },
}

pub(super) fn hint_suffix(hint: &str) -> String {
    if hint.is_empty() {
        String::new()
    } else {
        format!(" ({hint})")
    }
}

impl CgroupError {
    /// True for [`CgroupError::Unavailable`]: the box can run without a cgroup.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, CgroupError::Unavailable { .. })
    }

    pub(super) fn io(what: impl Into<String>, path: &Path, source: io::Error) -> Self {
        CgroupError::Io {
            what: what.into(),
            path: path.to_owned(),
            source,
            hint: String::new(),
        }
    }

    pub(super) fn io_hint(
        what: impl Into<String>,
        path: &Path,
        source: io::Error,
        hint: String,
    ) -> Self {
        CgroupError::Io {
            what: what.into(),
            path: path.to_owned(),
            source,
            hint,
        }
    }
}

/// The error for "a cgroup directory cannot be created here". Invariant: `Unavailable` only when
/// no limit was requested, so a caller may always treat `Unavailable` as "no cgroup".
pub(super) fn cannot_create(limits: &Limits, path: &Path, reason: String) -> CgroupError {
    if limits.is_empty() {
        CgroupError::Unavailable {
            path: path.to_owned(),
            reason: format!(
                "{reason}; the box runs without a cgroup (to give it one: run agentbox as root, \
                 or delegate a cgroup to this user and set {PARENT_ENV})"
            ),
        }
    } else {
        CgroupError::CannotLimit {
            path: path.to_owned(),
            reason,
            limits: limits.describe(),
        }
    }
}

pub(super) fn missing_parent(parent: &Path, base: &Path) -> CgroupError {
    CgroupError::InvalidParent {
        value: parent.display().to_string(),
        path: base.to_owned(),
        reason: "this cgroup does not exist; create it (or have it delegated) first".into(),
    }
}
