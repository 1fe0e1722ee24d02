//! What the domain and its providers say about boxes' processes and state: the types of
//! the `Provider` trait's answers (and of the local provider's wire protocol, which carries
//! them as they are).

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcKind {
    Exec,
    Shell,
    Spawn,
    /// The process of a session (see [`crate::sessions`]): on a terminal its provider owns.
    Session,
}

/// Where the supervisor's in-box socket directory appears inside the box.
pub const INBOX_DIR: &str = "/run/agentbox/ctl";

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

/// How much of the start of a process's log [`output_lines`] is given.
pub const EXIT_OUTPUT_HEAD: usize = 16 * 1024;

/// The first `n` non-blank lines of `head` (the start of a process's log), each cut to a
/// line's worth of characters: what is kept of its output with its exit.
pub fn output_lines(head: &[u8], n: usize) -> Vec<String> {
    const WIDTH: usize = 200;
    String::from_utf8_lossy(head)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .map(|l| {
            let mut l = l.trim_end().to_owned();
            if let Some((cut, _)) = l.char_indices().nth(WIDTH) {
                l.truncate(cut);
                l.push('…');
            }
            l
        })
        .collect()
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

/// How auto-capture of a running box is doing, as `agentbox status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureHealth {
    /// `watching` (inotify plus the backstop scan), `scanning` (the backstop scan alone,
    /// changes are seen within 10 s), `failing` (changes may not be captured: see
    /// `problem`), or `starting`.
    pub mode: CaptureMode,
    /// Why the mode is not `watching`, or why the last capture failed.
    pub problem: Option<String>,
    /// The directory the box's writes land in, as watched.
    pub layer: Option<PathBuf>,
    /// How many directories inotify watches.
    pub watches: usize,
    /// The last automatic node attempt that succeeded (with or without a node).
    pub last_capture: Option<DateTime<Utc>>,
    /// Why the last automatic node attempt failed (`None` once one succeeds again).
    pub failure: Option<String>,
}

impl Default for CaptureHealth {
    fn default() -> Self {
        CaptureHealth {
            mode: CaptureMode::Starting,
            problem: None,
            layer: None,
            watches: 0,
            last_capture: None,
            failure: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaptureMode {
    Starting,
    Watching,
    Scanning,
    Failing,
}

impl CaptureHealth {
    /// The watcher's part of `from` (mode, problem, layer, watches) replaces this one's;
    /// the capture outcome stays (it is recorded by whoever captured: see `record`).
    pub fn update_watcher(&mut self, from: &CaptureHealth) {
        self.mode = from.mode;
        self.problem = from.problem.clone();
        self.layer = from.layer.clone();
        self.watches = from.watches;
    }

    /// The outcome of one automatic node attempt (after a command, or in the background).
    pub fn record(&mut self, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => {
                self.last_capture = Some(Utc::now());
                self.failure = None;
            }
            Err(e) => self.failure = Some(e),
        }
    }

    /// What a reader is told: a failed capture makes the whole state `failing`.
    pub fn effective(&self) -> CaptureHealth {
        let mut out = self.clone();
        if let Some(f) = &self.failure {
            out.mode = CaptureMode::Failing;
            out.problem = Some(format!("capturing the box's changes failed: {f}"));
        }
        out
    }

    /// One line for humans: `watching 12 directories of …`, `scan every 10s only: …`.
    pub fn describe(&self) -> String {
        match self.mode {
            CaptureMode::Starting => "starting".to_owned(),
            CaptureMode::Watching => format!("watching ({} directories)", self.watches),
            CaptureMode::Scanning => format!(
                "degraded: a scan every {}s only ({})",
                BACKSTOP.as_secs(),
                self.problem.as_deref().unwrap_or("no watcher")
            ),
            CaptureMode::Failing => format!(
                "FAILING: {}",
                self.problem.as_deref().unwrap_or("unknown error")
            ),
        }
    }
}

/// How a foreground command ended.
#[derive(Debug, Clone)]
pub struct ExecOutcome {
    pub status: i32,
    pub node: Option<String>,
    pub killed_by_checkout: bool,
    /// Why the command's changes could not be captured as a node.
    pub capture_error: Option<String>,
    /// Why the command was killed, when the box knows (its memory ran out).
    pub killed_because: Option<String>,
}

/// How often auto-capture's backstop scan runs, whatever the watcher does.
pub const BACKSTOP: Duration = Duration::from_secs(10);

/// One thing boxes left behind, as `prune` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct BoxLeftover {
    /// `record`, `environment`, `supervisor`, `pin`, `view`, `cgroup`.
    pub kind: String,
    /// What it is, for people.
    pub what: String,
    /// The path (or ref) removed.
    pub target: String,
    pub outcome: PruneOutcome,
}

/// What names a checkpoint where a provider keeps it, as `prune --all` is told it: a
/// provider removes a name of its checkpoints' (a Docker image's `agentbox-ckpt-*` tag)
/// that none of these names.
#[derive(Debug, Clone, Default)]
pub struct NamedCheckpoints {
    /// Image names and ids the checkpoints' manifests and the boxes' records name.
    pub images: std::collections::BTreeSet<String>,
    /// Checkpoints by (project key, name) that a manifest is, or a box was made from.
    pub checkpoints: std::collections::BTreeSet<(String, String)>,
}

/// What `prune` did with a leftover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PruneOutcome {
    Removed,
    WouldRemove,
    /// It could not be removed: why.
    Kept(String),
}

impl std::fmt::Display for PruneOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PruneOutcome::Removed => f.write_str("removed"),
            PruneOutcome::WouldRemove => f.write_str("would remove"),
            PruneOutcome::Kept(why) => write!(f, "kept: {why}"),
        }
    }
}

/// As text (`removed`, `would remove`, `kept: <why>`), which is what `--json` has always shown.
impl Serialize for PruneOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

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

/// What a new box is made with: `lifecycle::create::Settings` over the configuration, checked.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    pub network: agentbox_sandbox::proto::Network,
    /// Host ports forwarded into the box; empty unless `network` is private.
    pub publish: Vec<agentbox_sandbox::net::Publish>,
    pub capture: bool,
    /// Run a credential broker for the box (see `crate::agents::broker`).
    pub broker: bool,
    /// `KEY=VALUE` each, checked.
    pub env: Vec<String>,
    pub ignore: Vec<String>,
    /// `box.hostPaths` entries, checked.
    pub host_paths: Vec<String>,
    /// `box.homeTools` entries, checked.
    pub home_tools: Vec<String>,
    pub keep: u64,
    /// Checked like `Limits::validate`; whether cgroups are available is `create`'s to check.
    pub limits: crate::cgroup::Limits,
    pub image: Option<String>,
    pub carry: bool,
    /// The ignored files to copy into the box: git.envPatterns when git.withEnv is on,
    /// else none.
    pub with_env: Vec<String>,
}

/// One changed path of a content diff: the change and its unified diff.
#[derive(Debug, Clone, Serialize)]
pub struct Patched {
    #[serde(flatten)]
    pub change: agentbox_store::fsops::diff::Change,
    /// A unified diff, or a line naming a binary or large file (`None`: metadata only).
    pub patch: Option<String>,
}
