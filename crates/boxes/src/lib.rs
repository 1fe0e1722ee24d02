//! Boxes: records, the per-box supervisor, the client the CLI uses to talk to it.

pub mod boxgit;
pub mod capture;
pub mod cgroup;
pub mod client;
pub mod config;
pub mod hostdata;
pub mod images;
pub mod project;
pub mod proto;
pub mod prune;
pub mod record;
pub mod registry;
pub mod restore;
pub mod seeding;
pub mod supervisor;
pub mod watch;

use std::path::{Path, PathBuf};

/// Errors of box operations. Each names the box, path or process involved.
#[derive(Debug, thiserror::Error)]
pub enum BoxError {
    #[error("no box named {name:?}")]
    NoSuchBox { name: String },
    #[error("{reference:?} could mean more than one box: {}", candidates.join("; "))]
    Ambiguous {
        reference: String,
        candidates: Vec<String>,
    },
    #[error("{}", which_box_message(project.as_deref(), candidates))]
    WhichBox {
        project: Option<PathBuf>,
        candidates: Vec<String>,
    },
    #[error("cannot use {display:?} as a display name: {why}")]
    BadDisplayName { display: String, why: String },
    #[error("a box named {name:?} already exists")]
    BoxExists { name: String },
    #[error("no image named {name:?}")]
    NoSuchImage { name: String },
    #[error("an image named {name:?} already exists")]
    ImageExists { name: String },
    #[error("image {name:?} is used by box {by:?}")]
    ImageInUse { name: String, by: String },
    /// A background process that ended before `spawn` returned, with a non-zero status.
    #[error(
        "box {name:?}: process {id} ({command}) exited at once with status {status}{}",
        output_block(output)
    )]
    SpawnExited {
        name: String,
        id: u64,
        command: String,
        status: i32,
        /// The first lines of its output.
        output: Vec<String>,
    },
    #[error("box {name:?} has no process {target}")]
    NoSuchProcess { name: String, target: u64 },
    #[error("box {name:?} could not start: {message}")]
    Sandbox { name: String, message: String },
    /// A command that could not be started in the box; `status` is the shell's (127 when
    /// it does not exist, else 126).
    #[error("{message}")]
    Command { message: String, status: i32 },
    /// An error the supervisor reported, with its exit-code class.
    #[error("{message}")]
    Remote {
        message: String,
        hint: Option<String>,
        code: i32,
    },
    /// A repository of the box that the host refused to take from, or could not read.
    #[error("box {name:?}, repository {}: {why}", repo.display())]
    BoxRepo {
        name: String,
        /// The repository's working tree inside the box.
        repo: PathBuf,
        why: String,
    },
    #[error("supervisor: {0}")]
    Supervisor(String),
    #[error("box {name:?}: the supervisor did not start: {message}")]
    SupervisorStart { name: String, message: String },
    #[error("{operation} needs root: {reason}")]
    NeedsRoot { operation: String, reason: String },
    /// A private network that cannot be set up (no `pasta`, a taken port).
    #[error(transparent)]
    Network(#[from] agentbox_sandbox::net::NetError),
    #[error(transparent)]
    Store(#[from] agentbox_store::Error),
    #[error(transparent)]
    Git(#[from] agentbox_git::GitError),
    #[error(transparent)]
    Core(#[from] agentbox_core::Error),
    #[error("{path}: {source}")]
    Path {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The current directory was removed or replaced (by a checkout, typically) under the
    /// process; `shell_pwd` is where the caller's shell says it is.
    #[error("the current directory{} no longer exists (a checkout replaced it); run cd \"$PWD\"", shell_pwd.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    StaleCurrentDir { shell_pwd: Option<PathBuf> },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl BoxError {
    pub fn io(path: &Path, source: std::io::Error) -> BoxError {
        BoxError::Path {
            path: path.to_owned(),
            source,
        }
    }

    /// The stable exit-code class (see the CLI's table).
    pub fn exit_code(&self) -> i32 {
        match self {
            BoxError::Store(e) => e.exit_code(),
            BoxError::Core(agentbox_core::Error::Locked { .. }) => 5,
            BoxError::NoSuchBox { .. }
            | BoxError::NoSuchProcess { .. }
            | BoxError::NoSuchImage { .. } => 3,
            BoxError::Ambiguous { .. }
            | BoxError::WhichBox { .. }
            | BoxError::BadDisplayName { .. } => 2,
            BoxError::BoxExists { .. }
            | BoxError::ImageExists { .. }
            | BoxError::ImageInUse { .. } => 4,
            BoxError::NeedsRoot { .. } => 6,
            BoxError::Network(e) => e.exit_code(),
            BoxError::Remote { code, .. } => *code,
            BoxError::Command { status, .. } => *status,
            _ => 1,
        }
    }

    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            BoxError::NoSuchBox { .. } => Some("`agentbox list` shows the boxes".into()),
            BoxError::NoSuchImage { .. } => Some("`agentbox image list` shows the images".into()),
            BoxError::ImageExists { name } => {
                Some(format!("`agentbox image rm {name}` first, or choose another name"))
            }
            BoxError::ImageInUse { by, .. } => Some(format!("destroy box {by:?} first")),
            BoxError::BoxExists { .. } => {
                Some("choose another name, or `agentbox destroy NAME` first".into())
            }
            BoxError::NoSuchProcess { name, .. } => {
                Some(format!("`agentbox ps {name}` lists its processes"))
            }
            BoxError::SpawnExited { name, id, .. } => Some(format!(
                "`agentbox logs {name} {id}` shows its whole output, `agentbox ps {name}` its exit"
            )),
            BoxError::Remote { hint, .. } => hint.clone(),
            BoxError::Ambiguous { .. } => {
                Some("name the box by its name or a longer id prefix (`agentbox list --all`)".into())
            }
            BoxError::WhichBox { candidates, .. } if candidates.is_empty() => Some(
                "create one with `agentbox create` inside the project, or name a box (`agentbox list --all`)".into(),
            ),
            BoxError::WhichBox { .. } => {
                Some("name the box: its number, name or id (`agentbox list`)".into())
            }
            BoxError::BadDisplayName { .. } => {
                Some("choose another display name; `agentbox rename BOX \"\"` clears it".into())
            }
            BoxError::Store(e) => e.hint().map(str::to_owned),
            BoxError::Network(e) => e.hint(),
            BoxError::BoxRepo { name, repo, .. } => Some(format!(
                "fix the repository inside the box (`agentbox exec {name} -- git -C {} status`), then `agentbox sync {name}`",
                repo.display()
            )),
            BoxError::Sandbox { name, .. } | BoxError::SupervisorStart { name, .. } => Some(
                format!("the supervisor's log is in the box's directory; `agentbox start {name}` retries"),
            ),
            _ => None,
        }
    }
}

/// A process's first output lines, indented under a message. They are the box's text,
/// printed on the host: control characters (escape sequences) are shown escaped.
fn output_block(lines: &[String]) -> String {
    if lines.is_empty() {
        return "; it printed nothing".to_owned();
    }
    let mut s = "; its output began:".to_owned();
    for l in lines {
        s.push_str("\n  ");
        for c in l.chars() {
            if c.is_control() {
                s.extend(c.escape_default());
            } else {
                s.push(c);
            }
        }
    }
    s
}

fn which_box_message(project: Option<&Path>, candidates: &[String]) -> String {
    let place = match project {
        Some(p) => format!("project {}", p.display()),
        None => "boxes made outside a project".to_owned(),
    };
    if candidates.is_empty() {
        format!("which box? {place} has none")
    } else {
        format!(
            "which box? {place} has {}: {}",
            candidates.len(),
            candidates.join("; ")
        )
    }
}

pub type Result<T, E = BoxError> = std::result::Result<T, E>;

/// A command line as a label: arguments quoted only where a shell would need it.
pub fn render_command(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
