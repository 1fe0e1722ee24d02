//! The tools' inputs: one type per tool, whose JSON schema (from these doc comments) is what
//! a client sees. A box is named as on the command line: its name, id, unique id prefix,
//! display name, or number in the server's current project; left out, it is the current
//! project's only box (inside a box: that box, the only one it may name).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

/// A box, and nothing else.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BoxParams {
    /// The box: name, id, unique id prefix, display name or number (default: the current
    /// project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListParams {
    /// Every project's boxes, not only the current project's.
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateParams {
    /// The project directory to make the box of (default: the server's current directory's
    /// project).
    #[serde(default)]
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

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ExecParams {
    #[serde(rename = "box", default)]
    /// The box (default: the current project's only box).
    pub target: Option<String>,
    /// The command and its arguments, passed as they are (no shell: use ["sh", "-c", "..."]
    /// for one).
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
    pub max_output: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadFileParams {
    /// The box (default: the current project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
    /// The file, inside the box (relative paths are under /workspace).
    pub path: String,
    /// The byte to start at (default 0).
    #[serde(default)]
    pub offset: u64,
    /// The most bytes to read (default and at most 4 MiB).
    #[serde(default)]
    pub limit: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteFileParams {
    /// The box (default: the current project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
    /// The file, inside the box (relative paths are under /workspace); replaced if it exists.
    pub path: String,
    /// Its new content.
    pub content: String,
    /// `utf-8` (the default) or `base64` (for binary content).
    #[serde(default)]
    pub encoding: Option<String>,
    /// Make the file's missing parent directories.
    #[serde(default)]
    pub parents: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListFilesParams {
    /// The box (default: the current project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
    /// The directory, inside the box (default: /workspace; relative paths are under it).
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct LogParams {
    /// The box (default: the current project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
    /// Only HEAD and its ancestors, HEAD first (instead of the whole tree).
    #[serde(default)]
    pub ancestors: bool,
    /// Only the nodes nothing descends from (each line of work's newest node).
    #[serde(default)]
    pub leaves: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ShowParams {
    /// The box (default: the current project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
    /// The node: HEAD (default), HEAD~N, a tag, an id or a unique id prefix.
    #[serde(default)]
    pub reference: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct DiffParams {
    /// The box (default: the current project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
    /// The node to compare from (default: HEAD).
    #[serde(default)]
    pub from: Option<String>,
    /// The node to compare to (default: the box's working tree).
    #[serde(default)]
    pub to: Option<String>,
    /// Each changed file's content difference too (a unified diff).
    #[serde(default)]
    pub patch: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CheckoutParams {
    /// The box (default: the current project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
    /// The node to move the box to: HEAD~N, a tag, an id or a unique id prefix.
    pub reference: String,
    /// Keep the box's processes running (the tree is restored under them); by default a
    /// checkout kills them.
    #[serde(default)]
    pub keep_processes: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TagParams {
    /// The box (default: the current project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
    /// The tag to set or move (left out: list the box's tags).
    #[serde(default)]
    pub name: Option<String>,
    /// The node to tag (default: HEAD).
    #[serde(default)]
    pub reference: Option<String>,
    /// Delete tag `name` instead.
    #[serde(default)]
    pub delete: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ForkParams {
    /// The box to fork (default: the current project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
    /// The new box's name (default: `<box>-fork-<n>`).
    #[serde(default)]
    pub name: Option<String>,
    /// The node to fork at (default: HEAD).
    #[serde(default)]
    pub at: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CandidateParams {
    /// Its name (letters, digits, '.', '_', '-').
    pub name: String,
    /// The shell command it runs in its own fork of the box (named `<box>-<name>`).
    pub command: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TournamentParams {
    /// The box whose forks race (default: the current project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
    /// The test: a shell command run in each candidate's fork after the candidate's own;
    /// exit status 0 passes.
    pub test: String,
    /// The candidates, each run in its own fork.
    pub candidates: Vec<CandidateParams>,
    /// Fork at this node (default: HEAD).
    #[serde(default)]
    pub at: Option<String>,
    /// Move the box to the winner's node and its branches to the winner's tips (its
    /// processes are killed, as by a checkout). Without it the box is left as it was and
    /// the winner's box is kept.
    #[serde(default)]
    pub keep: bool,
    /// Keep the losers' boxes too.
    #[serde(default)]
    pub keep_losers: bool,
    /// How many candidates run at once (default: all).
    #[serde(default)]
    pub parallel: Option<usize>,
    /// Seconds a candidate's command and test may take together (default: no limit).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// The first candidate to pass wins (instead of the first in the order given).
    #[serde(default)]
    pub first: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CheckpointCreateParams {
    /// The box to capture (default: the current project's only box).
    #[serde(rename = "box", default)]
    pub target: Option<String>,
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

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CheckpointListParams {
    /// The project whose checkpoints to list (default: the server's current project).
    #[serde(default)]
    pub project: Option<PathBuf>,
    /// Every project's checkpoints.
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct DestroyParams {
    /// The box to destroy (always named: its name, id or number).
    #[serde(rename = "box")]
    pub target: String,
    /// Delete its branches from the host repositories too.
    #[serde(default)]
    pub delete_branch: bool,
}
