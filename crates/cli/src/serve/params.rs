//! The API's inputs: query strings and JSON bodies, one type per operation, whose schemas
//! (from these doc comments) are the OpenAPI document's. A box is named in the path as on
//! the command line: its name, id, unique id prefix, display name or number in the server's
//! current project.

use std::path::PathBuf;

use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Every project's boxes, not only the server's current project's.
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// The project directory to make the box of (default: the server's current directory's
    /// project).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub project: Option<PathBuf>,
    /// The box's name (default: `<project>-<n>`).
    #[serde(default)]
    pub name: Option<String>,
    /// Start from this checkpoint of the project (default: the project's default one).
    #[serde(default)]
    pub checkpoint: Option<String>,
    /// Start from no checkpoint, even when the project has a default one.
    #[serde(default)]
    pub no_checkpoint: bool,
    /// Use a checkpoint whose base changed since it was made.
    #[serde(default)]
    pub accept_stale: bool,
    /// The provider to run it: `local` or `docker` (default: `box.provider`, else local).
    #[serde(default)]
    pub provider: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    /// The command and its arguments, passed as they are (no shell: use ["sh", "-c", "..."]
    /// for one).
    #[schema(min_items = 1)]
    pub argv: Vec<String>,
    /// The directory inside the box it starts in (default: /workspace).
    #[serde(default)]
    pub workdir: Option<String>,
    /// Record what the command changed as a node (default: true).
    #[serde(default)]
    pub capture: Option<bool>,
    /// The most bytes of output returned (default 32768, at most 1048576); the rest is
    /// left out in the middle, with a note.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_output: Option<usize>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// Only HEAD and its ancestors, HEAD first.
    #[serde(default)]
    pub ancestors: bool,
    /// Only the leaves: the nodes nothing descends from.
    #[serde(default)]
    pub leaves: bool,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DiffQuery {
    /// The node to compare from (default: HEAD).
    pub from: Option<String>,
    /// The node to compare to (default: the box's working tree).
    pub to: Option<String>,
    /// Each changed file's content difference too (a unified diff).
    #[serde(default)]
    pub patch: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckoutBody {
    /// The node to move the box to: HEAD~N, a tag, an id or a unique id prefix.
    pub reference: String,
    /// Keep the box's processes running (the tree is restored under them); by default a
    /// checkout kills them.
    #[serde(default)]
    pub keep_processes: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TagBody {
    /// The node to tag (default: HEAD).
    #[serde(default)]
    pub reference: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// The new box's name (default: `<box>-fork-<n>`).
    #[serde(default)]
    pub name: Option<String>,
    /// The node to fork at (default: HEAD).
    #[serde(default)]
    pub at: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateBody {
    /// Its name (letters, digits, '.', '_', '-').
    pub name: String,
    /// The shell command it runs in its own fork of the box (named `<box>-<name>`).
    pub command: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TournamentBody {
    /// The test: a shell command run in each candidate's fork after the candidate's own;
    /// exit status 0 passes.
    pub test: String,
    /// The candidates, each run in its own fork.
    pub candidates: Vec<CandidateBody>,
    /// Fork at this node (default: HEAD).
    #[serde(default)]
    pub at: Option<String>,
    /// Move the box to the winner's node and its branches to the winner's tips.
    #[serde(default)]
    pub keep: bool,
    /// Keep the losers' boxes too.
    #[serde(default)]
    pub keep_losers: bool,
    /// How many candidates run at once (default: all).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub parallel: Option<usize>,
    /// Seconds a candidate's command and test may take together (default: no limit).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// The first candidate to pass wins (instead of the first in the order given).
    #[serde(default)]
    pub first: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointBody {
    /// The checkpoint's name (default: one made from the box's).
    #[serde(default)]
    pub name: Option<String>,
    /// Make it the project's default: new boxes start from it.
    #[serde(default)]
    pub set_default: bool,
    /// Flatten it into one layer.
    #[serde(default)]
    pub merged: bool,
    /// Move the name to this capture when a checkpoint has it already.
    #[serde(default)]
    pub replace: bool,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CheckpointsQuery {
    /// The project whose checkpoints to list (default: the server's current project).
    #[param(value_type = Option<String>)]
    pub project: Option<PathBuf>,
    /// Every project's checkpoints.
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DestroyQuery {
    /// Delete its branches from the host repositories too.
    #[serde(default)]
    pub delete_branch: bool,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadQuery {
    /// The file, inside the box (relative paths are under /workspace).
    pub path: String,
    /// The byte to start at (default 0).
    #[serde(default)]
    pub offset: u64,
    /// The most bytes to read (default and at most 4 MiB).
    #[param(minimum = 1)]
    pub limit: Option<u64>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FilesQuery {
    /// The directory, inside the box (default: /workspace).
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only this box's events (default: every environment's).
    #[serde(rename = "box")]
    #[param(rename = "box")]
    pub target: Option<String>,
}
