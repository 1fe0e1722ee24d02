//! The errors of box operations: one enum, [`BoxError`], whose variants name the box, path or
//! process involved, with the stable exit-code class ([`BoxError::exit_code`]) and what the
//! user can do about it ([`BoxError::hint`]) decided here, once, for every front end.

use std::path::{Path, PathBuf};

/// Errors of box operations. Each names the box, path or process involved.
#[derive(Debug, thiserror::Error)]
pub enum BoxError {
    #[error("no box named {name:?}")]
    NoSuchBox { name: String },
    /// A name taken from a directory's name that cannot name an environment.
    #[error("invalid name {name:?}: {reason}")]
    NameFromDir { name: String, reason: String },
    /// A directory with no last component to name it after (`/`).
    #[error("{} has no name", dir.display())]
    NoDirName { dir: PathBuf },
    /// A store exists where a new one would go.
    #[error("a store already exists at {}", dir.display())]
    StoreExists { dir: PathBuf },
    #[error(transparent)]
    InvalidName(#[from] agentbox_core::name::NameError),
    /// The checkpoint's base (the host's system or its image) changed since it was made.
    #[error("checkpoint {name:?} was made on a base that has changed since (system packages or image): its installed files may not match")]
    CheckpointStale { name: String },
    #[error("checkpoint {name:?} cannot be used: {why}")]
    CheckpointUnusable { name: String, why: String },
    #[error(
        "box {name:?}: moving the checkpoint's repositories to the host's commit failed: {why}"
    )]
    Reseed { name: String, why: String },
    #[error("no agent named {name:?}")]
    NoSuchAgent { name: String },
    #[error("{}: {why}", path.display())]
    BadAgents { path: PathBuf, why: String },
    /// Syncing an agent's configuration into the box failed.
    #[error("box {name:?}: syncing {agent}'s configuration failed: {why}")]
    AgentSync {
        name: String,
        agent: String,
        why: String,
    },
    #[error("a checkpoint named {name:?} already exists")]
    CheckpointExists { name: String },
    /// `checkpoint create --replace` or `--set-default` asked from inside a box.
    #[error("inside a box a checkpoint cannot replace one or become the default; promote it on the host with `agentbox checkpoint set-default {name:?}`")]
    CheckpointFromBox { name: String },
    #[error("no checkpoint named {name:?}{}", project.as_ref().map(|p| format!(" in project {}", p.display())).unwrap_or_default())]
    NoSuchCheckpoint {
        name: String,
        project: Option<PathBuf>,
    },
    /// Nothing was made in this agentbox home yet.
    #[error("no agentbox store at {}", dir.display())]
    NoStore { dir: PathBuf },
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
    #[error("box {name:?} has no log for process {id}")]
    NoLog { name: String, id: u64 },
    #[error("box {name:?} could not start: {message}")]
    Sandbox { name: String, message: String },
    /// A command that could not be started in the box; `status` is the shell's (127 when
    /// it does not exist, else 126).
    #[error("{message}")]
    Command { message: String, status: i32 },
    /// An error from the other side of a provider's socket that has no data of its own
    /// to keep (see [`crate::relay::wire::WireError::Other`]), with its exit-code class.
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
    /// A setting of a new box (a `create` flag, or the configuration key it overrides)
    /// with a value it cannot take.
    #[error("{key} {given}: {reason}")]
    BadSetting {
        /// The configuration key (`box.network`), or `publish` / `limits` (whose reason
        /// quotes the value).
        key: String,
        given: String,
        reason: String,
    },
    #[error("box {name:?} is run by the {provider:?} provider, not this one")]
    OtherProvider { name: String, provider: String },
    /// What a box's provider cannot do for it: a refusal naming the provider, never a
    /// silent skip.
    #[error("box {name:?}: the {provider} provider cannot {what}")]
    ProviderCannot {
        name: String,
        provider: String,
        what: String,
        hint: String,
    },
    #[error("box {name:?} is not running")]
    NotRunning { name: String },
    /// A file of a box that could not be read, written or listed (inside the box).
    #[error("box {name:?}, {path:?}: {why}")]
    BoxFile {
        name: String,
        /// The path as given (inside the box; relative ones are under /workspace).
        path: String,
        /// What the box said (box-controlled text).
        why: String,
        /// The path names nothing.
        missing: bool,
        /// The path names something of the wrong kind (a directory to read), or the
        /// request is over a limit.
        refused: bool,
    },
    #[error("box {name:?} was not made from a git repository")]
    NoRepositories { name: String },
    #[error("box {name:?} has no repository {repo:?}")]
    NoSuchRepository {
        name: String,
        repo: String,
        known: Vec<String>,
    },
    #[error("box {name:?}: {} was on no branch when the box was made", repo.display())]
    NoUpstream { name: String, repo: PathBuf },
    #[error("box {name:?}: merging {remote}/{branch} into {} conflicts; the box repository is left mid-merge", inside.display())]
    MergeConflict {
        name: String,
        remote: String,
        branch: String,
        inside: PathBuf,
    },
    #[error("box {name:?}: merging {remote}/{branch} into {} failed (see above)", inside.display())]
    MergeFailed {
        name: String,
        remote: String,
        branch: String,
        inside: PathBuf,
    },
    #[error("publishing ports needs a private network")]
    PublishNeedsPrivate,
    #[error("resource limits cannot be enforced here: {reason}")]
    LimitsUnavailable { reason: String },
    #[error("{} {why}", path.display())]
    BadWorkspace { path: PathBuf, why: String },
    /// Making the box's repositories from the host's failed.
    #[error(transparent)]
    Seed(agentbox_git::GitError),
    #[error(transparent)]
    Config(Box<crate::config::ConfigError>),
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
    /// A reference that names no node of the box's history (`fork --at`, `tournament --at`).
    #[error("box {name:?} has no node {reference:?}")]
    NoSuchNode { name: String, reference: String },
    /// A tournament candidate that cannot be run as given.
    #[error("tournament candidate {candidate:?}: {why}")]
    BadCandidate { candidate: String, why: String },
    /// A tournament of box `name` given no candidates.
    #[error("a tournament of box {name:?} needs at least one candidate")]
    NoCandidates { name: String },
    /// An operation stopped by a signal (SIGINT, SIGTERM) after undoing what it had made.
    #[error("{what} was interrupted by signal {signal}; {undone}")]
    Interrupted {
        what: String,
        signal: i32,
        /// What became of its work.
        undone: String,
    },
    /// A box's credential broker could not be started or given its credentials.
    #[error(transparent)]
    Broker(#[from] agentbox_broker::BrokerError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Session(#[from] crate::sessions::SessionError),
    /// A copy between a box and the host that stopped (see `lifecycle::copy`): `path` on
    /// the host side, or in the box; `refused`: over a limit, or something the copy does
    /// not do (an entry outside its destination, a directory over a file).
    #[error("cp: {path}: {why}")]
    Copy {
        path: String,
        why: String,
        refused: bool,
    },
}

