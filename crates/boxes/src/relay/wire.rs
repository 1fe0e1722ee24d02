//! A [`BoxError`] as it crosses a process boundary (a provider's socket, a supervisor's
//! startup pipe): the kind and its data, so the receiving side gets back the same variant —
//! the same exit code, hint and fields to match on — not a message to print.
//!
//! Invariant: every variant whose fields are plain data round-trips exactly
//! (`BoxError::from(WireError::from(&e))` is the same variant with the same fields). Errors
//! that wrap an OS or library error (IO, git, a config file) have no data worth more than
//! their text; they cross as [`WireError::Other`] with their message, hint and exit-code
//! class, and come back as [`BoxError::Remote`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::BoxError;

/// A [`BoxError`] that can be sent (serde, JSON on the wire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireError {
    NoSuchBox {
        name: String,
    },
    NotRunning {
        name: String,
    },
    NoSuchProcess {
        name: String,
        target: u64,
    },
    SpawnExited {
        name: String,
        id: u64,
        command: String,
        status: i32,
        output: Vec<String>,
    },
    Command {
        message: String,
        status: i32,
    },
    Sandbox {
        name: String,
        message: String,
    },
    BoxRepo {
        name: String,
        repo: PathBuf,
        why: String,
    },
    NoRepositories {
        name: String,
    },
    NoSuchRepository {
        name: String,
        repo: String,
        known: Vec<String>,
    },
    NoUpstream {
        name: String,
        repo: PathBuf,
    },
    MergeConflict {
        name: String,
        remote: String,
        branch: String,
        inside: PathBuf,
    },
    MergeFailed {
        name: String,
        remote: String,
        branch: String,
        inside: PathBuf,
    },
    BadSetting {
        key: String,
        given: String,
        reason: String,
    },
    LimitsUnavailable {
        reason: String,
    },
    StaleCurrentDir {
        shell_pwd: Option<PathBuf>,
    },
    /// A reference (a node, tag or `HEAD~N`) the box's history does not have.
    UnknownRef {
        reference: String,
    },
    AmbiguousRef {
        reference: String,
        candidates: Vec<String>,
    },
    InvalidName {
        name: String,
        reason: String,
    },
    NoSpace {
        path: PathBuf,
        detail: String,
    },
    /// A lock another process holds.
    Locked {
        what: String,
        holder: String,
        path: PathBuf,
    },
    /// Any other error: what it said, its hint and exit-code class.
    Other {
        message: String,
        hint: Option<String>,
        code: i32,
    },
}

impl From<&BoxError> for WireError {
    fn from(e: &BoxError) -> WireError {
        use agentbox_store::Error as S;
        let c = |s: &String| s.clone();
        match e {
            BoxError::NoSuchBox { name } => WireError::NoSuchBox { name: c(name) },
            BoxError::NotRunning { name } => WireError::NotRunning { name: c(name) },
            BoxError::NoSuchProcess { name, target } => WireError::NoSuchProcess {
                name: c(name),
                target: *target,
            },
            BoxError::SpawnExited {
                name,
                id,
                command,
                status,
                output,
            } => WireError::SpawnExited {
                name: c(name),
                id: *id,
                command: c(command),
                status: *status,
                output: output.clone(),
            },
            BoxError::Command { message, status } => WireError::Command {
                message: c(message),
                status: *status,
            },
            BoxError::Sandbox { name, message } => WireError::Sandbox {
                name: c(name),
                message: c(message),
            },
            BoxError::BoxRepo { name, repo, why } => WireError::BoxRepo {
                name: c(name),
                repo: repo.clone(),
                why: c(why),
            },
            BoxError::NoRepositories { name } => WireError::NoRepositories { name: c(name) },
            BoxError::NoSuchRepository { name, repo, known } => WireError::NoSuchRepository {
                name: c(name),
                repo: c(repo),
                known: known.clone(),
            },
            BoxError::NoUpstream { name, repo } => WireError::NoUpstream {
                name: c(name),
                repo: repo.clone(),
            },
            BoxError::MergeConflict {
                name,
                remote,
                branch,
                inside,
            } => WireError::MergeConflict {
                name: c(name),
                remote: c(remote),
                branch: c(branch),
                inside: inside.clone(),
            },
            BoxError::MergeFailed {
                name,
                remote,
                branch,
                inside,
            } => WireError::MergeFailed {
                name: c(name),
                remote: c(remote),
                branch: c(branch),
                inside: inside.clone(),
            },
            BoxError::BadSetting { key, given, reason } => WireError::BadSetting {
                key: c(key),
                given: c(given),
                reason: c(reason),
            },
            BoxError::LimitsUnavailable { reason } => {
                WireError::LimitsUnavailable { reason: c(reason) }
            }
            BoxError::StaleCurrentDir { shell_pwd } => WireError::StaleCurrentDir {
                shell_pwd: shell_pwd.clone(),
            },
            BoxError::Store(S::UnknownRef { reference }) => WireError::UnknownRef {
                reference: c(reference),
            },
            BoxError::Store(S::AmbiguousRef {
                reference,
                candidates,
            }) => WireError::AmbiguousRef {
                reference: c(reference),
                candidates: candidates.clone(),
            },
            BoxError::Store(S::InvalidName { name, reason }) => WireError::InvalidName {
                name: c(name),
                reason: c(reason),
            },
            BoxError::InvalidName(e) => WireError::InvalidName {
                name: c(&e.name),
                reason: format!("{} {}", e.kind, e.reason),
            },
            BoxError::Store(S::NoSpace { path, detail }) => WireError::NoSpace {
                path: path.clone(),
                detail: c(detail),
            },
            BoxError::Core(agentbox_core::Error::Locked { what, holder, path })
            | BoxError::Store(S::Core(agentbox_core::Error::Locked { what, holder, path })) => {
                WireError::Locked {
                    what: c(what),
                    holder: c(holder),
                    path: path.clone(),
                }
            }
            // Already an error from the other side: it goes on as it came.
            BoxError::Remote {
                message,
                hint,
                code,
            } => WireError::Other {
                message: c(message),
                hint: hint.clone(),
                code: *code,
            },
            other => WireError::Other {
                message: other.to_string(),
                hint: other.hint(),
                code: other.exit_code(),
            },
        }
    }
}

