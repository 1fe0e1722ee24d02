//! Tournaments: candidate commands raced in forks of one box, judged by one test.
//!
//! Each candidate gets a fork of the source box at one node (see [`crate::history::fork`]), named
//! `<box>-<candidate>` on its own branch, in which its command and then the test run
//! (`sh -c`, through the provider like `agentbox exec`, each change a node of the fork's
//! history). Candidates run in parallel, at most `parallel` at once. The winner is the first
//! candidate in the order given whose test exits 0 — or, with `first`, the first whose test
//! passes, the others being stopped then.
//!
//! Invariants:
//!
//! * The source box is not touched while the tournament runs (its tree, HEAD, branches and
//!   processes stay exactly as they were); only `keep` moves it, at the end, to the winner.
//! * What a candidate made is gone at the end unless it is kept: the losers' boxes (records,
//!   environments, directories with their logs, pins and branches) without `keep_losers`,
//!   and every candidate's when the tournament is interrupted (`interrupt` set, by a signal
//!   handler). A candidate that runs past `timeout` is stopped and counts as failed.
//! * A candidate is stopped by stopping its box, repeatedly until its worker is done: a
//!   step that would start the box again after the stop sees the cancellation first, or is
//!   stopped once more.
//!
//! Here: what a tournament is asked and answers. The race is `race`, one candidate's run
//! `candidate`, and what the two share about a running candidate `slot`.

use std::path::PathBuf;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::facade::Boxes;
use crate::progress::Progress;
use crate::types::SyncedRepo;
use crate::Result;

mod candidate;
mod ledger;
mod race;
mod removal;
mod slot;

pub use ledger::prune as prune_interrupted;

/// One candidate: a name (its box is `<box>-<name>`) and a shell command.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub name: String,
    pub command: String,
}

/// A tournament as a front end asks for it.
#[derive(Debug, Clone)]
pub struct TournamentSpec {
    /// The box whose node every candidate starts from (its name).
    pub source: String,
    /// The shell command that judges a candidate (exit 0: it passed).
    pub test: String,
    /// In the order that breaks ties.
    pub candidates: Vec<Candidate>,
    /// The node of the source's history to start from (`None`: HEAD).
    pub at: Option<String>,
    /// Move the source box to the winner's node, and its branches to the winner's tips.
    pub keep: bool,
    /// Keep the losers' boxes (stopped) instead of destroying them.
    pub keep_losers: bool,
    /// How many candidates run at once (`None`: all of them).
    pub parallel: Option<usize>,
    /// How long a candidate's command and test may take together (`None`: no limit).
    pub timeout: Option<Duration>,
    /// The first candidate to pass wins, and the others are stopped then.
    pub first: bool,
    /// Set to a signal's number to stop the tournament: every candidate is stopped and
    /// removed, and the tournament ends with [`crate::BoxError::Interrupted`].
    pub interrupt: Arc<AtomicI32>,
}

/// How a candidate ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// It won.
    Won,
    /// Its test passed, but another candidate won (an earlier one in the order given, or,
    /// with `first`, one that passed sooner).
    Passed,
    /// Its command or its test exited with a non-zero status.
    Failed,
    /// It ran past the timeout and was stopped.
    TimedOut,
    /// With `first`: another candidate passed while it ran (or before it started); it was
    /// stopped.
    Lost,
    /// The tournament was interrupted.
    Interrupted,
    /// Its box could not be made or its commands could not be run (see `error`).
    Error,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Won => "won",
            Verdict::Passed => "passed",
            Verdict::Failed => "failed",
            Verdict::TimedOut => "timed-out",
            Verdict::Lost => "lost",
            Verdict::Interrupted => "interrupted",
            Verdict::Error => "error",
        }
    }
}

/// What one candidate produced.
#[derive(Debug, Clone, Serialize)]
pub struct CandidateResult {
    pub name: String,
    /// Its command.
    pub cmd: String,
    /// Its box (`<box>-<name>`); see `kept`.
    #[serde(rename = "box")]
    pub box_name: String,
    /// Its branches and their tips in the host repositories after its commands.
    pub branches: Vec<SyncedRepo>,
    /// Its box's HEAD after its command and test (`None`: the box was never made).
    pub node: Option<String>,
    /// The command's exit status (`None`: not run, or stopped before it ended).
    pub cmd_exit: Option<i32>,
    /// The test's exit status (`None`: not run — the command failed — or stopped).
    pub test_exit: Option<i32>,
    /// How long its command and test took.
    pub duration_ms: u64,
    pub verdict: Verdict,
    /// Why its box could not be made or its commands not run.
    pub error: Option<String>,
    /// The end of what its command and test printed (box-controlled text), at most
    /// [`OUTPUT_TAIL`] bytes; the whole of it is in `log` while the box is kept.
    pub output: String,
    /// Its log (every command with its output and status), while its box is kept.
    pub log: Option<PathBuf>,
    /// Whether its box (made by this tournament) still exists.
    pub kept: bool,
}

/// Where the source box went with `keep`.
#[derive(Debug, Clone, Serialize)]
pub struct SourceMoved {
    /// The source box's HEAD now: a child of the winner's node recording its branches.
    pub node: String,
    /// Its branches' tips in the host repositories.
    pub branches: Vec<SyncedRepo>,
}

/// The outcome of one tournament.
#[derive(Debug, Clone, Serialize)]
pub struct TournamentResult {
    /// The source box.
    pub source: String,
    /// The node every candidate started from.
    pub base: String,
    /// One per candidate, in the order given.
    pub candidates: Vec<CandidateResult>,
    /// The winning candidate's name (`None`: no test passed).
    pub winner: Option<String>,
    /// The winning node.
    pub winner_node: Option<String>,
    /// The winner's box, while it is kept (with `keep` it is destroyed once the source
    /// holds its work).
    pub winner_box: Option<String>,
    /// With `keep` and a winner: where the source box is now.
    pub moved: Option<SourceMoved>,
    /// What the user should know (what was removed or kept, what could not be).
    pub notes: Vec<String>,
}

/// How much of a candidate's output its result carries.
pub const OUTPUT_TAIL: usize = 64 << 10;

/// The file of a candidate's box that holds its log.
pub const LOG_FILE: &str = "tournament.log";

impl Boxes {
    /// Run a tournament (see the module documentation).
    pub fn tournament(
        &self,
        spec: &TournamentSpec,
        progress: &dyn Progress,
    ) -> Result<TournamentResult> {
        race::run(self, spec, progress)
    }
}