impl BoxError {
    pub fn io(path: &Path, source: std::io::Error) -> BoxError {
        BoxError::Path {
            path: path.to_owned(),
            source,
        }
    }

    /// The stable exit-code class of the error (see [`agentbox_core::exit::ExitCode`]).
    pub fn exit_code(&self) -> i32 {
        use agentbox_core::exit::ExitCode;
        match self {
            BoxError::Store(e) => e.exit_code(),
            BoxError::BoxFile { missing: true, .. } => ExitCode::NotFound.into(),
            BoxError::BoxFile { refused: true, .. } => ExitCode::Refused.into(),
            BoxError::Copy { refused: true, .. } => ExitCode::Refused.into(),
            BoxError::Git(e) | BoxError::Seed(e) => e.exit_code(),
            BoxError::Core(agentbox_core::Error::Locked { .. }) => ExitCode::Locked.into(),
            BoxError::NoSuchBox { .. }
            | BoxError::NoSuchNode { .. }
            | BoxError::NoStore { .. }
            | BoxError::NotRunning { .. }
            | BoxError::NoSuchProcess { .. }
            | BoxError::NoLog { .. }
            | BoxError::NoSuchImage { .. } => ExitCode::NotFound.into(),
            BoxError::StoreExists { .. }
            | BoxError::InvalidName(_)
            | BoxError::CheckpointExists { .. }
            | BoxError::CheckpointFromBox { .. }
            | BoxError::ProviderCannot { .. } => ExitCode::Refused.into(),
            BoxError::NoSuchCheckpoint { .. } | BoxError::NoSuchAgent { .. } => {
                ExitCode::NotFound.into()
            }
            BoxError::BadAgents { .. } => ExitCode::BadConfig.into(),
            BoxError::CheckpointUnusable { .. } | BoxError::CheckpointStale { .. } => {
                ExitCode::Refused.into()
            }
            BoxError::NameFromDir { .. } | BoxError::NoDirName { .. } => ExitCode::Usage.into(),
            BoxError::Ambiguous { .. }
            | BoxError::WhichBox { .. }
            | BoxError::BadDisplayName { .. } => ExitCode::Usage.into(),
            BoxError::NoSuchRepository { .. } | BoxError::NoUpstream { .. } => {
                ExitCode::Usage.into()
            }
            BoxError::MergeConflict { .. } => ExitCode::Refused.into(),
            BoxError::BoxExists { .. }
            | BoxError::NoRepositories { .. }
            | BoxError::ImageExists { .. }
            | BoxError::ImageInUse { .. } => ExitCode::Refused.into(),
            BoxError::NeedsRoot { .. } | BoxError::LimitsUnavailable { .. } => {
                ExitCode::NeedsRoot.into()
            }
            BoxError::BadSetting { .. }
            | BoxError::PublishNeedsPrivate
            | BoxError::BadWorkspace { .. } => ExitCode::Usage.into(),
            BoxError::Config(e) => e.exit_code(),
            BoxError::Broker(agentbox_broker::BrokerError::BadUpstream { .. }) => {
                ExitCode::BadConfig.into()
            }
            BoxError::Broker(agentbox_broker::BrokerError::Permissions { .. }) => {
                ExitCode::Refused.into()
            }
            BoxError::Network(e) => e.exit_code(),
            BoxError::BadCandidate { .. } | BoxError::NoCandidates { .. } => ExitCode::Usage.into(),
            // As a shell reports a command a signal ended.
            BoxError::Interrupted { signal, .. } => 128 + signal,
            BoxError::Remote { code, .. } => *code,
            BoxError::Command { status, .. } => *status,
            BoxError::Session(e) => e.exit_code(),
            _ => ExitCode::Failure.into(),
        }
    }

    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            BoxError::NoSuchBox { .. } => Some("`agentbox list` shows the boxes".into()),
            BoxError::Copy { .. } => Some(
                "what was copied before stays; nothing is written outside the destination, and links and device files of a box are never made on the host".into(),
            ),
            BoxError::BoxFile { name, .. } => Some(format!(
                "paths are the box's own (relative ones under /workspace); `agentbox exec {name} -- ls -la DIR` shows what is there"
            )),
            BoxError::NameFromDir { .. } => {
                Some("the name comes from the directory; choose one with --name NAME".into())
            }
            BoxError::NoDirName { .. } => Some("pass --name NAME".into()),
            BoxError::StoreExists { .. } => Some("setup makes a new btrfs store; use another --home (AGENTBOX_HOME) or remove the existing store".into()),
            BoxError::CheckpointStale { name } => Some(format!(
                "--yes uses it anyway; or recreate it: create a box with --no-checkpoint, set it up, then `agentbox checkpoint create --name {name} --replace`"
            )),
            BoxError::CheckpointUnusable { .. } => Some(
                "`agentbox checkpoint rm` it, or create the box with --no-checkpoint".into(),
            ),
            BoxError::NoSuchAgent { .. } => {
                Some("`agentbox agents` lists them; add one in agents.yaml of the agentbox home".into())
            }
            BoxError::BadAgents { .. } => {
                Some("fix the file (see `agentbox agents --help` for its format)".into())
            }
            BoxError::CheckpointExists { .. } => Some(
                "choose another --name, or --replace to move the name to the new capture".into(),
            ),
            BoxError::NoSuchCheckpoint { .. } => {
                Some("`agentbox checkpoint ls` lists the project's checkpoints (--all: every project's)".into())
            }
            BoxError::NoStore { .. } => Some("create a box first: `agentbox create` inside a project (or `agentbox create NAME -C DIR`) (or version a directory: `agentbox env DIR`)".into()),
            BoxError::NoSuchImage { .. } => Some("`agentbox image list` shows the images".into()),
            BoxError::ImageExists { name } => {
                Some(format!("`agentbox image rm {name}` first, or choose another name"))
            }
            BoxError::ImageInUse { by, .. } => Some(format!("destroy box {by:?} first")),
            BoxError::BoxExists { .. } => {
                Some("choose another name, or `agentbox destroy NAME` first".into())
            }
            BoxError::NoSuchRepository { known, .. } => {
                Some(format!("its repositories: {}", known.join(" ")))
            }
            BoxError::NoUpstream { .. } => {
                Some("name the remote's branch to merge with --branch".into())
            }
            BoxError::MergeConflict { name, inside, .. } => Some(format!(
                "resolve the conflicts inside the box (agentbox shell {name} -w {}), then `git commit`; or `git merge --abort` there",
                inside.display()
            )),
            BoxError::MergeFailed { .. } => {
                Some("commit or stash the box's changes there first".to_owned())
            }
            BoxError::OtherProvider { provider, .. } => Some(format!(
                "use an agentbox built with the {provider:?} provider for it"
            )),
            BoxError::NotRunning { name } => Some(format!(
                "`agentbox start {name}` starts it; `agentbox ps {name}` lists its processes"
            )),
            BoxError::NoRepositories { .. } => Some(
                "only boxes created --from a repository (or a directory of repositories) have branches"
                    .into(),
            ),
            BoxError::NoSuchProcess { name, .. } => {
                Some(format!("`agentbox ps {name}` lists its processes"))
            }
            BoxError::NoLog { name, .. } => Some(format!(
                "`agentbox ps {name}` lists running processes; logs exist for spawned ones"
            )),
            BoxError::SpawnExited { name, id, .. } => Some(format!(
                "`agentbox logs {name} {id}` shows its whole output, `agentbox ps {name}` its exit"
            )),
            BoxError::Remote { hint, .. } => hint.clone(),
            BoxError::ProviderCannot { hint, .. } => Some(hint.clone()),
            BoxError::NoSuchNode { name, .. } => Some(format!(
                "`agentbox log {name}` shows its nodes; refs are HEAD, HEAD~N, a tag, an id or a unique id prefix"
            )),
            BoxError::BadCandidate { .. } | BoxError::NoCandidates { .. } => Some(
                "give each candidate as -c NAME=CMD, with distinct NAMEs of letters, digits, '.', '_' and '-'"
                    .into(),
            ),
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
            BoxError::BadSetting { .. } => Some("see `agentbox create --help`".into()),
            BoxError::NeedsRoot { .. } => Some("run it with sudo".into()),
            BoxError::PublishNeedsPrivate => {
                Some("add --network private (config box.network = private)".into())
            }
            BoxError::LimitsUnavailable { .. } => Some(
                "create the box without --memory/--pids/--cpus, or on a machine with cgroups"
                    .into(),
            ),
            BoxError::BadWorkspace { .. } => {
                Some("--from takes the directory to copy into /workspace".into())
            }
            BoxError::Git(e) => e.hint(),
            BoxError::Core(agentbox_core::Error::Locked { .. }) => {
                Some("wait for that process to finish, or stop it".into())
            }
            BoxError::Seed(e) => e.hint().or_else(|| {
                Some("`agentbox create --no-git` copies the directory as it is".into())
            }),
            BoxError::Config(e) => e.hint(),
            BoxError::Network(e) => e.hint(),
            BoxError::Broker(e) => e.hint(),
            BoxError::BoxRepo { name, repo, .. } => Some(format!(
                "fix the repository inside the box (`agentbox exec {name} -- git -C {} status`), then `agentbox sync {name}`",
                repo.display()
            )),
            BoxError::Sandbox { name, .. } | BoxError::SupervisorStart { name, .. } => Some(
                format!("the supervisor's log is in the box's directory; `agentbox start {name}` retries"),
            ),
            BoxError::Session(e) => e.hint(),
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
