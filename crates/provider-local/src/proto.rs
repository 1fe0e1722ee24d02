//! What the CLI and a box's supervisor say to each other (one JSON message per
//! `SOCK_SEQPACKET` packet, see `agentbox_sandbox::ipc`).

pub use agentbox_boxes::types::{
    ProcExit, ProcInfo, ProcKind, ScratchUse, SyncedRepo, Workdir, EXIT_OUTPUT_LINES, RECENT_EXITS,
};
use agentbox_sandbox::proto::WinSize;
use serde::{Deserialize, Serialize};

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
    /// Start a session (see `agentbox_boxes::sessions`): `argv` on a terminal the
    /// supervisor keeps (`size`: its size until a terminal attaches; `None`: 24×80).
    /// Reply: `Session`.
    SessionStart {
        /// `None`: the command's name (`-2`, `-3` … when taken).
        name: Option<String>,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        /// `None`: the box's `/workspace`.
        cwd: Option<Workdir>,
        size: Option<WinSize>,
        /// Relaunch it after a checkout killed it.
        supervise: bool,
    },
    /// The box's sessions; with `prune`, the exited ones no terminal is attached to are
    /// removed first. Reply: `Sessions`.
    Sessions {
        #[serde(default)]
        prune: bool,
    },
    /// Attach to session `session` (`None`: the box's only one). The message carries one
    /// descriptor: the caller's end of a `SOCK_STREAM` socket pair, the data stream. On it
    /// the supervisor writes the redraw (see `supervisor::screen`; as a terminal's escape
    /// sequences with `size`, plain text without), then the session's output byte for byte;
    /// the caller writes its input, which goes to the session's terminal as it is. `size`
    /// (a terminal's caller) becomes the session's size, and later `Resize` messages on
    /// the connection change it. Replies: `Attached`, then `Exited` once the session's
    /// process ended (after the stream's last byte: the supervisor shuts its side down
    /// first). The caller detaches by closing the stream or the connection; the session
    /// goes on.
    Attach {
        session: Option<String>,
        size: Option<WinSize>,
        /// Replay the scrollback before the screen.
        #[serde(default)]
        history: bool,
    },
    /// On an `Attach` connection: the caller's terminal has a new size.
    Resize {
        size: WinSize,
    },
    /// From the host only: start the box's credential broker with `spec`, or give the
    /// running one `spec`. Reply: `Broker`.
    Broker {
        spec: agentbox_broker::Spec,
    },
    /// From inside the box only: one request of the in-box `agentbox` (see
    /// [`agentbox_boxes::relay`]). Carries the caller's stdin, stdout and stderr; replies `Exited`.
    Relay {
        call: agentbox_boxes::relay::RelayCall,
    },
}

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
    /// A session just started.
    Session {
        session: agentbox_boxes::sessions::SessionInfo,
    },
    /// The box's sessions, and those a prune removed.
    Sessions {
        sessions: Vec<agentbox_boxes::sessions::SessionInfo>,
        #[serde(default)]
        pruned: Vec<agentbox_boxes::sessions::SessionInfo>,
    },
    /// Attached: the data stream follows on the socket the request carried.
    Attached {
        session: agentbox_boxes::sessions::SessionInfo,
    },
    /// Where the box reaches its credential broker.
    Broker {
        endpoint: agentbox_broker::Endpoint,
    },
    /// The request failed: the error's kind and data (see [`agentbox_boxes::relay::wire`]).
    Error {
        error: agentbox_boxes::relay::wire::WireError,
    },
}
