//! What the CLI and a box's supervisor say to each other (one JSON message per
//! `SOCK_SEQPACKET` packet, see `agentbox_sandbox::ipc`).

use agentbox_sandbox::proto::WinSize;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcKind {
    Exec,
    Shell,
    Spawn,
}

/// Where a command starts in the box.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workdir {
    /// A path inside the box.
    pub path: String,
    /// The user named it (`-w`): a command whose directory the box lacks is an error. A
    /// default (the box's copy of the caller's directory) falls back to the nearest
    /// existing ancestor, since the box need not have every directory of the host's project.
    pub explicit: bool,
}

impl Workdir {
    /// A directory the user named.
    pub fn explicit(path: impl Into<String>) -> Workdir {
        Workdir {
            path: path.into(),
            explicit: true,
        }
    }

    /// A directory agentbox chose.
    pub fn default_for(path: impl Into<String>) -> Workdir {
        Workdir {
            path: path.into(),
            explicit: false,
        }
    }
}

/// CLI → supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Run a command in the foreground. Without `tty` the message carries the caller's
    /// stdin, stdout and stderr; with `tty` the reply carries a terminal's master side.
    /// Replies: `Started`, then `Exited` once it ends (after its node, if any, exists).
    Exec {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        /// `None`: the box's `/workspace`.
        cwd: Option<Workdir>,
        tty: Option<WinSize>,
        kind: ProcKind,
        capture: bool,
    },
    /// On an `Exec` connection: deliver a signal to the command's process group.
    Signal {
        signal: i32,
    },
    /// Start a background process (output to its log). Reply: `Started`.
    Spawn {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        /// `None`: the box's `/workspace`.
        cwd: Option<Workdir>,
    },
    Ps,
    /// Signal a process by its id or box PID.
    Kill {
        target: u64,
        signal: i32,
    },
    Commit {
        message: String,
        command: Option<String>,
    },
    /// Move the box to `reference`: its processes are killed, the box restarts on the
    /// node's tree.
    Checkout {
        reference: String,
        /// Restore the tree under the running processes instead of killing them (a new node
        /// with the reference's tree; HEAD moves there).
        #[serde(default)]
        keep_processes: bool,
    },
    Stop,
    Ping,
    /// Bring the box's branches into their host repositories now. Reply: `Synced`.
    Sync,
    /// The uncommitted paths of each box repository, looked at inside the box (rootless
    /// boxes, whose tree the host cannot mount). Reply: `Dirty`.
    Dirty,
    /// How auto-capture is doing. Reply: `Health`.
    Health,
    /// From inside the box only: one request of the in-box `agentbox` (see
    /// [`crate::relay`]). Carries the caller's stdin, stdout and stderr; replies `Exited`.
    Relay {
        call: crate::relay::RelayCall,
    },
}

/// One repository's branch after a sync.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncedRepo {
    /// The sub-directory of the repository (`None`: the project root).
    pub sub: Option<String>,
    /// The host repository's working tree.
    pub repo: std::path::PathBuf,
    pub branch: String,
    /// The branch's tip (`None`: the box has no such branch any more).
    pub tip: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcInfo {
    /// Id within this supervisor's lifetime (log file name for spawned processes).
    pub id: u64,
    /// PID inside the box.
    pub pid: i32,
    pub kind: ProcKind,
    pub argv: Vec<String>,
    pub started: DateTime<Utc>,
    /// How it ended (`None`: it is running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ProcExit>,
}

/// How a process ended, kept by the supervisor for `ps` (the last
/// [`RECENT_EXITS`] spawned ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcExit {
    /// Its exit code, or 128 + the signal that killed it.
    pub status: i32,
    pub ended: DateTime<Utc>,
    /// A checkout of the box killed it.
    #[serde(default)]
    pub killed_by_checkout: bool,
    /// The first lines of its output (its log: stdout and stderr together).
    #[serde(default)]
    pub output: Vec<String>,
}

/// How many ended background processes a supervisor remembers.
pub const RECENT_EXITS: usize = 20;

/// How many lines of an ended process's output are kept with its exit.
pub const EXIT_OUTPUT_LINES: usize = 5;

/// Supervisor → CLI.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Started {
        id: u64,
        pid: i32,
    },
    Exited {
        status: i32,
        /// The node auto-capture made for this command, if it changed something.
        node: Option<String>,
        /// Set when a checkout of the box killed the command.
        killed_by_checkout: bool,
        /// Why the command's changes could not be captured (they stay in the box's layer
        /// and are captured by a later node).
        #[serde(default)]
        capture_error: Option<String>,
        /// Why the command was killed, when the box knows (its memory ran out).
        #[serde(default)]
        killed_because: Option<String>,
    },
    /// Auto-capture's state (`None`: capture is off for the box).
    Health {
        capture: Option<crate::capture::CaptureHealth>,
        /// The box's private in-memory mounts and how full they are.
        #[serde(default)]
        scratch: Vec<ScratchUse>,
        /// The process limit in force (the owner's, or the default), `None`: unlimited.
        #[serde(default)]
        pids_limit: Option<u64>,
        /// The host ids box root is (`None`: host root).
        #[serde(default)]
        box_root: Option<agentbox_sandbox::proto::IdRange>,
    },
    Procs {
        /// The running processes.
        procs: Vec<ProcInfo>,
        /// The most recently ended background processes, oldest first (each has `exit`).
        #[serde(default)]
        exited: Vec<ProcInfo>,
    },
    /// A commit or checkout: the node HEAD is now on (`None` when nothing changed).
    Node {
        node: Option<String>,
        killed: usize,
    },
    Ok,
    /// Each of the box's branches and its tip as its host repository now has it (empty:
    /// the box is not from a repository).
    Synced {
        repos: Vec<SyncedRepo>,
    },
    /// Per box repository (in the record's order), its uncommitted paths (`None`: git could
    /// not tell).
    Dirty {
        repos: Vec<Option<Vec<String>>>,
    },
    Error {
        message: String,
        hint: Option<String>,
        /// Exit-code class of the error (see `BoxError::exit_code`).
        #[serde(default = "one")]
        code: i32,
    },
}

fn one() -> i32 {
    1
}

/// One of a running box's private tmpfs mounts (`/tmp`, `/run`, `/dev/shm`): its memory is
/// the box's, so `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScratchUse {
    /// The mount's path inside the box.
    pub path: String,
    pub used_bytes: u64,
    pub size_bytes: u64,
}
