//! The exit codes of `agentbox`, in one place: every crate's errors say which class they are
//! in through this enum, and the binary exits with its number.

/// What kind of failure an error is, as the process's exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum ExitCode {
    /// Any other failure (IO, a backend, a command that failed).
    Failure = 1,
    /// Bad usage: a flag, an argument, a value.
    Usage = 2,
    /// Not found: a box, environment, node, tag, image, process, store, key, project.
    NotFound = 3,
    /// Refused or conflicting: exists already, ambiguous, an invalid name, a merge conflict.
    Refused = 4,
    /// Locked by another process.
    Locked = 5,
    /// Needs root (or a capability this machine does not give).
    NeedsRoot = 6,
    /// The store is inconsistent (`fsck` found problems).
    Inconsistent = 7,
    /// A malformed or unsafe bundle.
    BadBundle = 8,
    /// Invalid configuration.
    BadConfig = 9,
}

impl From<ExitCode> for i32 {
    fn from(c: ExitCode) -> i32 {
        c as i32
    }
}
