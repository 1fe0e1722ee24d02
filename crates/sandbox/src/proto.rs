//! What the supervisor and a box's PID 1 say to each other (over [`crate::ipc`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How a box is built; everything PID 1 needs to set up the box's root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxSpec {
    /// Host name inside the box (the box's name).
    pub hostname: String,
    /// The read-only base root: `/` for the host's own, or an image's root directory.
    pub base: PathBuf,
    /// The box's read-only layers above the base, top first.
    pub lowers: Vec<PathBuf>,
    /// Where the box's writes go, and the overlay work directory next to it.
    pub upper: PathBuf,
    pub workdir: PathBuf,
    /// An empty host directory PID 1 mounts its private scratch tmpfs on (inside its own
    /// mount namespace: nothing appears on the host).
    pub scratch: PathBuf,
    /// Directories of the base that appear empty inside the box (home directories, the
    /// agentbox home, container-engine state, the project's own directory).
    pub hide: Vec<PathBuf>,
    pub network: Network,
    /// Host paths made visible inside the box (below `/run`, which is private).
    pub binds: Vec<Bind>,
    /// Run without root: a user namespace maps the caller to root inside; the base is the
    /// host's directories bound read-only over the box's layer (the kernel does not let an
    /// unprivileged overlay use the host's `/`, which has locked mounts below it), so only
    /// the box's own paths — `/workspace`, `/root`, new top-level directories — are writable
    /// and versioned.
    #[serde(default)]
    pub rootless: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// The host's network (agents need package registries).
    #[default]
    Host,
    /// A private network namespace with only a loopback interface.
    None,
    /// A private network namespace with outbound access and published ports, through a
    /// user-mode network stack the supervisor attaches (see [`crate::net`]); the host's
    /// loopback is out of reach.
    Private,
}

impl Network {
    /// Whether the box has a network namespace of its own.
    pub fn own_namespace(self) -> bool {
        self != Network::Host
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bind {
    pub src: PathBuf,
    /// Absolute path inside the box; must be below `/run`.
    pub dst: PathBuf,
    pub readonly: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WinSize {
    pub rows: u16,
    pub cols: u16,
}

/// Supervisor → PID 1.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ToInit {
    /// Start a process. Without `pty`, the message carries three descriptors: its stdin,
    /// stdout and stderr. With `pty`, PID 1 allocates a terminal inside the box and returns
    /// its master side with `Started`.
    Spawn {
        id: u64,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
        pty: Option<WinSize>,
    },
    /// Send `signal` to the process group of `pid` (a box PID).
    Signal { pid: i32, signal: i32 },
}

/// PID 1 (or the process that forked it) → supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum FromInit {
    /// Sent first, by the launcher process: PID 1's PID on the host.
    Pid1 { host_pid: i32 },
    /// The box is set up and PID 1 takes requests.
    Ready,
    /// Setting up the box failed; PID 1 exits after this.
    SetupFailed { error: String },
    /// A `Spawn` succeeded (a PTY master accompanies it when one was asked for).
    Started { id: u64, pid: i32 },
    /// A `Spawn` failed (for example, the command does not exist).
    Failed {
        id: u64,
        error: String,
        /// The shell's status for it: 127 when the command does not exist, else 126.
        status: i32,
    },
    /// A spawned process ended: `code` when it exited, `signal` when a signal killed it.
    Exited {
        pid: i32,
        code: Option<i32>,
        signal: Option<i32>,
    },
}

impl FromInit {
    /// The shell-style status of an `Exited`: the code, or 128 + the signal.
    pub fn status(code: Option<i32>, signal: Option<i32>) -> i32 {
        match (code, signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 255,
        }
    }
}