impl From<WireError> for BoxError {
    fn from(w: WireError) -> BoxError {
        use agentbox_store::Error as S;
        match w {
            WireError::NoSuchBox { name } => BoxError::NoSuchBox { name },
            WireError::NotRunning { name } => BoxError::NotRunning { name },
            WireError::NoSuchProcess { name, target } => BoxError::NoSuchProcess { name, target },
            WireError::SpawnExited {
                name,
                id,
                command,
                status,
                output,
            } => BoxError::SpawnExited {
                name,
                id,
                command,
                status,
                output,
            },
            WireError::Command { message, status } => BoxError::Command { message, status },
            WireError::Sandbox { name, message } => BoxError::Sandbox { name, message },
            WireError::BoxRepo { name, repo, why } => BoxError::BoxRepo { name, repo, why },
            WireError::NoRepositories { name } => BoxError::NoRepositories { name },
            WireError::NoSuchRepository { name, repo, known } => {
                BoxError::NoSuchRepository { name, repo, known }
            }
            WireError::NoUpstream { name, repo } => BoxError::NoUpstream { name, repo },
            WireError::MergeConflict {
                name,
                remote,
                branch,
                inside,
            } => BoxError::MergeConflict {
                name,
                remote,
                branch,
                inside,
            },
            WireError::MergeFailed {
                name,
                remote,
                branch,
                inside,
            } => BoxError::MergeFailed {
                name,
                remote,
                branch,
                inside,
            },
            WireError::BadSetting { key, given, reason } => {
                BoxError::BadSetting { key, given, reason }
            }
            WireError::LimitsUnavailable { reason } => BoxError::LimitsUnavailable { reason },
            WireError::StaleCurrentDir { shell_pwd } => BoxError::StaleCurrentDir { shell_pwd },
            WireError::UnknownRef { reference } => BoxError::Store(S::UnknownRef { reference }),
            WireError::AmbiguousRef {
                reference,
                candidates,
            } => BoxError::Store(S::AmbiguousRef {
                reference,
                candidates,
            }),
            WireError::InvalidName { name, reason } => {
                BoxError::Store(S::InvalidName { name, reason })
            }
            WireError::NoSpace { path, detail } => BoxError::Store(S::NoSpace { path, detail }),
            WireError::Locked { what, holder, path } => {
                BoxError::Core(agentbox_core::Error::Locked { what, holder, path })
            }
            WireError::Other {
                message,
                hint,
                code,
            } => BoxError::Remote {
                message,
                hint,
                code,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Send `e` through JSON, as a provider's socket does.
    fn across(e: &BoxError) -> BoxError {
        let text = serde_json::to_string(&WireError::from(e)).expect("encodes");
        serde_json::from_str::<WireError>(&text)
            .expect("decodes")
            .into()
    }

    #[test]
    fn data_errors_come_back_as_the_same_variant() {
        let cases = [
            BoxError::NoSuchProcess {
                name: "b".into(),
                target: 7,
            },
            BoxError::NotRunning { name: "b".into() },
            BoxError::MergeConflict {
                name: "b".into(),
                remote: "origin".into(),
                branch: "main".into(),
                inside: "/workspace".into(),
            },
            BoxError::Store(agentbox_store::Error::UnknownRef {
                reference: "nope".into(),
            }),
            BoxError::StaleCurrentDir {
                shell_pwd: Some("/workspace/x".into()),
            },
            BoxError::Core(agentbox_core::Error::Locked {
                what: "box b".into(),
                holder: "pid 3".into(),
                path: "/h/lock".into(),
            }),
        ];
        for e in &cases {
            let back = across(e);
            assert_eq!(
                std::mem::discriminant(&back),
                std::mem::discriminant(e),
                "{e:?} came back as {back:?}"
            );
            assert_eq!(back.to_string(), e.to_string());
            assert_eq!(back.hint(), e.hint());
            assert_eq!(back.exit_code(), e.exit_code());
        }
        assert!(matches!(
            across(&cases[0]),
            BoxError::NoSuchProcess { target: 7, .. }
        ));
    }

    #[test]
    fn other_errors_keep_message_hint_and_code() {
        let e = BoxError::PublishNeedsPrivate;
        let back = across(&e);
        assert!(matches!(back, BoxError::Remote { .. }));
        assert_eq!(back.to_string(), e.to_string());
        assert_eq!(back.hint(), e.hint());
        assert_eq!(back.exit_code(), e.exit_code());
    }
}
