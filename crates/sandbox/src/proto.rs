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
    /// Paths below hidden ones shown again from the base, copy-on-write: the box reads the
    /// host's files there and its writes go to its own layer (the host user's toolchains and
    /// package caches, `~/.cargo`, `~/.npm/_cacache`). Hidden paths below a shown one stay
    /// hidden (`~/.cargo/credentials.toml`), existing on the host or not.
    #[serde(default)]
    pub show: Vec<PathBuf>,
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
    /// Sizes of the box's private in-memory mounts.
    #[serde(default)]
    pub tmpfs: TmpfsSizes,
    /// The host ids box root and its users are (a root box; see [`crate::idmap`]). `None`:
    /// box root is the caller (a rootless box maps the caller itself).
    #[serde(default)]
    pub ids: Option<IdRange>,
}

/// Box ids `0..count` are host uids `uid..uid+count` and gids `gid..gid+count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdRange {
    pub uid: u32,
    pub gid: u32,
    pub count: u32,
}

impl IdRange {
    /// The range root boxes use: the `agentbox` entries of `/etc/subuid` and `/etc/subgid`
    /// (at least 65536 ids each) when the machine's administrator reserved one, else
    /// 65536 ids from 1879048192 (`0x70000000`), above the ranges systemd gives users,
    /// dynamic users and containers.
    pub fn for_root_boxes() -> IdRange {
        const COUNT: u32 = 65536;
        let reserved = |file: &str| -> Option<u32> {
            let text = std::fs::read_to_string(file).ok()?;
            text.lines().find_map(|l| {
                let mut f = l.trim().split(':');
                (f.next()? == "agentbox").then_some(())?;
                let start = f.next()?.parse::<u32>().ok()?;
                let count = f.next()?.parse::<u32>().ok()?;
                (count >= COUNT && start > 0).then_some(start)
            })
        };
        const DEFAULT: u32 = 0x7000_0000;
        IdRange {
            uid: reserved("/etc/subuid").unwrap_or(DEFAULT),
            gid: reserved("/etc/subgid").unwrap_or(DEFAULT),
            count: COUNT,
        }
    }
}

const MIB: u64 = 1 << 20;

/// Byte sizes of a box's private tmpfs mounts (`0`: the kernel's default, half of RAM each).
/// Their pages are memory: sized so that a box cannot pin more of the host's RAM through
/// them than its owner allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TmpfsSizes {
    pub tmp: u64,
    pub run: u64,
    pub shm: u64,
}

impl TmpfsSizes {
    /// `/dev/shm` without a memory limit: Docker's default.
    pub const SHM_DEFAULT: u64 = 64 * MIB;
    /// `/tmp` without a memory limit: enough for a build's or an installer's scratch files
    /// (what needs more belongs in the box's layer, on disk), yet a handful of idle boxes
    /// cannot pin a host's RAM through it. Tmpfs pages are charged to the memory cgroup of
    /// whoever touched them first, so with a limit the limit bounds them.
    pub const TMP_DEFAULT: u64 = 1024 * MIB;

    /// The sizes for a box whose memory limit is `memory` bytes: `/tmp` half of it,
    /// `/dev/shm` a quarter, `/run` (sockets, PID files) an eighth, 64 MiB at most. Without a
    /// limit (`None`) the pages would be charged to nothing the user chose: `/tmp` gets
    /// [`Self::TMP_DEFAULT`] and `/dev/shm` [`Self::SHM_DEFAULT`], each at most what half of
    /// the host's `ram` as the limit would give.
    pub fn for_memory(memory: Option<u64>, ram: u64) -> TmpfsSizes {
        let basis = memory.unwrap_or(ram / 2).max(16 * MIB);
        let (tmp, shm) = match memory {
            Some(_) => (basis / 2, basis / 4),
            None => (
                (basis / 2).min(Self::TMP_DEFAULT),
                (basis / 4).min(Self::SHM_DEFAULT),
            ),
        };
        TmpfsSizes {
            tmp,
            run: (basis / 8).min(64 * MIB),
            shm,
        }
    }

    /// The tmpfs option for a size.
    pub fn option(bytes: u64) -> String {
        if bytes == 0 {
            String::new()
        } else {
            format!(",size={bytes}")
        }
    }
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
        /// `cwd` must exist: the command fails (status 2) instead of starting in the
        /// nearest existing ancestor, which only a default directory may fall back to.
        #[serde(default)]
        exact_cwd: bool,
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

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1024 * MIB;

    /// Without `--memory`, a big host gives a box no more than Docker's `/dev/shm` and a
    /// bounded `/tmp`, not fractions of its RAM.
    #[test]
    fn without_a_memory_limit_tmp_and_shm_are_bounded() {
        let s = TmpfsSizes::for_memory(None, 64 * GIB);
        assert_eq!((s.tmp, s.shm, s.run), (GIB, 64 * MIB, 64 * MIB));
        // A small host: below the bounds, the fractions of half its RAM.
        let s = TmpfsSizes::for_memory(None, 512 * MIB);
        assert_eq!((s.tmp, s.shm, s.run), (128 * MIB, 64 * MIB, 32 * MIB));
        let s = TmpfsSizes::for_memory(None, 256 * MIB);
        assert_eq!((s.tmp, s.shm), (64 * MIB, 32 * MIB));
    }

    /// With `--memory`, the limit bounds the pages (they are charged to the box's cgroup):
    /// the sizes follow it.
    #[test]
    fn with_a_memory_limit_the_sizes_follow_it() {
        let s = TmpfsSizes::for_memory(Some(8 * GIB), 64 * GIB);
        assert_eq!((s.tmp, s.shm, s.run), (4 * GIB, 2 * GIB, 64 * MIB));
        let s = TmpfsSizes::for_memory(Some(256 * MIB), 64 * GIB);
        assert_eq!((s.tmp, s.shm, s.run), (128 * MIB, 64 * MIB, 32 * MIB));
    }
}
