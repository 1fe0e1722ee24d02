//! Errors of the foundation layer. Every variant names the path it concerns.

use std::path::PathBuf;

/// Errors raised by the helpers in this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An IO error; `fs_err` already puts the path in the message.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A JSON file that could not be parsed or written.
    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A lock another process holds.
    #[error("{what} is locked by {holder} (lock file {path})")]
    Locked {
        what: String,
        holder: String,
        path: PathBuf,
    },
    /// The home directory could not be determined.
    #[error("cannot find the agentbox home: set AGENTBOX_HOME or HOME")]
    NoHome,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
