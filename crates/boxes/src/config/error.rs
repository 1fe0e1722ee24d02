//! Errors and warnings of configuration loading and editing.

use std::fmt;
use std::path::PathBuf;

use super::key::Value;
use super::trust::Refused;

/// A configuration problem. Each variant names the file (when one is involved) and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file that is not valid YAML.
    #[error("{}: invalid YAML{}: {message}", path.display(), line.map(|l| format!(" at line {l}")).unwrap_or_default())]
    Parse {
        path: PathBuf,
        line: Option<u64>,
        message: String,
    },
    /// A file (or its `defaults:` block, or a section) that is not a mapping of keys.
    #[error("{}: {what} is not a mapping of keys (found {found})", path.display())]
    NotAMapping {
        path: PathBuf,
        what: String,
        found: String,
    },
    /// A section of keys (`box`, `git`) given a value instead of a mapping (`box: none`).
    #[error("{}: {section} is a section of keys, so it takes a mapping ({section}: {{key: value}}), not {found}", path.display())]
    NotASection {
        path: PathBuf,
        section: String,
        found: String,
    },
    /// A key the registry does not have (asked for by name, e.g. `config get`).
    #[error("no config key named {key:?}")]
    UnknownKey {
        key: String,
        suggestion: Option<&'static str>,
    },
    /// A key that was renamed; `path` is `None` when the old name came from the command line.
    #[error("{}config key {old:?} was renamed to {new:?}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    Renamed {
        path: Option<PathBuf>,
        old: String,
        new: &'static str,
    },
    /// A value of the wrong type or out of range; `path` is `None` for a command-line value.
    #[error("{}invalid value {value} for {key}: {reason}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    InvalidValue {
        path: Option<PathBuf>,
        key: String,
        value: String,
        reason: String,
    },
    /// One key given twice in one file (nested and dotted).
    #[error("{}: {key} is set twice (nested and dotted)", path.display())]
    Duplicate { path: PathBuf, key: String },
    /// The workspace file is edited by hand, never written by agentbox.
    #[error("the workspace configuration ({}) is edited by hand", path.display())]
    WorkspaceReadOnly { path: PathBuf },
    /// The project layer was asked for outside a project.
    #[error("{} is not inside a project", dir.display())]
    NoProject { dir: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: cannot write: {source}", path.display())]
    Write {
        path: PathBuf,
        source: agentbox_core::Error,
    },
    /// The home's record of trusted files is damaged.
    #[error("{}: the record of trusted files is damaged: {why}", path.display())]
    TrustStore { path: PathBuf, why: String },
}

impl ConfigError {
    /// The stable exit-code class (see the CLI's table): 3 an unknown key or no project,
    /// 4 refused (the workspace file), 9 invalid configuration (a file or a value), 1 IO.
    /// The exit-code class of the error (see [`agentbox_core::exit::ExitCode`]).
    pub fn exit_code(&self) -> i32 {
        use agentbox_core::exit::ExitCode;
        match self {
            ConfigError::UnknownKey { .. } | ConfigError::NoProject { .. } => {
                ExitCode::NotFound.into()
            }
            ConfigError::WorkspaceReadOnly { .. } => ExitCode::Refused.into(),
            ConfigError::Io { .. } | ConfigError::Write { .. } | ConfigError::TrustStore { .. } => {
                ExitCode::Failure.into()
            }
            ConfigError::Parse { .. }
            | ConfigError::NotAMapping { .. }
            | ConfigError::NotASection { .. }
            | ConfigError::Renamed { .. }
            | ConfigError::InvalidValue { .. }
            | ConfigError::Duplicate { .. } => ExitCode::BadConfig.into(),
        }
    }

    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            ConfigError::UnknownKey { suggestion, .. } => Some(match suggestion {
                Some(s) => format!("did you mean {s}? `agentbox config list` shows every key"),
                None => "`agentbox config list` shows every key".into(),
            }),
            ConfigError::Renamed {
                path: Some(p),
                old,
                new,
            } => Some(format!(
                "rename {old} to {new} in {} (`agentbox config edit` opens it)",
                p.display()
            )),
            ConfigError::Renamed { new, .. } => Some(format!("use {new}")),
            ConfigError::InvalidValue { path: Some(p), .. }
            | ConfigError::Parse { path: p, .. }
            | ConfigError::NotAMapping { path: p, .. }
            | ConfigError::NotASection { path: p, .. }
            | ConfigError::Duplicate { path: p, .. } => Some(format!(
                "fix {} (`agentbox config schema` describes every key)",
                p.display()
            )),
            ConfigError::InvalidValue { path: None, .. } => {
                Some("`agentbox config list` shows every key and its type".into())
            }
            ConfigError::WorkspaceReadOnly { path } => Some(format!(
                "edit the defaults: block of {} by hand, or use --project or --global",
                path.display()
            )),
            ConfigError::NoProject { .. } => Some(
                "run it inside a project (a repository, or a directory with agentbox.yaml), or use --global"
                    .into(),
            ),
            ConfigError::TrustStore { path, .. } => Some(format!(
                "remove {} and trust your projects' files again (`agentbox trust`)",
                path.display()
            )),
            ConfigError::Io { .. } | ConfigError::Write { .. } => None,
        }
    }
}

/// A problem that does not stop loading: an unknown key (perhaps from a newer version), or
/// a value of an untrusted project file that was ignored.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigWarning {
    /// The file, with `defaults:` appended for the workspace file.
    pub file: String,
    pub key: String,
    pub kind: WarningKind,
}

/// What a [`ConfigWarning`] is about.
#[derive(Debug, Clone, PartialEq)]
pub enum WarningKind {
    /// A key the registry does not have; ignored.
    Unknown { suggestion: Option<&'static str> },
    /// An untrusted project file's value (or part of it) that was ignored.
    Untrusted(Ignored),
}

/// A value (or part of one) of an untrusted project file that does not apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Ignored {
    pub key: &'static str,
    /// What the file sets that was ignored.
    pub value: Value,
    /// The project file.
    pub path: PathBuf,
    pub why: Refused,
    /// The file was trusted once, with another content.
    pub changed: bool,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            WarningKind::Unknown { suggestion } => {
                write!(
                    f,
                    "{}: unknown config key {:?} (ignored)",
                    self.file, self.key
                )?;
                if let Some(s) = suggestion {
                    write!(f, "; did you mean {s}?")?;
                }
                Ok(())
            }
            WarningKind::Untrusted(i) => write!(
                f,
                "{}: {} = {} ignored: {}, and {}; review it, then `agentbox trust {}`",
                self.file,
                self.key,
                // The file's own text: quoted, so no control character reaches a terminal.
                quoted(&i.value),
                i.why.describe(),
                if i.changed {
                    "the file changed since you trusted it"
                } else {
                    "the file is not trusted"
                },
                i.path.display()
            ),
        }
    }
}

/// A value as an untrusted file wrote it, quoted and escaped.
fn quoted(v: &Value) -> String {
    match v {
        Value::List(items) => format!("{items:?}"),
        Value::Str(s) => format!("{s:?}"),
        Value::Size { text, .. } => format!("{text:?}"),
        other => other.display(),
    }
}
