//! The host operations both network front ends run — the MCP tools and `agentbox serve`'s
//! routes: each turns plain inputs into one façade call and its answer, so that the two
//! front ends cannot drift apart in what a create, fork, tournament or checkpoint does.

use std::path::PathBuf;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use agentbox_boxes::checkpoints::checkpoint::{Checkpoint, CheckpointSpec};
use agentbox_boxes::history::tournament::{Candidate, TournamentSpec};
use agentbox_boxes::lifecycle::create::{Spec, Workspace};
use agentbox_boxes::records::registry;

use super::server::{Host, Made, Notes};
use crate::errors::CliResult;

/// What a new box is made from (a project directory, default the server's current one;
/// a checkpoint).
pub(crate) struct NewBox {
    pub name: Option<String>,
    pub project: Option<PathBuf>,
    pub checkpoint: Option<String>,
    pub no_checkpoint: bool,
    pub accept_stale: bool,
    pub provider: Option<String>,
}

/// A tournament of candidate commands in forks of a box, judged by `test`.
pub(crate) struct Race {
    pub test: String,
    /// (name, command) of each candidate.
    pub candidates: Vec<(String, String)>,
    pub at: Option<String>,
    pub keep: bool,
    pub keep_losers: bool,
    pub parallel: Option<usize>,
    /// Seconds a candidate's command and test may take together.
    pub timeout: Option<u64>,
    pub first: bool,
}

impl Host {
    /// Create a box (left running), with what the creation said.
    pub(crate) fn create_box(&self, new: NewBox) -> CliResult<Made> {
        let spec = Spec {
            name: new.name,
            workspace: match new.project {
                Some(d) => Workspace::From(d),
                None => Workspace::ProjectOf(self.cwd.clone()),
            },
            from_ref: None,
            no_git: false,
            settings: Default::default(),
            checkpoint: new.checkpoint,
            no_checkpoint: new.no_checkpoint,
            resync: None,
            accept_stale: new.accept_stale,
            provider: new.provider,
            engine: None,
            dockerfile: None,
        };
        let notes = Notes::default();
        let made = self.boxes.create(&spec, &notes)?;
        Ok(Made {
            record: made.record,
            head: made.head,
            forked_from: None,
            notes: notes.take(),
        })
    }

    /// Fork box `source` at `at` (default HEAD) into a new box on its own branch.
    pub(crate) fn fork_box(
        &self,
        source: String,
        name: Option<String>,
        at: Option<String>,
    ) -> CliResult<Made> {
        let spec = agentbox_boxes::history::fork::ForkSpec {
            source: source.clone(),
            name,
            at,
        };
        let notes = Notes::default();
        let made = self.boxes.fork(&spec, &notes)?;
        Ok(Made {
            record: made.record,
            head: made.head,
            forked_from: Some(source),
            notes: notes.take(),
        })
    }

    /// Race `race`'s candidates in forks of box `source`.
    pub(crate) fn race(
        &self,
        source: String,
        race: Race,
    ) -> CliResult<agentbox_boxes::history::tournament::TournamentResult> {
        let spec = TournamentSpec {
            source,
            test: race.test,
            candidates: race
                .candidates
                .into_iter()
                .map(|(name, command)| Candidate { name, command })
                .collect(),
            at: race.at,
            keep: race.keep,
            keep_losers: race.keep_losers,
            parallel: race.parallel,
            timeout: race.timeout.map(std::time::Duration::from_secs),
            first: race.first,
            interrupt: Arc::new(AtomicI32::new(0)),
        };
        Ok(self.boxes.tournament(&spec, &Notes::default())?)
    }

    /// Capture box `box_name` as a checkpoint of its project (from the host: never the
    /// in-box request, which may not replace or set the default).
    pub(crate) fn checkpoint(
        &self,
        box_name: String,
        name: Option<String>,
        (set_default, merged, replace): (bool, bool, bool),
    ) -> CliResult<Checkpoint> {
        Ok(self.boxes.checkpoint_create(&CheckpointSpec {
            box_name,
            name,
            set_default,
            merged,
            replace,
            in_box: false,
        })?)
    }

    /// The checkpoints of the project of `project` (default: the current directory), or of
    /// every project.
    pub(crate) fn checkpoints(
        &self,
        project: Option<PathBuf>,
        all: bool,
    ) -> CliResult<Vec<Checkpoint>> {
        let dir = project.unwrap_or_else(|| self.cwd.clone());
        let here = registry::current_project(&self.home, &dir)?;
        Ok(self.boxes.checkpoints(here.as_deref(), all)?)
    }
}
